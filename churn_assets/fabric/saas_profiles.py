"""The SaaS profiles an evaluation can run on (docs/rules.md, "SaaS mock"): `default` (600 requests/min per key,
50 ms latency), `reference` (the reference's 60/min, 350 ms) and `unlimited` (no quota, no latency: for sweeps
whose question is staleness, not the API's cost; decision 189). The SaaS app defines their limits
(`saas_mock/config.py`); the embedded service issues one API key for each; a scenario names one.

A module of its own, without the client's HTTP stack, so that `churnbench services up` stays fast."""

from __future__ import annotations

SAAS_PROFILES: tuple[str, ...] = ("default", "reference", "unlimited")
# The profile the pipeline's own checks read the SaaS API on (`saas_api_matches_truth`): they compare answers,
# which every profile gives alike, and must not spend the quota an evaluation's key is measured against. On the
# default key, the cold paper's 16 operational-store checks (about 80 calls each) emptied the bucket the
# evaluations then waited on (decision 200). An external deployment's key (CHURNBENCH_SAAS_API_KEY, or one
# derived from CHURNBENCH_SAAS_KEY_ISSUER) is the same for every profile.
CHECK_PROFILE = "unlimited"
