"""Imports point down the layers (docs/architecture.md, "Layers"), never up, and arms stay isolated.

The scan reads every module's imports with `ast` (no import side effects), so a violation anywhere
fails here with the module and the offending import named.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Rank of each part of churn_assets: a module may import its own rank or lower, never higher.
# `errors` is the shared base every layer may raise from; `canonical` the one canonical JSON every hash uses;
# `files` the atomic writes and file locks of anything several processes may write; `credentials` the generated
# secret files and the secrets derived from them (the SaaS API derives tenant keys with it too); `progress` the
# progress lines and bars of long work (the steps inside runs report through it); `memo` the process's bounded,
# value-keyed caches.
RANKS: dict[str, int] = {
    "errors": 0, "canonical": 0, "files": 0, "credentials": 0, "faults": 0, "unique_keys": 0, "progress": 0,
    "seal_key": 0,
    "memo": 0,
    "world": 1,
    "fabric": 2, "tasks": 2, "contracts": 2,
    "grounding": 3,
    "arms": 4, "freshness": 4,
    "evaluation": 5, "sweeps": 5,
    # services and the state folder stand beside the core: used by the Dagster wing and the CLI only.
    "services": 6, "state": 6, "deployment": 6, "error_traces": 6, "state_locks": 6,
    "orchestration": 7,  # the Dagster wing, ranked inside by WING_RANKS
    "cli": 9, "commands": 9, "__main__": 9,
    "benchmark": 9,  # `churnbench bench`: measures the commands (the paper's cells) and everything below them
}
# The Dagster wing's own layers (`churn_assets/orchestration/<part>`): a loop inside the wing fails here too.
WING_RANKS: dict[str, int] = {
    "partitions": 0, "dbt_project": 0, "metadata": 0, "code_location": 0, "refusal": 0,
    "scenarios": 1, "sweep_records": 1,
    "world_registry": 2, "dead_runs": 2, "unbacked": 2, "scenario_in_hand": 2, "run_body": 2,
    "resources": 3, "materialize": 3, "requests": 3, "launches": 3, "lineage": 3,
    "scenario_inputs": 4, "state_migration": 4, "key_rotation": 4,
    "assets": 5,
    "scenario_materializer": 6, "asset_graph": 6, "scenario_runs": 6, "engine": 6,
    "cells": 7,
    "sweeps": 8, "regression": 8,
    "jobs": 9, "schedules": 9, "sensors": 9, "run_launcher": 9,
    "definitions": 10,
}
# The top-level `contracts` package (document rendering) sits with fabric.
TOP_LEVEL_RANKS = {"contracts": 2}
DAGSTER_FREE_BELOW = (7, 0)  # nothing below the Dagster wing imports dagster ...
DAGSTER_ADAPTER_PREFIX = "churn_assets.freshness.adapters"  # ... except the production adapters
ARM_FORBIDDEN = ("churn_assets.world.fold", "churn_assets.world.ledger", "churn_assets.tasks.gold")


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names.extend(f"{node.module}.{a.name}" for a in node.names)
    return names


def rank_of(module: str) -> tuple[int, int] | None:
    """(layer, layer inside the Dagster wing) of a project module; None for modules outside the layers."""
    parts = module.split(".")
    if parts[0] == "churn_assets":
        if len(parts) == 1 or parts[1] not in RANKS:
            return None
        if parts[1] == "orchestration":
            if len(parts) == 2:
                return None
            sub = WING_RANKS.get(parts[2])
            return None if sub is None else (RANKS["orchestration"], sub)
        return (RANKS[parts[1]], 0)
    top = TOP_LEVEL_RANKS.get(parts[0])
    return None if top is None else (top, 0)


def violations(module: str, imports: list[str]) -> list[str]:
    """Every rule a module's imports break, as readable sentences."""
    found: list[str] = []
    own = rank_of(module)
    top = module.split(".")[0]
    for imp in imports:
        head = imp.split(".")[0]
        if head == "saas_mock" and top != "saas_mock":
            found.append(f"{module} imports {imp}: nothing in the core imports saas_mock")
        if top == "saas_mock" and head == "churn_assets":
            sub = imp.split(".")[1] if "." in imp else ""
            if sub not in ("world", "errors", "canonical", "credentials", "services", "state", "unique_keys"):
                found.append(f"{module} imports {imp}: saas_mock may only use churn_assets.world")
        if own is not None and head in ("churn_assets", "contracts"):
            target = rank_of(imp)
            if target is not None and target > own:
                found.append(f"{module} (rank {own}) imports {imp} (rank {target}): imports must point down")
        if own is not None and own < DAGSTER_FREE_BELOW and head.startswith("dagster") \
                and not module.startswith(DAGSTER_ADAPTER_PREFIX):
            found.append(f"{module} imports {imp}: only the Dagster wing and above (and the freshness "
                         "adapters) use dagster")
        if module.startswith("churn_assets.arms") and imp.startswith(ARM_FORBIDDEN):
            found.append(f"{module} imports {imp}: arms never read the ledger, the fold or gold")
    return found


