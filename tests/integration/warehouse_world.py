"""Shared by the warehouse and dbt integration tests: the session's small world, projected once.

`projected_world` runs `churnbench project --world <small world> --at 2024-01-15` in process the first
time a test module asks (truth, raw, dbt star schema, every check); later calls in the same test session
return the memoized output, so both modules share one build.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import dagster as dg
from click.testing import CliRunner

from churn_assets.cli import main
from churn_assets.fabric.postgres import connection, schema_name
from churn_assets.orchestration.materialize import Session

AT = dt.date(2024, 1, 15)
FIRST, LAST = dt.date(2024, 1, 1), dt.date(2024, 1, 30)


@dataclass(frozen=True)
class Projected:
    world_id: str
    output: str  # what `churnbench project` printed

    def schema(self, layer: str) -> str:
        return schema_name(self.world_id, layer)


_BUILT: dict[tuple[str, str], Projected] = {}


def projected_world(session: Session, world_id: str) -> Projected:
    key = (str(session.paths.root), world_id)
    if key not in _BUILT:
        result = CliRunner().invoke(main, ["project", "--world", world_id, "--at", AT.isoformat()],
                                    catch_exceptions=False)
        assert result.exit_code == 0, result.output + (result.stderr if result.stderr_bytes else "")
        _BUILT[key] = Projected(world_id, result.output)
    return _BUILT[key]


def run_checks(session: Session, defs: dg.Definitions, world_id: str, check_keys: Sequence[dg.AssetCheckKey]
               ) -> dict[str, dg.AssetCheckEvaluation]:
    """Run only these checks (no materialization) for a world; their evaluations by check name.

    The partition goes in as the run's partition tag: Dagster 1.13 refuses `partition_key` for a run that
    selects checks only ("no PartitionsDefinition shared by all the provided assets")."""
    from churn_assets.orchestration.materialize import QUIET_RUN_CONFIG
    from churn_assets.orchestration.partitions import world_partitions

    assets = [a for a in defs.assets or () if getattr(a, "partitions_def", None) == world_partitions]
    checks = [c for c in defs.asset_checks or () if set(c.check_keys) & set(check_keys)]
    result = dg.materialize(
        [*assets, *checks],  # type: ignore[list-item]
        selection=dg.AssetSelection.checks(*check_keys), tags={"dagster/partition": world_id},
        instance=session.instance, resources=defs.resources, raise_on_error=False, run_config=QUIET_RUN_CONFIG,
    )
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def metadata(evaluation: dg.AssetCheckEvaluation) -> dict[str, Any]:
    return {k: v.value for k, v in evaluation.metadata.items()}


@contextmanager
def corrupted(url: str, do: Sequence[str], undo: Sequence[str]) -> Iterator[None]:
    """Apply SQL corruptions (committed, so other connections see them), and undo them afterwards."""
    with connection(url, autocommit=True) as conn:
        for statement in do:
            conn.execute(statement.encode())
    try:
        yield
    finally:
        with connection(url, autocommit=True) as conn:
            for statement in undo:
                conn.execute(statement.encode())
