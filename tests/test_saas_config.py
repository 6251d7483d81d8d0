"""The SaaS API's keys file schema: one-line refusals that never quote a secret, ids, per-key limits."""

from __future__ import annotations

import json
from typing import Any

import pytest

from saas_mock.config import PROFILES, SaasConfigError, parse_keys, plan_for

SECRET = "s3cr3t-" + "k" * 20


def keys(*entries: dict[str, Any]) -> str:
    return json.dumps({"keys": list(entries)})


@pytest.mark.parametrize(("text", "message"), [
    ("[]", 'ENV: expected {"keys": [{"id": ..., "key": ..., "profile": ...}]}'),
    ("{}", 'ENV: expected {"keys": [{"id": ..., "key": ..., "profile": ...}]}'),
    (keys(), "ENV: keys must be a non-empty list"),
    (keys({"key": "short-secret"}), "ENV: keys[0].key must be a string of at least 16 characters"),
    (keys({"key": SECRET, "profile": "gold"}),
     "ENV: unknown SaaS profile 'gold' (known: default, reference, unlimited)"),
    (keys({"key": SECRET, "rate_per_minute": -1}), "ENV: keys[0].rate_per_minute must be a number >= 0"),
    (keys({"key": SECRET, "rate_per_minute": "3"}), "ENV: keys[0].rate_per_minute must be a number >= 0"),
    (keys({"key": SECRET, "burst": 0}), "ENV: keys[0].burst must be an integer >= 1"),
    (keys({"key": SECRET, "rate": 3}), "ENV: unknown key 'keys[0].rate'"),
    (keys({"key": SECRET, "id": "a"}, {"key": SECRET + "2", "id": "a"}), "ENV: key id 'a' appears twice"),
    (keys({"key": SECRET}, {"key": SECRET + "2", "id": "key0"}), "ENV: key id 'key0' appears twice"),
    (keys("not-an-entry"), "ENV: keys[0] must be a mapping"),
])
def test_bad_keys_are_one_line(text: str, message: str) -> None:
    with pytest.raises(SaasConfigError) as err:
        parse_keys(text, "ENV")
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


@pytest.mark.parametrize("entry", [{"key": "short-secret"}, {"key": SECRET, "burst": SECRET},
                                   {"key": SECRET, "latency_ms": -1}, {"key": 1234567890123456789012}])
def test_messages_never_quote_a_value(entry: dict[str, Any]) -> None:
    with pytest.raises(SaasConfigError) as err:
        parse_keys(keys(entry), "ENV")
    assert "short-secret" not in str(err.value) and "s3cr3t" not in str(err.value)
    assert "1234567890" not in str(err.value) and err.value.__cause__ is None


def test_ids_and_limits() -> None:
    parsed = parse_keys(keys({"key": SECRET, "id": 7, "profile": "reference", "rate_per_minute": 3},
                             {"key": SECRET + "2", "burst": 4, "latency_ms": 0, "rate_per_minute": None}), "t")
    assert [k.key_id for k in parsed] == ["7", "key1"]
    assert (parsed[0].plan.rate_per_minute, parsed[0].plan.burst, parsed[0].plan.latency_ms) == (3.0, 3, 350.0)
    assert (parsed[1].plan.rate_per_minute, parsed[1].plan.burst, parsed[1].plan.latency_ms) == (600.0, 4, 0.0)
    assert parsed[0].secret == SECRET.encode()


def test_plan_for() -> None:
    assert plan_for("unlimited") == PROFILES["unlimited"]
    assert plan_for("default", {"rate_per_minute": 120}).burst == 120
    assert plan_for("default", {"rate_per_minute": 120, "burst": 1}).burst == 1
    with pytest.raises(SaasConfigError, match=r"^profile default: burst must be an integer >= 1"):
        plan_for("default", {"burst": 0})
    with pytest.raises(SaasConfigError, match=r"^unknown SaaS profile 'gold'"):
        plan_for("gold")
