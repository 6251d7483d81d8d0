"""The paper's windows and the reference's figures (docs/rules.md, "The paper's windows";
docs/reference.md), and the paper's cells (`paper_cells`): defined once for `churnbench paper`, the benchmark, the
exposure command's defaults and the
warehouse's parity checks.

T = 2024-04-27. D+1: T' = T - 1 day (2024-04-26). D+28: T' = T - 29 days (2024-03-29, the reference's naming).
The D+28 window (issue 34): T' = 2024-03-29 fixed and T over the 28 days ending at T (2024-03-31 .. 2024-04-27);
the paper prints its exposure-only means beside the single-day 2x2 (`evaluation/window.py`).
"""

from __future__ import annotations

import datetime as dt

from churn_assets.world.calendar import Day

T: Day = dt.date(2024, 4, 27)
D1: Day = T - dt.timedelta(days=1)
D28: Day = T - dt.timedelta(days=29)
WINDOWS: dict[str, Day] = {"D+1": D1, "D+28": D28}  # the 2x2's columns: window name -> T'
PAPER_DAYS: tuple[Day, ...] = (D28, D1, T)
WINDOW_DAYS = 28  # the D+28 window's arrival days, ending at T

# The reference's stale answers (freshness errors) of its 2x2, grounding arm, one LLM (docs/reference.md,
# "Its headline").
REFERENCE_STALE: dict[tuple[str, str], int] = {("tiered", "D+1"): 7, ("tiered", "D+28"): 4, ("off", "D+1"): 7,
                                               ("off", "D+28"): 45}


def paper_cells() -> list[tuple[str, str, str]]:
    """(arm, policy, window) of the paper's runs: the 2x2 (the grounding arm tiered and its off ablation, at
    D+1 and D+28), then every other registered arm at D+28, tiered."""
    from churn_assets.arms.registry import TIERED_ARM, UNTIERED_ARM, arm_names

    cells = [(arm, policy, window) for window in WINDOWS for arm, policy in ((TIERED_ARM, "tiered"),
                                                                           (UNTIERED_ARM, "off"))]
    cells += [(arm, "tiered", "D+28") for arm in arm_names() if arm not in (TIERED_ARM, UNTIERED_ARM)]
    return cells
