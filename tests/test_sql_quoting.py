"""One way to quote SQL (decision 77): names go through `psycopg.sql.Identifier`, statements are composed with
`psycopg.sql.SQL(...).format(...)`, values are bound parameters. This scan of the packages' source fails when SQL
text is built by hand again:

- an f-string that reads as SQL (`f"SELECT ... FROM {table}"`), outside a `raise` (messages may quote SQL);
- SQL text formatted with `%` or `str.format`, or concatenated with something that is not a literal (`"... '" +
  NAME + "'"`); `sql.SQL(template).format(...)` is the allowed spelling of the same thing;
- hand quoting of an identifier: `'"' + name`, `'"' + ... + '"'`-style joins, `.replace('"', '""')`, or a
  placeholder between double quotes (`f'"{schema}"."{table}"'`, `'"{schema}"'`).

It reads the AST, so comments, docstrings and plain string constants never match; the planted examples at the
bottom show that each rule fires.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("churn_assets", "saas_mock", "contracts")
# Files whose SQL another change owns, left to it (decision 78), with the reason: each must still have findings (a
# stale entry fails below), so the list empties itself as they are fixed.
PENDING: dict[str, str] = {
    # The results catalog (SQLAlchemy Core and Alembic, decisions 65-67) passes its table to to_regclass as a
    # hand-quoted name.
    "churn_assets/evaluation/catalog_schema.py": "the results catalog's owner",
    "churn_assets/evaluation/migrations/versions/0001_results_runs.py": "the results catalog's owner",
}

# SQL as it is written here: upper-case keywords. Plain English in messages and docs is lower case.
SQL_TEXT = re.compile(
    r"\b(SELECT|INSERT\s+INTO|DELETE\s+FROM|UPDATE\s+\S+\s+SET|TRUNCATE|COPY\s+\S+|GRANT|REVOKE|"
    r"(CREATE|DROP|ALTER)\s+(TABLE|INDEX|SCHEMA|DATABASE|ROLE|VIEW|EXTENSION|DEFAULT|SYSTEM)|COMMENT\s+ON|"
    r"FROM|JOIN|WHERE|CASE\s+WHEN|FILTER\s*\(|ORDER\s+BY|GROUP\s+BY|LIMIT|UNION|EXCEPT)\b")
QUOTED_PLACEHOLDER = re.compile(r'"\{[^{}]*\}"')  # "{schema}" in a template
# A double-quoted placeholder that quotes a name: a qualified one ("{}"."{}") or the whole string ('"{}"');
# JSON text ('"hash":"{}"') quotes values the same way and is no SQL.
QUALIFIED_OR_WHOLE = re.compile(r'"\{[^{}]*\}"\."|\."\{[^{}]*\}"|^"\{[^{}]*\}"$')


def _quotes_a_name(text: str) -> bool:
    return bool(QUOTED_PLACEHOLDER.search(text)) and bool(SQL_TEXT.search(text) or QUALIFIED_OR_WHOLE.search(text))


def _literal_text(node: ast.JoinedStr) -> str:
    """An f-string's text with every placeholder as `{}`."""
    return "".join(v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}" for v in node.values)


def _is_sql_composer(call: ast.AST) -> bool:
    """`sql.SQL(...)` / `SQL(...)` (psycopg's or psycopg2's): the receiver of an allowed `.format`."""
    if not isinstance(call, ast.Call):
        return False
    f = call.func
    return (isinstance(f, ast.Attribute) and f.attr == "SQL") or (isinstance(f, ast.Name) and f.id == "SQL")


