"""A scripted arm answer: the seam between arms and scoring, for tests of the runner, the results store and
verify-results (real arms are tested against the real services in tests/integration/test_arms.py)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ScriptedAnswer:
    """What an arm returns, reduced to what scoring reads: the value and text, the vintage it read."""

    task_id: str
    value: Any
    text: str
    vintage: dict[str, dt.date]
    parse_error: str | None = None
    transport_error: str | None = None
    budget_error: str | None = None
    data_as_of: dt.date | None = None
    grounded: bool | None = None
    copied_example: bool | None = None
    measure_calls: int = 0
    measures_called: tuple[tuple[str, Any], ...] = ()
    transcript: tuple[dict[str, Any], ...] | None = None
    timings_ms: dict[str, float] = field(default_factory=lambda: {"total": 1.0})
    route: str = "staged_sql"

    @property
    def served_vintage(self) -> dict[str, dt.date]:
        return self.vintage

    @property
    def cost_units(self) -> float:
        return 1.0

    @property
    def routes(self) -> list[str]:
        return [self.route]

    def to_json(self) -> dict[str, Any]:
        return {"traces": [{"route": self.route,
                            "data_times": {c: d.isoformat() for c, d in sorted(self.vintage.items())}}]}
