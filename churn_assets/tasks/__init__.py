"""Tasks: templates, the question parser, task sets and their generator, gold answers.

Arms may import `templates`, `parser`, `answers` and `task_set`; never `gold` or `generator` (they fold
the ledger).
"""
