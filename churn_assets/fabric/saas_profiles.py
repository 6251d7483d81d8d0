"""The SaaS profiles an evaluation can run on (section 10, "SaaS mock"): `default` (600 requests/min per key,
50 ms latency), `reference` (the reference's 60/min, 350 ms) and `unlimited` (no quota, no latency: for sweeps
whose question is staleness, not the API's cost; decision 189). The SaaS app defines their limits
(`saas_mock/config.py`); the embedded service issues one API key for each; a scenario names one.

A module of its own, without the client's HTTP stack, so that `churnbench services up` stays fast."""

from __future__ import annotations

SAAS_PROFILES: tuple[str, ...] = ("default", "reference", "unlimited")
