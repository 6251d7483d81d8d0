"""Hypothesis fuzzing of the loaders (issue 22, item 13): ledger, world config, registry, task files, scenario
definitions, stored results. Files only (no services): each property runs a modest, derandomized number of
examples so that CI is fast and a failure reproduces.

For each loader: a valid input round-trips (load, write, load gives the same object and the same bytes); a
mutated input is either refused with one `UserFacingError` line naming the line or the field, or, when the
mutation left it valid, loads to what the bytes say (a ledger: the same events; the hash chain admits no
other) -- nothing raises anything else."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from file_state_locks import use_file_locks
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from churn_assets.arms.registry import define_scenario
from churn_assets.errors import UserFacingError
from churn_assets.evaluation.results import ResultsStore, RunKey
from churn_assets.grounding.registry import REGISTRY_RESOURCE, load_registry, parse_registry
from churn_assets.orchestration.scenarios import load_scenario, register_scenario
from churn_assets.state import StatePaths
from churn_assets.tasks.generator import generate_task_set
from churn_assets.tasks.task_set import read_tasks, write_tasks
from churn_assets.world.config import config_from_data, load_config
from churn_assets.world.ledger import LEDGER_FILE, Event, LedgerWriter, load_ledger
from churn_assets.world.simulator import generate_ledger

EXAMPLES = 25  # per property; the figure docs/guarantees.md reports
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def refused_in_one_line(e: BaseException, *places: str) -> None:
    """A refusal: a `UserFacingError` of one line naming one of `places` (a line number or a field)."""
    assert isinstance(e, UserFacingError), f"{type(e).__name__}: {e}"
    text = str(e)
    assert "\n" not in text and text.strip(), text
    if places:
        assert any(p in text for p in places), text


def mutations() -> st.SearchStrategy[tuple[str, int, bytes]]:
    """(how, where as a fraction of the file in per mille, bytes): replace, delete or insert a few bytes."""
    return st.tuples(st.sampled_from(["replace", "delete", "insert", "truncate"]), st.integers(0, 999),
                     st.binary(min_size=1, max_size=4))


def mutate(data: bytes, how: str, where: int, junk: bytes) -> bytes:
    i = min(len(data) - 1, len(data) * where // 1000)
    if how == "replace":
        return data[:i] + junk + data[i + len(junk):]
    if how == "delete":
        return data[:i] + data[i + len(junk):]
    if how == "insert":
        return data[:i] + junk + data[i:]
    return data[:i]


# -- ledger -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ledger_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fuzz-ledger")
    generate_ledger(load_config(days=4, seed=11), out)
    return out


def test_a_ledger_round_trips(ledger_dir: Path, tmp_path: Path) -> None:
    loaded = load_ledger(ledger_dir)
    config = load_config(days=4, seed=11)
    writer = LedgerWriter(tmp_path / "again", config.data, config.world_id, config.config_hash)
    writer.extend(Event(dt.date.fromisoformat(r["at"]), r["kind"], r["entity_type"], r["entity_id"], r["payload"])
                  for r in loaded.records)
    writer.close()
    again = load_ledger(tmp_path / "again")
    assert again.records == loaded.records
    assert (tmp_path / "again" / LEDGER_FILE).read_bytes() == (ledger_dir / LEDGER_FILE).read_bytes()


@FUZZ
@given(mutations())
def test_a_mutated_ledger_is_refused_or_unchanged(ledger_dir: Path, tmp_path_factory: pytest.TempPathFactory,
                                                  mutation: tuple[str, int, bytes]) -> None:
    work = tmp_path_factory.mktemp("mutated-ledger")
    shutil.copy(ledger_dir / "manifest.json", work / "manifest.json")
    good = (ledger_dir / LEDGER_FILE).read_bytes()
    bad = mutate(good, *mutation)
    (work / LEDGER_FILE).write_bytes(bad)
    try:
        loaded = load_ledger(work)
    except Exception as e:
        refused_in_one_line(e, "line ", "manifest", "empty ledger")
        return
    assert loaded.records == load_ledger(ledger_dir).records  # only a change that means nothing passes


# -- world config ---------------------------------------------------------------------------------------


@FUZZ
@given(st.integers(0, 10_000), st.integers(1, 180), st.from_regex(r"[a-z][a-z0-9]{0,11}", fullmatch=True))
def test_a_world_config_round_trips(seed: int, days: int, name: str) -> None:
    config = load_config(seed=seed, days=days, name=name)
    text = json.dumps(config.data, indent=2, sort_keys=True)  # as the state folder stores it
    again = config_from_data(json.loads(text))
    assert again == config and again.world_id == config.world_id
    assert json.dumps(again.data, indent=2, sort_keys=True) == text


JSON_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                        st.text(max_size=8), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3),
                                                                                                    st.integers(),
                                                                                                    max_size=2))


def paths_of(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path of a nested mapping (lists by index)."""
    out = [prefix] if prefix else []
    if isinstance(data, dict):
        for k, v in data.items():
            out += paths_of(v, (*prefix, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += paths_of(v, (*prefix, i))
    return out


def set_at(data: Any, path: tuple[Any, ...], value: Any) -> Any:
    copy = json.loads(json.dumps(data))
    target = copy
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = value
    return copy


@FUZZ
@given(st.data())
def test_a_mutated_world_config_is_refused_naming_the_field(data: st.DataObject) -> None:
    base = load_config(days=30).data
    path = data.draw(st.sampled_from(paths_of(base)))
    value = data.draw(JSON_VALUES)
    try:
        config = config_from_data(set_at(base, path, value))
    except Exception as e:
        refused_in_one_line(e, *(str(p) for p in path))
        return
    assert config.data == set_at(base, path, value) or config.world_id  # a valid change is a valid config


# -- registry -------------------------------------------------------------------------------------------


def registry_data() -> Any:
    from importlib import resources

    return yaml.safe_load(resources.files("churn_assets.grounding").joinpath(REGISTRY_RESOURCE).read_text())


def test_the_registry_round_trips(tmp_path: Path) -> None:
    data = registry_data()
    first = tmp_path / "registry.yaml"
    first.write_text(yaml.safe_dump(data, sort_keys=True))
    loaded = load_registry(first)
    assert loaded == load_registry() and loaded.content_hash == load_registry().content_hash
    second = tmp_path / "again.yaml"
    second.write_text(yaml.safe_dump(yaml.safe_load(first.read_text()), sort_keys=True))
    assert second.read_bytes() == first.read_bytes() and load_registry(second) == loaded


@FUZZ
@given(st.data())
def test_a_mutated_registry_is_refused_naming_the_field(data: st.DataObject) -> None:
    base = registry_data()
    path = data.draw(st.sampled_from(paths_of(base)))
    value = data.draw(JSON_VALUES)
    try:
        parse_registry(set_at(base, path, value), "fuzz")
    except Exception as e:  # the field, or the class whose entry it breaks (a tier it names, ...)
        refused_in_one_line(e, *(str(p) for p in path), "class ")


# -- task files -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def task_file(ledger_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    loaded = load_ledger(ledger_dir)
    tasks = generate_task_set(loaded.records, world_id="fuzz-s11-000000", anchor=dt.date(2024, 1, 4), n=15).tasks
    path = tmp_path_factory.mktemp("fuzz-tasks") / "tasks.jsonl"
    write_tasks(tasks, path)
    return path


def test_a_task_file_round_trips(task_file: Path, tmp_path: Path) -> None:
    tasks = read_tasks(task_file)
    write_tasks(tasks, tmp_path / "again.jsonl")
    assert (tmp_path / "again.jsonl").read_bytes() == task_file.read_bytes()
    assert read_tasks(tmp_path / "again.jsonl") == tasks


@FUZZ
@given(mutations())
def test_a_mutated_task_file_is_refused_naming_the_line(task_file: Path, tmp_path_factory: pytest.TempPathFactory,
                                                        mutation: tuple[str, int, bytes]) -> None:
    path = tmp_path_factory.mktemp("mutated-tasks") / "tasks.jsonl"
    path.write_bytes(mutate(task_file.read_bytes(), *mutation))
    try:
        read_tasks(path)
    except Exception as e:
        refused_in_one_line(e, "line ")


# -- scenario definitions ------------------------------------------------------------------------------


class _NoInstance:
    """`register_scenario` adds the eval_run partition; the fuzz needs only the stored definition."""

    def has_dynamic_partition(self, *_: Any) -> bool:
        return True


SCENARIO = define_scenario("default-s42-3f9a1c", "grounding", "ttl:prices=3", dt.date(2024, 3, 29),
                           dt.date(2024, 4, 27))


def test_a_scenario_definition_round_trips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = StatePaths.resolve(tmp_path).ensure()
    use_file_locks(monkeypatch, paths)  # registering reaches no service
    register_scenario(paths, _NoInstance(), SCENARIO)  # type: ignore[arg-type]
    stored = paths.scenario_file(SCENARIO.key).read_bytes()
    again = load_scenario(paths, SCENARIO.key)
    assert again == SCENARIO
    register_scenario(paths, _NoInstance(), again)  # type: ignore[arg-type]
    assert paths.scenario_file(SCENARIO.key).read_bytes() == stored


@FUZZ
@given(data=st.data())
def test_a_mutated_scenario_definition_is_refused_naming_the_field(data: st.DataObject,
                                                                   tmp_path_factory: pytest.TempPathFactory) -> None:
    paths = StatePaths.resolve(tmp_path_factory.mktemp("fuzz-scenario")).ensure()
    base = {"scenario": SCENARIO.to_json()}
    path = data.draw(st.sampled_from(paths_of(base)))
    mutated = set_at(base, path, data.draw(JSON_VALUES))
    target = paths.scenario_file(SCENARIO.key)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(mutated))
    try:
        loaded = load_scenario(paths, SCENARIO.key)
    except Exception as e:
        refused_in_one_line(e, *(str(p) for p in path), SCENARIO.key)
        return
    assert loaded == SCENARIO  # anything else loads only if it names the same scenario


# -- stored results ------------------------------------------------------------------------------------


KEY = RunKey("default-s42-3f9a1c", SCENARIO.key, "0123456789abcdef", "git-fuzz")
ROWS = [{"task_id": f"t{i:03d}", "verdict": "correct", "answer": i, "traces": [{"route": "staged_sql"}]}
        for i in range(6)]
SUMMARY = {"scenario_key": SCENARIO.key, "tasks": len(ROWS), "verdicts": {"correct": len(ROWS)}}


def write_results(root: Path) -> ResultsStore:
    store = ResultsStore(root)
    writer = store.open_run(KEY, {"fuzz": True})
    for row in ROWS:
        writer.append(row)
    writer.finish([r["task_id"] for r in ROWS], SUMMARY, {"mean_latency_ms": 1.0})
    return store


def test_stored_results_round_trip(tmp_path: Path) -> None:
    store = write_results(tmp_path / "a")
    assert store.read_tasks(KEY) == ROWS and store.read_summary(KEY) == SUMMARY
    again = ResultsStore(tmp_path / "b")
    writer = again.open_run(KEY, {"fuzz": True})
    for row in store.read_tasks(KEY):
        writer.append(row)
    writer.finish([r["task_id"] for r in ROWS], store.read_summary(KEY), store.read_timings(KEY))
    for name in ("tasks.jsonl", "summary.json", "timings.json", "stale.csv"):
        assert (again.run_dir(KEY) / name).read_bytes() == (store.run_dir(KEY) / name).read_bytes()


@FUZZ
@given(st.sampled_from(["tasks.partial.jsonl", "summary.json", "tasks.jsonl"]), mutations())
def test_mutated_stored_results_are_refused_naming_the_file(tmp_path_factory: pytest.TempPathFactory, name: str,
                                                            mutation: tuple[str, int, bytes]) -> None:
    store = write_results(tmp_path_factory.mktemp("fuzz-results"))
    run_dir = store.run_dir(KEY)
    if name == "tasks.partial.jsonl":  # a checkpoint: a run that stopped before its summary
        (run_dir / name).write_bytes((run_dir / "tasks.jsonl").read_bytes())
        (run_dir / "summary.json").unlink()
    path = run_dir / name
    path.write_bytes(mutate(path.read_bytes(), *mutation))
    try:
        if name == "tasks.partial.jsonl":
            store.open_run(KEY, {"fuzz": True})
        elif name == "summary.json":
            store.read_summary(KEY)
        else:
            store.read_tasks(KEY)
    except Exception as e:
        refused_in_one_line(e, name, "line ")
