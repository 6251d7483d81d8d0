"""The SQL library of the independent gold: named fragments read from `sql/*.sql`, composed into one query.

`sql/states.sql` holds the class states (each a named SELECT that becomes a CTE of that name; a fragment
with a `-- class:` line reads the truth table at its class's served day), `sql/templates.sql` one query per
template over them, `sql/stores.sql` the content of each store built by the fold (for the store-parity
checks), over the same states. A query gets exactly the CTEs it names, directly or through other CTEs, in
file order; the classes it reads are the `class:` fragments among them, so the classes a SQL answer depends
on are visible in its text and tested against the template's declared classes.

Format of a fragment: a header line `-- name: <cte>` (or `-- template: <template id>`, `-- store: <query>`),
optional attribute lines right after it (`-- class: <entity class>`, `-- span: true`), then SQL. Other comment
lines are documentation and are dropped. Placeholders are `{name}` (psycopg.sql.SQL.format), filled with
literals.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from churn_assets.world.events import ENTITY_CLASSES

_HEADER = re.compile(r"^--\s*(name|template|store):\s*(\S+)\s*$")
_ATTRIBUTE = re.compile(r"^--\s*(class|span):\s*(\S+)\s*$")
_WORD = re.compile(r"\b[a-z_][a-z0-9_]*\b")
DAY = "{day}"  # a class fragment's served day; rewritten to `{day__<class>}` so one map fills every class


def day_placeholder(entity_class: str) -> str:
    return f"day__{entity_class}"


@dataclass(frozen=True)
class Fragment:
    name: str
    body: str  # SQL with `{placeholders}`; comments dropped
    entity_class: str | None = None  # set on the fragments that read the truth table
    span: bool = False  # templates only: the answer is the query at day2 minus the query at day1
    refs: tuple[str, ...] = ()  # state fragments this one names


class LibraryError(ValueError):
    """The SQL files contradict their own rules (a bug in them, found when they are first read)."""


def _parse(text: str, kind: str, source: str) -> list[Fragment]:
    blocks: list[tuple[str, dict[str, str], list[str]]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        header = _HEADER.match(stripped)
        if header:
            if header.group(1) != kind:
                raise LibraryError(f"{source}:{lineno}: `{header.group(1)}:` header in a file of {kind}s")
            blocks.append((header.group(2), {}, []))
            continue
        if not blocks:
            continue  # the file's preamble
        name, attrs, lines = blocks[-1]
        attribute = _ATTRIBUTE.match(stripped)
        if attribute and not any(x.strip() for x in lines):
            attrs[attribute.group(1)] = attribute.group(2)
        elif stripped.startswith("--"):
            continue  # documentation (a comment before the next header belongs to that one)
        elif stripped:
            lines.append(line.rstrip())
    out = []
    for name, attrs, lines in blocks:
        body = "\n".join(lines).strip()
        if not body:
            raise LibraryError(f"{source}: fragment {name} has no SQL")
        cls = attrs.get("class")
        if cls is not None:
            if cls not in ENTITY_CLASSES:
                raise LibraryError(f"{source}: fragment {name} names unknown class {cls}")
            if DAY not in body:
                raise LibraryError(f"{source}: class fragment {name} never uses its served day {DAY}")
            body = body.replace(DAY, "{" + day_placeholder(cls) + "}")
        elif DAY in body:
            raise LibraryError(f"{source}: fragment {name} uses {DAY} but declares no class")
        out.append(Fragment(name, body, cls, attrs.get("span") == "true"))
    return out


def _read(name: str) -> str:
    return resources.files(__package__).joinpath("sql", name).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Library:
    states: dict[str, Fragment]  # in file order: a fragment names only fragments before it
    templates: dict[str, Fragment]
    stores: dict[str, Fragment]

    def closure(self, fragment: Fragment) -> list[Fragment]:
        """The state fragments `fragment` needs, directly or not, in file (dependency) order."""
        needed: set[str] = set()
        stack = list(fragment.refs)
        while stack:
            name = stack.pop()
            if name not in needed:
                needed.add(name)
                stack.extend(self.states[name].refs)
        return [f for n, f in self.states.items() if n in needed]

    def classes_read(self, template_id: str) -> frozenset[str]:
        return frozenset(f.entity_class for f in self.closure(self.templates[template_id]) if f.entity_class)

    def query_text(self, template_id: str) -> str:
        """The whole query of a template: `WITH <its CTEs> <its SELECT>`, placeholders unfilled."""
        return self.compose(self.templates[template_id])

    def compose(self, fragment: Fragment) -> str:
        ctes = self.closure(fragment)
        if not ctes:
            return fragment.body
        return "WITH " + ",\n".join(f"{f.name} AS (\n{f.body}\n)" for f in ctes) + "\n" + fragment.body


def _with_refs(fragment: Fragment, known: dict[str, Fragment]) -> Fragment:
    words = set(_WORD.findall(fragment.body))
    refs = tuple(n for n in known if n in words and n != fragment.name)
    return Fragment(fragment.name, fragment.body, fragment.entity_class, fragment.span, refs)


@cache
def library() -> Library:
    """The parsed SQL files (once per process)."""
    parsed = _parse(_read("states.sql"), "name", "states.sql")
    names = [f.name for f in parsed]
    states: dict[str, Fragment] = {}
    for i, f in enumerate(parsed):
        if f.name in states:
            raise LibraryError(f"states.sql: fragment {f.name} is defined twice")
        ahead = sorted(set(_WORD.findall(f.body)) & set(names[i:]))
        if ahead:  # file order is dependency order, so no cycle can be written
            raise LibraryError(f"states.sql: fragment {f.name} names {', '.join(ahead)}, defined at or after it")
        states[f.name] = _with_refs(f, states)
    queries: dict[str, dict[str, Fragment]] = {"template": {}, "store": {}}
    for kind, file in (("template", "templates.sql"), ("store", "stores.sql")):
        for f in _parse(_read(file), kind, file):
            if f.name in queries[kind]:
                raise LibraryError(f"{file}: {kind} {f.name} has two queries")
            if f.name in states:  # it could not name the state it shadows
                raise LibraryError(f"{file}: {kind} {f.name} has the name of a state fragment")
            queries[kind][f.name] = _with_refs(f, states)
    return Library(states, queries["template"], queries["store"])
