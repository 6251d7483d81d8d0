"""The SaaS profiles an evaluation can run on (section 10, "SaaS mock"): `default` (600 requests/min per key,
50 ms latency) and `reference` (the reference's 60/min, 350 ms). The SaaS app defines their limits
(`saas_mock/config.py`); the embedded service issues one API key for each; a scenario names one.

A module of its own, without the client's HTTP stack, so that `churnbench services up` stays fast."""

from __future__ import annotations

SAAS_PROFILES: tuple[str, ...] = ("default", "reference")
