"""No silent last-wins (issue 35, item 5): a key given twice is refused, in one line naming the file (or value),
the line where YAML knows it, and the key, by every config and stored-file loader; a class given twice in a policy
spelling is refused; `--set` reads numbers in scientific notation."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from churn_assets.cli import main
from churn_assets.errors import UserFacingError
from churn_assets.unique_keys import DuplicateKeyError, load_json, load_yaml


def test_the_readers_refuse_a_key_given_twice() -> None:
    with pytest.raises(DuplicateKeyError, match=r"f.yaml, line 3: key 'b' is given twice in one mapping \(first on "
                                                r"line 2\)"):
        load_yaml("a:\n  b: 1\n  b: 2\n", "f.yaml")
    assert load_yaml("a: {b: 1}\nc: {b: 2}\n", "f.yaml") == {"a": {"b": 1}, "c": {"b": 2}}  # other mappings
    assert load_yaml("base: &x {b: 1}\nuse:\n  <<: *x\n  b: 2\n", "f.yaml")["use"] == {"b": 2}  # merge keys
    with pytest.raises(DuplicateKeyError, match=r"f.json: key 'k' is given twice in one object"):
        load_json('{"a": {"k": 1, "k": 2}}', "f.json")


def test_a_world_config_file_and_set_values(tmp_path: Path) -> None:
    from churn_assets.world.config import WorldConfigError, load_config

    f = tmp_path / "w.yaml"
    f.write_text("rates_per_day:\n  hires: 3\n  hires: 5\n")
    with pytest.raises(WorldConfigError, match=rf"world config {f}, line 3: key 'hires' is given twice"):
        load_config(f)
    with pytest.raises(WorldConfigError, match=r"rates_per_day.hires is set twice"):
        load_config(overrides=["rates_per_day.hires=2", "rates_per_day.hires=3"])
    for text, value in (("1.5e3", 1500.0), ("1.5e+3", 1500.0), ("2E2", 200.0), (".5e1", 5.0)):
        assert load_config(overrides=[f"rates_per_day.hires={text}"]).data["rates_per_day"]["hires"] == value
    got = CliRunner().invoke(main, ["generate", "--days", "2", "--set", "rates_per_day.hires=1", "--set",
                                    "rates_per_day.hires=2", "--out", str(tmp_path / "out")])
    assert got.exit_code == 1 and got.stderr.count("\n") == 1 and "is set twice" in got.stderr


def test_the_registry_and_the_deployment_config(tmp_path: Path) -> None:
    from churn_assets.deployment import DeploymentConfigError, load_deployment
    from churn_assets.grounding.registry import RegistryError, load_registry

    text = (Path(__file__).resolve().parents[1] / "churn_assets" / "grounding" / "registry.yaml").read_text()
    assert "    freshness_tier:" in text
    registry = tmp_path / "registry.yaml"
    first = text.index("    freshness_tier:")
    line_end = text.index("\n", first)
    registry.write_text(text[:line_end + 1] + text[first:line_end + 1] + text[line_end + 1:])  # the tier twice
    with pytest.raises(RegistryError, match=r"key 'freshness_tier' is given twice"):
        load_registry(registry)
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text('calendar:\n  start: "2024-01-01"\n  days: 180\ntasks:\n  count: 20\n  count: 30\n')
    with pytest.raises(DeploymentConfigError, match=rf"{deployment}, line 6: key 'count' is given twice"):
        load_deployment(deployment)


def test_the_price_table_and_the_saas_keys(tmp_path: Path) -> None:
    from churn_assets.arms.agents.llm_usage import price_table
    from saas_mock.config import SaasConfigError, parse_keys

    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  gpt-x:\n    input: 1.0\n    output: 2.0\n  gpt-x:\n    input: 9.0\n    output: 9.0\n")
    with pytest.raises(DuplicateKeyError, match=rf"{prices}, line 5: key 'gpt-x' is given twice"):
        price_table(prices)
    keys = '{"keys": [{"id": "a", "key": "' + "s" * 40 + '", "profile": "default", "profile": "unlimited"}]}'
    with pytest.raises(SaasConfigError, match=r"keys.json: key 'profile' is given twice"):
        parse_keys(keys, "keys.json")


def test_a_baseline_and_stored_scenario_sweep_and_world_files(tmp_path: Path) -> None:
    from churn_assets.orchestration.scenarios import load_scenario
    from churn_assets.orchestration.sweep_records import load_sweep
    from churn_assets.orchestration.world_registry import load_world_config
    from churn_assets.state import StatePaths
    from churn_assets.sweeps.regression import load_baseline

    baseline = tmp_path / "regression.json"
    baseline.write_text('{"format": 1, "cells": {"c": {}, "c": {}}}')
    with pytest.raises(DuplicateKeyError, match=rf"regression baseline {baseline}: key 'c' is given twice"):
        load_baseline(baseline)
    paths = StatePaths.resolve(tmp_path / "state")
    key = "naive__tiered__tp20240105__t20240124__det__default__default-s42-2906f8"
    paths.scenario_file(key).parent.mkdir(parents=True)
    paths.scenario_file(key).write_text('{"scenario": {"arm": "naive", "arm": "grounding"}}')
    with pytest.raises(DuplicateKeyError, match=r"scenario file .*: key 'arm' is given twice"):
        load_scenario(paths, key)
    sweeps = paths.root / "sweeps"
    sweeps.mkdir()
    (sweeps / "smoke-abc.json").write_text('{"spec": {}, "spec": {}}')
    with pytest.raises(DuplicateKeyError, match=r"sweep record .*smoke-abc.json: key 'spec' is given twice"):
        load_sweep(paths, "smoke-abc")
    world = "default-s42-2906f8"
    paths.world_config_file(world).parent.mkdir(parents=True)
    paths.world_config_file(world).write_text('{"seed": 42, "seed": 7}')
    with pytest.raises(DuplicateKeyError, match=r"world config .*config.json: key 'seed' is given twice"):
        load_world_config(paths, world)


def test_a_class_given_twice_in_a_policy_is_refused() -> None:
    from churn_assets.freshness.policies import parse_policy

    for text in ("ttl:prices=3,prices=5", "ttl:prices=3, prices = 5"):
        with pytest.raises(UserFacingError, match=r"class prices is given twice \(3 and 5\)"):
            parse_policy(text)
    assert parse_policy("ttl:prices=3,assignments=0").policy_id == parse_policy("ttl:assignments=0,prices=3").policy_id


def test_policy_free_arms_take_their_one_policy() -> None:
    from churn_assets.arms.registry import UNTIERED_ARM, arm_spec, check_arm_policy, define_scenario
    from churn_assets.freshness.scenario import ScenarioError

    day, later = dt.date(2024, 1, 5), dt.date(2024, 1, 24)
    assert arm_spec("naive").only_policy == "tiered" and arm_spec(UNTIERED_ARM).only_policy == "off"
    assert arm_spec("grounding").only_policy is None
    assert define_scenario("default-s42-2906f8", "naive", "tiered", day, later).key.startswith("naive__tiered__")
    assert check_arm_policy(UNTIERED_ARM, "tiered") == check_arm_policy(UNTIERED_ARM, "off") == "off"
    for arm, policy in (("naive", "off"), ("naive", "ttl:prices=3"), ("classic_rag", "uniform:8"),
                        (UNTIERED_ARM, "ttl:prices=3")):
        with pytest.raises(ScenarioError, match=rf"arm {arm} .*policy {policy!r} would change nothing"):
            define_scenario("default-s42-2906f8", arm, policy, day, later)
    # A definition stored before the rule still loads under its own key (its results are named by it).
    from churn_assets.arms.registry import scenario_from_json
    from churn_assets.freshness.scenario import Scenario

    stored = Scenario("default-s42-2906f8", "naive", "off", day, later)
    assert scenario_from_json(json.loads(json.dumps(stored.to_json()))).key == stored.key


# Every JSON/YAML parse in the package that does not go through `unique_keys`, with why it may not: data the
# package made itself a moment ago, a reply of a service or a model (not a file a user edits), Dagster's cursor,
# or the ledger's hot path (each event line is hash-chained: an edited line fails the chain before it is used).
RAW_PARSES_ALLOWED = {
    "churn_assets/evaluation/verify.py": 2,  # json.loads(canonical(...)): our own serialization, read back
    "churn_assets/evaluation/results.py": 1,  # json.loads(canonical(identity)): the same
    "churn_assets/evaluation/catalog.py": 1,  # json.loads(json.dumps(summary)): a round trip to plain types
    "churn_assets/services/base.py": 1,  # a service's health reply over HTTP
    "churn_assets/tasks/answers.py": 1,  # the model's answer text
    "churn_assets/arms/agents/json_actions.py": 1,  # the model's action text (refused in one line if not JSON)
    "churn_assets/orchestration/assets/evaluation.py": 1,  # timings the step serialized itself
    "churn_assets/orchestration/sensors.py": 1,  # the sensor's Dagster cursor
    "churn_assets/world/packed.py": 1,  # orjson over hash-chained ledger lines
}


def test_no_loader_bypasses_the_duplicate_key_rule() -> None:
    """A source scan (issue 46): a new `json.loads`, `json.load`, `yaml.safe_load` or `orjson.loads` outside
    `unique_keys.py` fails here until it reads through `load_json`/`load_yaml` or is listed above with why."""
    import re

    root = Path(__file__).resolve().parents[1]
    pattern = re.compile(r"\b(?:json\.loads?|yaml\.(?:safe_)?load|orjson\.loads)\(")
    found = {}
    for path in sorted((root / "churn_assets").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == "churn_assets/unique_keys.py":
            continue
        count = len(pattern.findall(path.read_text()))
        if count:
            found[rel] = count
    assert found == RAW_PARSES_ALLOWED


def test_the_stochastic_baseline_refuses_a_key_given_twice(tmp_path: Path) -> None:
    from churn_assets.sweeps.stochastic_gate import load_stochastic_baseline

    baseline = tmp_path / "llm-baseline.json"
    baseline.write_text('{"format": 1, "kind": "x", "alpha": 0.05, "alpha": 0.5, "cells": {}}')
    with pytest.raises(DuplicateKeyError, match=rf"{baseline}: key 'alpha' is given twice"):
        load_stochastic_baseline(baseline)


def test_a_file_that_is_not_utf8_is_named_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 46: a non-UTF-8 deployment or registry file was an internal error with no file name."""
    from churn_assets.deployment import DeploymentConfigError, load_deployment
    from churn_assets.grounding.registry import RegistryError, load_registry
    from churn_assets.sweeps.stochastic_gate import StochasticGateError, load_stochastic_baseline

    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("calendar:\n  start: caf\xe9\n".encode("latin-1"))
    for load, error, what in ((load_deployment, DeploymentConfigError, "deployment config"),
                              (load_registry, RegistryError, "registry"),
                              (load_stochastic_baseline, StochasticGateError, "stochastic baseline")):
        with pytest.raises(error, match=rf"^{what} {bad}: not UTF-8 text \(byte 0xe9 at offset 22\)$"):
            load(bad)
    monkeypatch.setenv("CHURNBENCH_REGISTRY", str(bad))
    got = CliRunner().invoke(main, ["measures"])
    assert got.exit_code == 1 and got.stderr.strip().count("\n") == 0 and f"registry {bad}: not UTF-8" in got.stderr
