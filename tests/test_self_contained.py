"""The repository stands alone: no tracked file cites a document outside it, and what it cites inside exists.

Three scans over the text files `git ls-files` lists (issue 37):

- outside citations: the outside design document and its siblings by name, a parent folder beside the clone,
  or a numbered section of a document the line does not name as one of this repository's files;
- citations of a heading, `(docs/X.md, "Heading")`: the page exists and has that heading;
- paths: every repository path a file names (`churn_assets/.../x.py`, `docs/x.md`, `dbt_project/...`, paths
  relative to a package such as `grounding/router.py`, dotted module names) exists in the tree.

What they prove: no such string is left in a tracked text file. What they do not: that a citation points to the
right rule (only that its target exists), nor paths spelled without a folder (`router.py`) or built at run time.
Each scan is also run on planted lines, so a scanner that stopped finding anything fails here.
"""

from __future__ import annotations

import posixpath
import re
import subprocess
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Built from parts so that this file does not cite them itself.
_OUTSIDE_NAMES = ("ARCHITECTURE" + r"\.md", "ENVIRONMENT" + r"\.md", "reference-facts" + r"(?:\.md)?",
                  r"\.\./" + "shared")
OUTSIDE = re.compile("|".join(_OUTSIDE_NAMES))
SECTION = re.compile(r"(?<![A-Za-z])[Ss]ections?[\s_]+\d+|§\s*\d+")

_EXT = r"(?:py|md|sql|ya?ml|json|jsonl|toml|txt|sh|csv|cfg|ini|gz|png|svg|pdf)"
# A path: at least one folder, a file with a known extension; not part of a URL, an absolute path or a template.
PATH = re.compile(r"(?<![\w./<>{}:$-])((?:[\w.-]+/)+[\w.-]+\." + _EXT + r")(?![\w/])")
# A folder of the repository named with its trailing slash (`churn_assets/orchestration/`).
TOP_DIRS = ("churn_assets", "saas_mock", "contracts", "tests", "docs", "bench", "scripts", "dbt_project",
            "examples", "docker", "baselines")
DIR = re.compile(r"(?<![\w./<>{}:$-])((?:" + "|".join(TOP_DIRS) + r")/(?:[\w.-]+/)*)(?![\w.-])")
# A module by its dotted name (`churn_assets.orchestration.world_registry`, maybe followed by an attribute).
MODULE = re.compile(r"(?<![\w./-])((?:churn_assets|saas_mock)(?:\.\w+)+)")
# `(docs/X.md, "Heading")`, the heading possibly wrapped onto a comment's next line.
HEADING_CITATION = re.compile(r"(docs/[\w/-]+\.md),\s*\\?\"([^\"\\\n]+(?:\n[\s#*-]*[^\"\\\n]+)?)\\?\"")

# Paths that are deliberately not in the tree, each with its reason.
NOT_IN_TREE: dict[str, str] = {
    "churn_assets/arms/naive_at_documents.py": "docs/architecture.md: a scratch branch's diff --stat, not merged",
    "tests/test_naive_at_documents.py": "docs/architecture.md: a scratch branch's diff --stat, not merged",
    "tests/test_policy_every.py": "docs/architecture.md: a scratch branch's diff --stat, not merged",
    "services/saas-keys.json": "a file of the state folder, not of the repository",
    "out_dir/ledger.jsonl": "a file under an argument's folder",
    "orchestration/fork_server.py": "deleted with the process pool (decision 330); earlier decisions name it",
    "tests/test_fork_server_wait.py": "deleted with the process pool (decision 330); earlier decisions name it",
}
# Files whose lines are patterns, not citations: .gitignore's, and this file's planted lines.
SKIP_FILES = frozenset({".gitignore", "tests/test_self_contained.py"})


@cache
def tracked() -> tuple[str, ...]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"not a git checkout ({e}): the scans read `git ls-files`")
    return tuple(p for p in out.decode().split("\0") if p)