def _all_modules() -> list[tuple[str, Path]]:
    out = []
    for pkg in ("churn_assets", "saas_mock", "contracts"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            out.append((_module_name(path), path))
    return out


def _parts(folder: Path) -> set[str]:
    return {p.stem if p.is_file() else p.name for p in folder.iterdir()
            if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())) and p.stem != "__init__"}


def test_every_churn_assets_part_has_a_rank() -> None:
    unranked = sorted(_parts(ROOT / "churn_assets") - RANKS.keys())
    assert not unranked, f"add these to RANKS in {Path(__file__).name}: {unranked}"
    unranked = sorted(_parts(ROOT / "churn_assets" / "orchestration") - WING_RANKS.keys())
    assert not unranked, f"add these to WING_RANKS in {Path(__file__).name}: {unranked}"


def test_imports_follow_the_layers() -> None:
    problems = [v for module, path in _all_modules() for v in violations(module, _imports(path))]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("module", "imports", "fragment"), [
    ("churn_assets.world.fold", ["churn_assets.grounding.router"], "must point down"),
    ("churn_assets.world.simulator", ["dagster"], "use dagster"),
    ("churn_assets.arms.naive", ["churn_assets.world.fold"], "arms never read"),
    ("churn_assets.arms.naive", ["churn_assets.tasks.gold"], "arms never read"),
    ("churn_assets.fabric.warehouse_raw", ["saas_mock.app"], "nothing in the core imports saas_mock"),
    ("saas_mock.app", ["churn_assets.orchestration.assets.ledger"], "saas_mock may only use"),
    ("churn_assets.orchestration.assets.evaluation", ["churn_assets.orchestration.scenario_materializer"],
     "must point down"),
    ("churn_assets.orchestration.partitions", ["churn_assets.orchestration.assets.ledger"], "must point down"),
    ("churn_assets.evaluation.runner", ["churn_assets.orchestration.materialize"], "must point down"),
])
def test_the_scanner_catches_violations(module: str, imports: list[str], fragment: str) -> None:
    assert any(fragment in v for v in violations(module, imports))


def test_allowed_imports_pass() -> None:
    assert violations("churn_assets.orchestration.assets.ledger", ["dagster", "churn_assets.world.ledger"]) == []
    assert violations("churn_assets.freshness.adapters", ["dagster"]) == []
    assert violations("saas_mock.app", ["churn_assets.world.fold"]) == []


def _import_graph() -> dict[str, set[str]]:
    """Project module -> the project modules it imports (lazy and type-only imports included)."""
    modules = dict(_all_modules())
    known = set(modules)
    return {m: {r for i in _imports(p) if (r := _resolve(i, known)) and r != m} for m, p in modules.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    cycles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_no_import_cycles() -> None:
    """No two modules import each other, directly or through others (type-only and lazy imports count)."""
    cycles = import_cycles(_import_graph())
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_cycles() -> None:
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def _resolve(imp: str, known: set[str]) -> str | None:
    """The project module an import names (`a.b.C` -> `a.b` when `C` is not a module)."""
    while imp:
        if imp in known:
            return imp
        imp = imp.rpartition(".")[0]
    return None


def test_arms_never_reach_the_ledger_fold_or_gold_even_indirectly() -> None:
    """Arm isolation holds through every chain of imports (lazy ones included), not only direct ones."""
    modules = dict(_all_modules())
    graph = _import_graph()
    problems = []
    for start in (m for m in modules if m.startswith("churn_assets.arms")):
        seen, stack, parent = {start}, [start], {start: ""}
        while stack:
            mod = stack.pop()
            if mod.startswith(ARM_FORBIDDEN):
                chain, cur = [], mod
                while cur:
                    chain.append(cur)
                    cur = parent[cur]
                problems.append(" -> ".join(reversed(chain)))
                continue
            for nxt in graph.get(mod, ()):
                if nxt not in seen:
                    seen.add(nxt)
                    parent[nxt] = mod
                    stack.append(nxt)
    assert not problems, "\n".join(sorted(set(problems)))
