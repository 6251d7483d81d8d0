"""`--retry-transport` against the real results catalog (issue 22, item 3): a run whose source was down for
some tasks shows its transport failures in `results list` and `results show`; the retry answers only those
again, into a retry folder of the same experiment, and the catalog row then points at it. The arm is the
`OutageArm` at the arm seam (real arms meet real outages in the faults suite); the catalog, the CLI and the
results folders are real."""

from __future__ import annotations

import datetime as dt

import pytest
from click.testing import CliRunner
from outage_arm import OutageArm

from churn_assets.cli import main
from churn_assets.evaluation.results import ResultsStore
from churn_assets.evaluation.runner import RunSpec, evaluate
from churn_assets.freshness.planning import served_vintage
from churn_assets.freshness.policies import Tiered
from churn_assets.freshness.scenario import Scenario
from churn_assets.grounding.registry import load_registry
from churn_assets.services import ServiceUrls
from churn_assets.state import StatePaths
from churn_assets.tasks.generator import generate_task_set
from churn_assets.tasks.gold import GoldResolver
from churn_assets.tasks.task_set import task_set_hash
from churn_assets.world.ledger import load_ledger

pytestmark = pytest.mark.integration

T, T_PRIME = dt.date(2024, 1, 25), dt.date(2024, 1, 20)


def test_retry_transport_re_asks_the_failures_and_the_catalog_shows_them(
        services: ServiceUrls, small_world: str, state_paths: StatePaths) -> None:
    loaded = load_ledger(state_paths.ledger_dir(small_world))
    resolver = GoldResolver(loaded.records)
    tasks = list(generate_task_set(loaded.records, world_id=small_world, anchor=T, n=20, resolver=resolver).tasks)
    planned = served_vintage(load_registry(), T_PRIME, T, Tiered())
    spec = RunSpec(Scenario(small_world, "grounding", "tiered", T_PRIME, T, saas_profile="reference"), "cafe",
                   task_set_hash(tasks))
    store = ResultsStore(state_paths.root / "results")
    down = {t.task_id for t in tasks[2:6]}

    first = evaluate(OutageArm(resolver, planned, down), tasks, resolver, store, spec, code="git-retrytest",
                     catalog=services.warehouse)
    key = spec.key("git-retrytest")
    cli = CliRunner()
    listed = cli.invoke(main, ["results", "list", "--world", small_world])
    assert listed.exit_code == 0, listed.output
    [row] = [line for line in listed.output.splitlines() if spec.scenario_key in line and "git-retrytest" in line]
    header = listed.output.splitlines()[0].split()
    assert row.split()[header.index("TRANSPORT")] == str(len(down)) and "(retry" not in row
    assert first["verdicts"]["transport_failure"] == len(down)

    healthy = OutageArm(resolver, planned, set())
    retried = evaluate(healthy, tasks, resolver, store, spec, code="git-retrytest", catalog=services.warehouse,
                       retry_transport=True)
    assert sorted(healthy.asked) == sorted(down) and retried["verdicts"]["transport_failure"] == 0
    assert store.is_complete(key) and store.latest_complete(key) == key.retried(1)

    shown = cli.invoke(main, ["results", "show", f"{key.experiment_hash}__git-retrytest"])
    assert shown.exit_code == 0, shown.output
    assert "transport      0 transport failure(s) (retry 1" in shown.output
    assert str(store.run_dir(key.retried(1))) in shown.output  # the catalog row points at the retry
    listed = cli.invoke(main, ["results", "list", "--world", small_world])
    [row] = [line for line in listed.output.splitlines() if spec.scenario_key in line and "git-retrytest" in line]
    assert row.rstrip().endswith("(retry 1)")