@cache
def tree() -> frozenset[str]:
    """Every tracked file and every folder holding one."""
    files = set(tracked())
    return frozenset(files | {p.as_posix() for f in files for p in Path(f).parents if p != Path(".")})


def text_files() -> Iterator[tuple[str, str]]:
    for rel in tracked():
        if rel in SKIP_FILES:
            continue
        data = (ROOT / rel).read_bytes()
        if b"\0" in data[:8192]:
            continue
        try:
            yield rel, data.decode("utf-8")
        except UnicodeDecodeError:
            continue


def names_a_repository_file(line: str) -> bool:
    return any(m.group(1) in tree() for m in PATH.finditer(line))


def outside_citations(rel: str, text: str) -> Iterator[str]:
    for n, line in enumerate(text.splitlines(), 1):
        m = OUTSIDE.search(line)
        if m:
            yield f"{rel}:{n}: cites {m.group(0)!r}, a document outside the repository: {line.strip()}"
            continue
        m = SECTION.search(line)
        if m and not names_a_repository_file(line):
            yield (f"{rel}:{n}: {m.group(0)!r} of a document this line does not name (cite a docs/ page and its "
                   f"heading instead): {line.strip()}")


@cache
def headings(page: str) -> frozenset[str]:
    out: set[str] = set()
    in_code = False
    for line in (ROOT / page).read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            out.add(line.lstrip("#").strip())
    return frozenset(out)


def has_heading(page: str, cited: str) -> bool:
    """A heading equal to the cited words or beginning with them (`"The router"` for
    `## The router (grounding/routes.py ...)`)."""
    return any(h == cited or (h.startswith(cited) and not h[len(cited)].isalnum()) for h in headings(page))


def broken_heading_citations(rel: str, text: str) -> Iterator[str]:
    for m in HEADING_CITATION.finditer(text):
        page, cited = m.group(1), re.sub(r"\s*\n[\s#*-]*", " ", m.group(2)).strip()
        n = text.count("\n", 0, m.start()) + 1
        if page not in tree():
            yield f"{rel}:{n}: cites {page}, which is not in the repository"
        elif not has_heading(page, cited):
            yield f"{rel}:{n}: cites {page}, \"{cited}\", which has no such heading"


def ignored_prefixes() -> tuple[str, ...]:
    """Generated folders (`dbt_project/target/`): named by the code, never tracked."""
    lines = (ROOT / ".gitignore").read_text().splitlines()
    return tuple(s.strip("/") + "/" for s in lines if s.endswith("/") and not s.startswith("#"))


def path_exists(path: str, rel: str) -> bool:
    """In the tree from the root, or from the naming file's folder (`./init-db.sql`, dbt's `tests/generic/`), or
    (not from the root's folders) relative to some folder of the tree: `grounding/router.py`."""
    p = posixpath.normpath(path)
    for candidate in (p, posixpath.normpath(posixpath.join(posixpath.dirname(rel), p))):
        if candidate in tree() or (candidate + "/").startswith(ignored_prefixes()):
            return True
    if path in NOT_IN_TREE:
        return True
    if p.split("/")[0] in TOP_DIRS:
        return False  # a path from the repository's root must be exact
    return any(t.endswith("/" + p) for t in tree())


def module_exists(dotted: str) -> bool:
    """Its longest prefix that is a package or module is followed by at most two names (a class and its
    attribute), the first of which that module's source names."""
    parts = dotted.split(".")
    found, k = parts[0], 1
    while k < len(parts) and (f"{found}/{parts[k]}.py" in tree() or f"{found}/{parts[k]}" in tree()):
        found, k = f"{found}/{parts[k]}", k + 1
    rest = parts[k:]
    if not rest:
        return True
    source = next((s for s in (found + ".py", found + "/__init__.py") if s in tree()), None)
    if source is None or len(rest) > 2:
        return False
    return re.search(rf"\b{rest[0]}\b", (ROOT / source).read_text()) is not None