def _str_constant(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _sql_constants(tree: ast.Module) -> set[str]:
    """Module-level names bound to SQL-looking text: a string, or a dict/tuple of strings."""
    names: set[str] = set()
    for stmt in tree.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        if value is None:
            continue
        texts = [_str_constant(n) for n in ast.walk(value)]
        if any(t is not None and SQL_TEXT.search(t) for t in texts):
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Subscript | ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def findings(source: str, filename: str = "<source>") -> list[str]:
    """Every place `source` builds SQL text by hand, as `file:line: what`."""
    tree = ast.parse(source, filename)
    in_raise: set[int] = {id(n) for r in ast.walk(tree) if isinstance(r, ast.Raise) for n in ast.walk(r)}
    sql_names = _sql_constants(tree)
    out: list[str] = []

    def found(node: ast.AST, what: str) -> None:
        out.append(f"{filename}:{getattr(node, 'lineno', '?')}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = _literal_text(node)
            if _quotes_a_name(text):
                found(node, f"identifier quoted by hand in an f-string: {text[:80]!r}")
            elif id(node) not in in_raise and "{}" in text and SQL_TEXT.search(text):
                found(node, f"SQL built with an f-string: {text[:80]!r}")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            text = _str_constant(node.left)
            if text is not None and SQL_TEXT.search(text):
                found(node, f"SQL built with %-formatting: {text[:80]!r}")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            sides = (_str_constant(node.left), _str_constant(node.right))
            if '"' in sides and not all(s is not None for s in sides):
                found(node, "identifier quoted by hand ('\"' + ...)")
            elif any(s is not None and SQL_TEXT.search(s) for s in sides) and None in sides:
                found(node, f"SQL text concatenated with a value: {next(s for s in sides if s)[:80]!r}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver, attr = node.func.value, node.func.attr
            text = _str_constant(receiver)
            if attr == "format" and not _is_sql_composer(receiver):
                if text is not None and (SQL_TEXT.search(text) or _quotes_a_name(text)):
                    found(node, f"SQL built with str.format: {text[:80]!r}")
                elif text is None and _root_name(receiver) in sql_names:
                    found(node, f"SQL constant {_root_name(receiver)} filled in with str.format")
            elif attr == "join" and text == '"':
                found(node, "identifier quoted by hand ('\"'.join)")
            elif attr == "replace" and [_str_constant(a) for a in node.args] == ['"', '""']:
                found(node, "identifier escaped by hand (.replace('\"', '\"\"'))")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _quotes_a_name(node.value):
            found(node, f"identifier quoted by hand in a template: {node.value[:80]!r}")
    return sorted(set(out))


def package_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_no_sql_is_built_by_hand_in_the_packages() -> None:
    problems = []
    for path in package_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel not in PENDING:
            problems += findings(path.read_text(), rel)
    assert problems == [], "build SQL with psycopg.sql (Identifier, SQL(...).format, bound values):\n" + "\n".join(
        problems)


def test_the_pending_rewrites_are_still_pending() -> None:
    """An entry of PENDING whose file has become clean (or is gone) must be removed, so it cannot hide a
    regression later."""
    for rel, owner in PENDING.items():
        path = ROOT / rel
        assert path.exists() and findings(path.read_text(), rel), (
            f"{rel} builds no SQL by hand any more (fixed by {owner}): remove it from PENDING")


def test_the_scan_covers_the_sql_modules() -> None:
    # The modules that talk to Postgres are among the files scanned (a moved package would silently escape).
    scanned = {p.relative_to(ROOT).as_posix() for p in package_files()}
    for rel in ("churn_assets/grounding/staging.py", "churn_assets/fabric/postgres.py",
                "churn_assets/grounding/vector_index.py", "churn_assets/services/postgres.py",
                "saas_mock/projection.py"):
        assert rel in scanned


# ---------------------------------------------------------------------------------------------------
# Planted examples: each rule fires on the pattern it is for, and not on the allowed spellings
# ---------------------------------------------------------------------------------------------------

PLANTED = {
    # the staging module's old helper and its uses
    "q_helper": """def q(*parts):\n    return ".".join('"' + p.replace('"', '""') + '"' for p in parts)\n""",
    "fstring_select": """def f(schema, table):\n    return f"SELECT count(*) FROM {schema}.{table}"\n""",
    "fstring_case": """def f(col, day):\n    return f"CASE WHEN {col} <= {day} THEN {col} END AS {col}"\n""",
    "fstring_quoted": ("def f(conn, schema, table):\n"
                       """    conn.execute("SELECT to_regclass(%s)", (f'"{schema}"."{table}"',))\n"""),
    "create_database": """def f(cur, db):\n    cur.execute(f'CREATE DATABASE "{db}"')\n""",
    "percent": """def f(conn, t):\n    conn.execute("DELETE FROM %s WHERE day = 1" % t)\n""",
    "str_format": """def f(conn, s):\n    conn.execute("SELECT 1 FROM {schema}.ledger".format(schema=s))\n""",
    "format_of_constant": ("Q = {'a': 'SELECT user_id FROM {schema}.users'}\n"
                           "def f(conn, s):\n    conn.execute(Q['a'].format(schema=s))\n"),
    "concatenated_value": """UNALLOCATED = "u"\nQ = "SELECT '" + UNALLOCATED + "', x FROM t"\n""",
    "quoted_template": """T = 'SELECT 1 FROM "{schema}".t'\n""",
    "quoted_name": """def f(name):\n    return f'"{name}"'\n""",
}

ALLOWED = """
from psycopg import sql

Q = {"a": "SELECT user_id FROM {schema}.users WHERE day = %(day)s"}

def f(conn, schema, table, day, measure):
    conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE day = %s").format(sql.Identifier(schema, table)), (day,))
    conn.execute(sql.SQL(Q[measure]).format(schema=sql.Identifier(schema)), {"day": day})
    lock = f"churnbench staging {schema}.{table} {day}"
    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (lock,))
    if day is None:
        raise ValueError(f"run `CREATE EXTENSION vector` in {schema} first")
    line = f'{{"seq":{day},"hash":"{table}"}}'  # JSON, not SQL
    return f"{schema}.{table} [{day}] {line}"
"""


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_planted_hand_built_statement_is_found(name: str) -> None:
    assert findings(PLANTED[name], name), f"the scan misses the {name} pattern"


def test_the_allowed_spellings_are_not_flagged() -> None:
    assert findings(ALLOWED) == []


def test_the_old_staging_module_would_fail(tmp_path: Path) -> None:
    # The helper and the statements this decision removed, as they were: the scan finds each kind.
    old = '''
def q(*parts: str) -> str:
    return ".".join('"' + p.replace('"', '""') + '"' for p in parts)

def write_sql(table, names, select):
    return [f"DELETE FROM {table} WHERE {q('refresh_day')} = CAST(%(day)s AS date)",
            f"INSERT INTO {table} ({names}, {q('refresh_day')}) SELECT s.*, CAST(%(day)s AS date) FROM ({select}) AS s"]
'''
    kinds = {line.split(": ", 1)[1].split(":")[0] for line in findings(old)}
    assert kinds >= {"identifier quoted by hand ('\"' + ...)", "identifier escaped by hand (.replace('\"', '\"\"'))",
                     "SQL built with an f-string"}
