-- Two databases on one Postgres 16 + pgvector: the warehouse (per-world schemas) and Dagster's storage.
CREATE DATABASE dagster;
\connect churnbench
CREATE EXTENSION IF NOT EXISTS vector;
