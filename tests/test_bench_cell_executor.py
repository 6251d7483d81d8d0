"""`bench/bench_cell_executor.py` (decision 270) imports and builds its Dagster job, without measuring anything:
a module Dagster cannot decorate (a string config annotation failed at import once) or a job whose config no
longer validates would rot unnoticed, since the bench itself runs only by hand."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import dagster as dg
import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "bench_cell_executor.py"


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("bench_cell_executor", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # `reconstructable` finds the job through its module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_the_job_runs_cells_on_a_forkserver_with_the_code_location_preloaded(bench: ModuleType) -> None:
    job = bench.cells_on_dagster
    resolved = dg.validate_run_config(job, {"ops": {"plan_cells": {"config": {"cells": ['["w", "naive"]']}}}})
    executor = resolved["execution"]["multiprocess"]
    assert executor["max_concurrent"] == 2
    preload = executor["start_method"]["forkserver"]["preload_modules"]
    assert preload == bench.PRELOAD
    assert all(importlib.util.find_spec(name) is not None for name in preload)
    assert bench.evaluate_cell.pool == bench.POOL
    assert dg.reconstructable(job).get_definition().name == "cells_on_dagster"


def test_the_job_refuses_a_cell_list_of_another_type(bench: ModuleType) -> None:
    with pytest.raises(dg.DagsterInvalidConfigError, match="cells"):
        dg.validate_run_config(bench.cells_on_dagster, {"ops": {"plan_cells": {"config": {"cells": 3}}}})


def test_its_options_parse(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--help"])
    assert exit_.value.code == 0
    assert "--rounds" in capsys.readouterr().out


def test_the_engine_paths_build_a_job_or_name_the_missing_extra(bench: ModuleType) -> None:
    """`--paths dask,celery` (issue 47): an op per cell on the engine's executor, or one line naming the extra."""
    for engine, module in (("dask", "dagster_dask"), ("celery", "dagster_celery")):
        if importlib.util.find_spec(module) is None:
            with pytest.raises(SystemExit, match=rf"{module} is not installed: .*engines extra"):
                bench.static_cells_job(3, engine)
            continue
        job = bench.static_cells_job(3, engine)
        assert job.executor_def.name == engine and sorted(n.name for n in job.nodes) == ["cell_0", "cell_1", "cell_2"]


def test_an_unknown_path_is_refused(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--paths", "engine,spark"])
    assert exit_.value.code == 2 and "unknown path(s) ['spark']" in capsys.readouterr().err
