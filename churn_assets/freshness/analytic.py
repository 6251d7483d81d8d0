"""Cho and Garcia-Molina's freshness of one element, the analytic anchor's formula (docs/sweeps.md).

An element that changes as a Poisson process of rate lambda and is refreshed every I days is fresh a share
(1 - e^(-lambda I)) / (lambda I) of the (continuous) time ("Effective page refresh policies for Web crawlers",
ACM TODS 2003). `bench/analytic_anchor.py` sets it against the simulator, and tests/test_analytic_anchor.py
against a simulated Poisson element; it lives here so both use this one definition.
"""

from __future__ import annotations

import math


def cho_freshness(lam: float, period: float | None) -> float:
    """The long-run share of time a Poisson(`lam` per day) element refreshed every `period` days is fresh.

    `period` None: never refreshed, so the long run is stale (0) unless the element never changes (lambda 0: 1)."""
    if period is None:
        return 0.0 if lam > 0 else 1.0
    x = lam * period
    return 1.0 if x == 0 else (1.0 - math.exp(-x)) / x
