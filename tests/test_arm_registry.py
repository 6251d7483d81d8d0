"""The arm registry is the one list of arms: no literal elsewhere names two arms, and an arm registered only
in the registry reaches the CLI (choices and help), the paper's cells, scenario validation and the planner."""

from __future__ import annotations

import ast
import datetime as dt
from pathlib import Path

import pytest
from click.testing import CliRunner

from churn_assets.arms import registry
from churn_assets.arms.naive import NAIVE_READS, NaiveArm
from churn_assets.arms.registry import ARMS, ArmSpec, arm_names, arm_spec, define_scenario, make_arm
from churn_assets.fabric.sources import Sources
from churn_assets.freshness.scenario import ScenarioError, plan_scenario
from churn_assets.grounding.registry import load_registry

ROOT = Path(__file__).resolve().parents[1] / "churn_assets"
REGISTRY_FILE = ROOT / "arms" / "registry.py"
T = dt.date(2024, 4, 27)
T_PRIME = dt.date(2024, 3, 29)
EXTRA = "extra_arm_for_a_test"


def arm_literals(tree: ast.AST, names: frozenset[str]) -> list[tuple[int, list[str]]]:
    """(line, arm names) of every list, tuple, set or dict literal whose direct string elements or keys name
    two or more arms."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            elements = node.elts
        elif isinstance(node, ast.Dict):
            elements = [k for k in node.keys if k is not None]
        else:
            continue
        named = [e.value for e in elements if isinstance(e, ast.Constant) and e.value in names]
        if len(named) >= 2:
            found.append((node.lineno, named))
    return found


def test_no_literal_outside_the_registry_lists_two_arms() -> None:
    names = frozenset(arm_names())
    problems = []
    for path in sorted(ROOT.rglob("*.py")):
        if path == REGISTRY_FILE:
            continue
        for line, named in arm_literals(ast.parse(path.read_text()), names):
            problems.append(f"{path.relative_to(ROOT.parent)}:{line}: {', '.join(named)}")
    assert not problems, "arm lists belong to churn_assets/arms/registry.py:\n" + "\n".join(problems)


def test_the_scan_finds_a_list_of_arms() -> None:
    names = frozenset(arm_names())
    assert arm_literals(ast.parse('ARMS = ("naive", "grounding")'), names) == [(1, ["naive", "grounding"])]
    assert arm_literals(ast.parse('{"naive": 1, "classic_rag": 2}'), names) == [(1, ["naive", "classic_rag"])]
    assert arm_literals(ast.parse('x = ("naive", "tiered")'), names) == []


@pytest.fixture
def extra_arm(monkeypatch: pytest.MonkeyPatch) -> ArmSpec:
    """An arm that exists only as a registry entry (it answers as the naive arm does)."""
    spec = ArmSpec(EXTRA, "a throwaway arm registered by a test", lambda c: NaiveArm(c.scenario, c.registry,
                                                                                       c.sources), NAIVE_READS)
    monkeypatch.setitem(ARMS, EXTRA, spec)
    return spec


def test_an_arm_registered_only_in_the_registry_is_accepted_everywhere(extra_arm: ArmSpec) -> None:
    from churn_assets.cli import main
    from churn_assets.evaluation.paper import paper_cells

    assert EXTRA in arm_names() and arm_spec(EXTRA) is extra_arm
    # CLI: the --arm choices and help list it, and `--arm extra...` passes the choice check.
    help_text = " ".join(CliRunner().invoke(main, ["run", "--help"]).output.split())  # unwrapped
    assert EXTRA in help_text and "a throwaway arm registered by a test" in help_text
    parsed = CliRunner().invoke(main, ["run", "--world", "nosuch-s1-000000", "--arm", EXTRA, "--t-prime",
                                       "2024-03-29", "--t", "2024-04-27"])
    assert "Invalid value for '--arm'" not in parsed.output
    refused = CliRunner().invoke(main, ["run", "--world", "w", "--arm", "nosuch", "--t-prime", "2024-03-29",
                                        "--t", "2024-04-27"])
    assert refused.exit_code == 2 and "Invalid value for '--arm'" in refused.output and EXTRA in refused.output
    # The paper runs it at D+28.
    assert (EXTRA, "tiered", "D+28") in paper_cells()
    # Scenario validation and the planner.
    scenario = define_scenario("default-s42-2906f8", EXTRA, "tiered", T_PRIME, T)
    plan = plan_scenario(scenario, arm_spec(EXTRA).reads, load_registry())
    assert plan.served_vintage == dict.fromkeys(plan.served_vintage, T)
    assert {i.asset for i in plan.inputs} >= {"operational_store", "contract_documents", "task_set"}
    arm = make_arm(scenario, Sources(scenario.world_id), served=plan.served_vintage)
    assert arm.planned_vintage == plan.served_vintage


def test_an_unknown_arm_is_refused_with_the_known_ones() -> None:
    with pytest.raises(Exception, match="unknown arm 'nosuch'") as refused:
        define_scenario("w", "nosuch", "tiered", T_PRIME, T)
    assert all(name in str(refused.value) for name in arm_names())


def test_an_arm_with_a_fixed_policy_always_runs_under_it() -> None:
    off = registry.UNTIERED_ARM
    assert arm_spec(off).fixed_policy == "off"
    assert define_scenario("w", off, "tiered", T_PRIME, T).policy_id == "off"
    with pytest.raises(ScenarioError, match="before T'"):
        define_scenario("w", registry.TIERED_ARM, "tiered", T, T_PRIME)