def stale_paths(rel: str, text: str) -> Iterator[str]:
    for n, line in enumerate(text.splitlines(), 1):
        for m in (*PATH.finditer(line), *DIR.finditer(line)):
            if not path_exists(m.group(1), rel):
                yield f"{rel}:{n}: names {m.group(1)}, which is not in the tree"
        for m in MODULE.finditer(line):
            if not module_exists(m.group(1)):
                yield f"{rel}:{n}: names the module {m.group(1)}, which is not in the tree"


def report(found: Iterable[str]) -> str:
    found = list(found)
    return f"{len(found)} found:\n" + "\n".join(found)


# --- the repository --------------------------------------------------------------------------------------------


def test_no_tracked_file_cites_a_document_outside_the_repository() -> None:
    found = [hit for rel, text in text_files() for hit in outside_citations(rel, text)]
    assert not found, report(found)


def test_every_cited_heading_exists() -> None:
    found = [hit for rel, text in text_files() for hit in broken_heading_citations(rel, text)]
    assert not found, report(found)


def test_every_path_a_tracked_file_names_exists() -> None:
    found = [hit for rel, text in text_files() for hit in stale_paths(rel, text)]
    assert not found, report(found)


def test_the_exceptions_are_still_needed() -> None:
    """An entry of NOT_IN_TREE that came into the tree, or that nothing names any more, is removed."""
    named = {m.group(1) for _, text in text_files() for m in PATH.finditer(text)}
    assert not [p for p in NOT_IN_TREE if p in tree() or p not in named]


# --- the scanners find what they look for --------------------------------------------------------------------


@pytest.mark.parametrize("line", [
    "# the staleness rule (" + "ARCHITECTURE" + ".md section 10)",
    "torch threads (" + "ENVIRONMENT" + ".md)",
    "the drained pool of " + "reference-facts" + ".md",
    "see ../" + "shared/design/",
    "# the fixed dates of section 10",
    "(Section 6, \"Fabric\")",
    "as §10 says",
    "def test_policies_follow_section_10_mapping() -> None:",
])
def test_an_outside_citation_is_found(line: str) -> None:
    assert len(list(outside_citations("x.py", f"ok\n{line}\n"))) == 1


def test_a_section_of_a_named_repository_file_is_allowed() -> None:
    assert not list(outside_citations("x.py", "ok (docs/tasks.md section 2)\n"))
    assert list(outside_citations("x.py", "ok (docs/nosuch.md section 2)\n"))


@pytest.mark.parametrize(("text", "found"), [
    ('x  # (docs/rules.md, "Spend")', 0),
    ('x  # (docs/rules.md,\n# "Per-world namespaces")', 0),
    ('"""(docs/rules.md, "Staged\n    copies hold history")"""', 0),
    ('see (docs/arms.md, "The router")', 0),
    ('x  # (docs/rules.md, "Spending")', 1),
    ('x  # (docs/nosuch.md, "Spend")', 1),
])
def test_a_heading_citation_is_checked(text: str, found: int) -> None:
    assert len(list(broken_heading_citations("x.py", text))) == found


@pytest.mark.parametrize(("line", "found"), [
    ("`churn_assets/orchestration/world_registry.py`", 0),
    ("`grounding/router.py` and `readers/staged.py`", 0),
    ("the folder churn_assets/orchestration/", 0),
    ("dbt_project/target/manifest.json", 0),
    ("<state>/worlds/<world>/contracts/<day>/x.md and https://example.org/a/b.py", 0),
    ("`churn_assets/world_registry.py`", 1),
    ("the macro in macros/generate_schema_name.sql", 1),
    ("churn_assets/assets/", 1),
    ("`churn_assets.orchestration.world_registry.using_world`", 0),
    ("`churn_assets.world_registry`", 1),
])
def test_a_stale_path_is_found(line: str, found: int) -> None:
    assert len(list(stale_paths("x.py", line))) == found
