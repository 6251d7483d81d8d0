"""The catalog's revisions, oldest first (Alembic reads them by path; this file only makes them package data)."""
