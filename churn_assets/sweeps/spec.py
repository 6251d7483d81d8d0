"""A sweep: a named grid of evaluation cells (worlds x arms x policies x T'), and its cells.

Pure values: no Dagster, no stores. A `SweepSpec` says what to run; `cells()` expands it into `Cell`s (one
scenario each; an arm with a fixed policy gives one cell whatever the policies), deduplicated and in a stable
order; `sweep_id` names it by content, so launching the same spec twice finds the same sweep and its cells.

Worlds are given by id (registered already) or by recipe (`WorldRecipe`: a world config, a seed and
`section.key=value` overrides, as `churnbench worlds add` takes them); a recipe resolves to a world id without
touching anything (`WorldRecipe.config()`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from churn_assets.canonical import canonical_json, sha256_hex
from churn_assets.errors import UserFacingError
from churn_assets.world.calendar import Day
from churn_assets.world.config import WorldConfig, load_config

DETERMINISTIC, LLM = "deterministic", "llm"
AGENTS = (DETERMINISTIC, LLM)


class SweepError(UserFacingError, ValueError):
    """A sweep that cannot be run as given (an unknown preset, arm or policy, a T' after T, no cells, ...)."""


@dataclass(frozen=True)
class WorldRecipe:
    """A world made from a config: the default (or `config_path`), a seed and overrides; `label` names it in
    reports (e.g. "rates x2")."""

    seed: int
    config_path: str | None = None
    overrides: tuple[str, ...] = ()
    name: str | None = None
    days: int | None = None
    label: str = ""

    def config(self) -> WorldConfig:
        return load_config(self.config_path, seed=self.seed, days=self.days, name=self.name,
                           overrides=list(self.overrides))

    def to_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "config_path": self.config_path, "overrides": list(self.overrides),
                "name": self.name, "days": self.days, "label": self.label}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WorldRecipe:
        return cls(int(data["seed"]), data.get("config_path"), tuple(data.get("overrides") or ()), data.get("name"),
                   data.get("days"), str(data.get("label") or ""))


WorldRef = str | WorldRecipe


@dataclass(frozen=True)
class Cell:
    """One evaluation cell: a scenario (world, arm, policy, T', T, agent, SaaS profile) and its labels."""

    world_id: str
    arm: str
    policy: str
    t_prime: Day
    t: Day
    agent: str = DETERMINISTIC
    saas_profile: str = "default"
    world_label: str = ""

    @property
    def gap(self) -> int:
        return (self.t - self.t_prime).days

    def to_json(self) -> dict[str, Any]:
        return {"world_id": self.world_id, "arm": self.arm, "policy": self.policy,
                "t_prime": self.t_prime.isoformat(), "t": self.t.isoformat(), "agent": self.agent,
                "saas_profile": self.saas_profile, "world_label": self.world_label}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Cell:
        return cls(str(data["world_id"]), str(data["arm"]), str(data["policy"]),
                   dt.date.fromisoformat(data["t_prime"]), dt.date.fromisoformat(data["t"]),
                   str(data.get("agent") or DETERMINISTIC), str(data.get("saas_profile") or "default"),
                   str(data.get("world_label") or ""))


@dataclass(frozen=True)
class SweepSpec:
    """What a sweep runs. `t_primes` and `gaps` (T - T' in days) add up; `exposure_only` cells compute exposure
    and prediction from the ledger alone (no stores, no answers); `evaluate_worlds` limits full evaluation to
    those worlds (by index into `worlds`) when `exposure_only` is set: the rest stay exposure-only.

    Windows of arrival days (`evaluation/window.py`): with `window_days` N > 0, each T' = T - g for g in
    `window_gaps` also gets the N days ending at T as evaluation days, exposure-only cells (the task set sampled
    at T, re-anchored to each day); every `window_evaluate_every`-th of those days counting back from T is also
    evaluated in full, which only the `unlimited` SaaS plan may run (decision 208)."""

    preset: str
    worlds: tuple[WorldRef, ...]
    arms: tuple[str, ...]
    policies: tuple[str, ...]
    t: Day
    t_primes: tuple[Day, ...] = ()
    gaps: tuple[int, ...] = ()
    agent: str = DETERMINISTIC
    saas_profile: str = "default"
    exposure_only: bool = False
    evaluate_worlds: tuple[int, ...] = ()
    evaluate_gaps: tuple[int, ...] = ()  # with `evaluate_worlds`: the gaps evaluated (empty: every gap)
    description: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)  # preset-specific report options (hashed)
    repeats: int = 1  # each cell answered K times (`evaluation/repeats.py`); 1 leaves the sweep id as it was
    window_days: int = 0
    window_gaps: tuple[int, ...] = ()
    window_evaluate_every: int = 0  # 0: no window day evaluated
    # A grid changed from the preset's own (arms, policies, T, T'/gaps, agent): its id is `custom-<hash>` and its
    # description is its grid's (`presets.customize`). Stored only when True, so older sweeps keep their ids.
    custom: bool = False

    def __post_init__(self) -> None:
        if not self.worlds:
            raise SweepError(f"sweep {self.preset}: no world (give world ids, or seeds for a world config)")
        if not self.arms:
            raise SweepError(f"sweep {self.preset}: no arm")
        if not self.policies:
            raise SweepError(f"sweep {self.preset}: no policy")
        if self.agent not in AGENTS:
            raise SweepError(f"sweep {self.preset}: agent {self.agent!r} is not one of {', '.join(AGENTS)}")
        if not self.t_primes and not self.gaps:
            raise SweepError(f"sweep {self.preset}: no T' (give t_primes or gaps)")
        bad = [g for g in self.gaps if g < 0]
        if bad:
            raise SweepError(f"sweep {self.preset}: a gap is T - T' in days and cannot be negative ({bad[0]})")
        late = [d for d in self.t_primes if d > self.t]
        if late:
            raise SweepError(f"sweep {self.preset}: t_primes: T'={late[0]} is after t (T={self.t}); T' is the cache "
                             "build day, on or before T")
        if not set(self.evaluate_worlds) <= set(range(len(self.worlds))):
            raise SweepError(f"sweep {self.preset}: evaluate_worlds {list(self.evaluate_worlds)} names no world")
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or not 1 <= self.repeats <= 100:
            raise SweepError(f"sweep {self.preset}: repeats must be a whole number from 1 to 100, got "
                             f"{self.repeats!r}")
        if self.window_days < 0 or self.window_evaluate_every < 0:
            raise SweepError(f"sweep {self.preset}: window days and their evaluation step cannot be negative")
        if self.window_days and not self.window_gaps:
            raise SweepError(f"sweep {self.preset}: a window of {self.window_days} days needs the gaps of its T'")
        short = [g for g in self.window_gaps if g < self.window_days - 1]
        if self.window_days and short:
            raise SweepError(f"sweep {self.preset}: the window of {self.window_days} days ending at T={self.t} "
                             f"starts before T' = T - {short[0]} (a window's T' is at least {self.window_days - 1} "
                             "days before T)")
        if self.window_days and self.window_evaluate_every and self.saas_profile != "unlimited":
            raise SweepError(f"sweep {self.preset}: evaluated window days run only on the `unlimited` SaaS plan "
                             f"(give --saas-profile unlimited; got {self.saas_profile!r}): "
                             f"{self.window_days // self.window_evaluate_every} day(s) of every cell on a quota'd "
                             "plan would take hours")

    def build_days(self) -> list[Day]:
        """Every T', earliest first (gaps turned into days)."""
        days = {*self.t_primes, *(self.t - dt.timedelta(days=g) for g in self.gaps)}
        return sorted(days)

    def window_cells(self) -> list[tuple[Day, Day, bool]]:
        """(T', T, evaluated) of every window day: each window T' with each of the `window_days` days ending at T,
        T' earliest first, then T; `evaluated` for every `window_evaluate_every`-th day back from T."""
        if not self.window_days:
            return []
        out = []
        for t_prime in sorted({self.t - dt.timedelta(days=g) for g in self.window_gaps}):
            for back in range(self.window_days - 1, -1, -1):
                every = self.window_evaluate_every
                out.append((t_prime, self.t - dt.timedelta(days=back), bool(every) and back % every == 0))
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "preset": self.preset,
            "worlds": [w.to_json() if isinstance(w, WorldRecipe) else w for w in self.worlds],
            "arms": list(self.arms), "policies": list(self.policies), "t": self.t.isoformat(),
            "t_primes": [d.isoformat() for d in self.t_primes], "gaps": list(self.gaps), "agent": self.agent,
            "saas_profile": self.saas_profile, "exposure_only": self.exposure_only,
            "evaluate_worlds": list(self.evaluate_worlds), "evaluate_gaps": list(self.evaluate_gaps),
            "description": self.description, "options": dict(self.options),
            **({"repeats": self.repeats} if self.repeats != 1 else {}),  # absent at 1: sweep ids unchanged
            # A spec without a window keeps the JSON (and the sweep id) it had before windows existed.
            **({"window_days": self.window_days, "window_gaps": list(self.window_gaps),
                "window_evaluate_every": self.window_evaluate_every} if self.window_days else {}),
            **({"custom": True} if self.custom else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SweepSpec:
        worlds = tuple(WorldRecipe.from_json(w) if isinstance(w, Mapping) else str(w) for w in data["worlds"])
        return cls(str(data["preset"]), worlds, tuple(data["arms"]), tuple(data["policies"]),
                   dt.date.fromisoformat(data["t"]), tuple(dt.date.fromisoformat(d) for d in data.get("t_primes", [])),
                   tuple(int(g) for g in data.get("gaps", [])), str(data.get("agent") or DETERMINISTIC),
                   str(data.get("saas_profile") or "default"), bool(data.get("exposure_only")),
                   tuple(int(i) for i in data.get("evaluate_worlds", [])),
                   tuple(int(g) for g in data.get("evaluate_gaps", [])), str(data.get("description") or ""),
                   dict(data.get("options") or {}), int(data.get("repeats", 1)), int(data.get("window_days") or 0),
                   tuple(int(g) for g in data.get("window_gaps", [])), int(data.get("window_evaluate_every") or 0),
                   bool(data.get("custom")))

    @property
    def sweep_id(self) -> str:
        """`<preset>-<hash8 of the spec>` (`custom-<hash8>` for a grid changed from its preset's): the same spec is
        the same sweep (its cells are reused)."""
        prefix = CUSTOM if self.custom else self.preset
        return f"{prefix}-{sha256_hex(canonical_json(self.to_json()))[:8]}"

    def grid(self) -> list[tuple[str, str]]:
        """What the sweep runs, as (what, values) pairs a report prints: worlds, arms, policies, T, T' (the gaps
        and the days they give), agent, SaaS profile, and which cells are exposure-only."""
        def days(values: Sequence[Day]) -> str:
            return ", ".join(d.isoformat() for d in values)

        gaps = f"gaps T - T' of {_numbers(self.gaps)} day(s)" if self.gaps else ""
        fixed = f"T' = {days(self.t_primes)}" if self.t_primes else ""
        rows = [("worlds", "; ".join(_world_text(w) for w in self.worlds)),
                ("arms", ", ".join(self.arms)),
                ("policies", ", ".join(self.policies) + " (an arm with a fixed policy runs that one)"),
                ("T", self.t.isoformat()),
                ("T'", "; ".join(x for x in (gaps, fixed) if x) + f" (T' = {days(self.build_days())})"),
                ("agent", self.agent), ("SaaS profile", self.saas_profile)]
        if self.exposure_only:
            full = ", ".join(_world_text(self.worlds[i]) for i in self.evaluate_worlds) or "none"
            at = f" at gaps {_numbers(self.evaluate_gaps)}" if self.evaluate_gaps else ""
            rows.append(("evaluated in full", f"{full}{at}; every other cell exposure-only (from the ledger)"))
        if self.repeats != 1:
            rows.append(("repeats", f"{self.repeats} per evaluated cell"))
        if self.window_days:
            every = (f", every {self.window_evaluate_every}th day evaluated" if self.window_evaluate_every else "")
            rows.append(("window", f"{self.window_days} arrival days ending at T for gaps "
                         f"{_numbers(self.window_gaps)}{every}"))
        return rows

    def grid_sentence(self) -> str:
        """The grid in one sentence (a custom grid's description)."""
        return f"a custom grid from the {self.preset} preset: " + "; ".join(f"{k} {v}" for k, v in self.grid())


CUSTOM = "custom"  # the sweep id prefix of a grid changed from its preset's


def _numbers(values: Sequence[int]) -> str:
    return ", ".join(str(v) for v in values)


def _world_text(world: WorldRef) -> str:
    """A world of a spec as a person reads it: its id, or its recipe (its label, which a preset gives worlds it
    derives, e.g. "seed 42, rates x2"; else seed, config and overrides), with its length in days."""
    if not isinstance(world, WorldRecipe):
        return world
    parts = [world.label] if world.label else [f"seed {world.seed}"]
    if not world.label and world.config_path:
        parts.append(f"config {world.config_path}")
    if not world.label and world.overrides:
        parts.append("set " + " ".join(world.overrides))
    if world.days:
        parts.append(f"{world.days} days")
    return ", ".join(parts)


@dataclass(frozen=True)
class ResolvedWorld:
    world_id: str
    label: str
    config: WorldConfig | None  # None: a world given by id (registered already)


def resolve_worlds(spec: SweepSpec) -> list[ResolvedWorld]:
    """Each world of the spec with its id (recipes build their config; nothing is written)."""
    out = []
    for w in spec.worlds:
        if isinstance(w, WorldRecipe):
            config = w.config()
            out.append(ResolvedWorld(config.world_id, w.label or f"seed {w.seed}", config))
        else:
            out.append(ResolvedWorld(w, w, None))
    return out


def cells(spec: SweepSpec, worlds: Sequence[ResolvedWorld], fixed_policy: Mapping[str, str | None]
          ) -> tuple[list[Cell], list[Cell]]:
    """(evaluated cells, exposure-only cells) of a spec, in a stable order (world, arm, policy, T', then the window
    days' T). `fixed_policy`: arm -> the policy it always serves (None: it takes the sweep's policies). Window
    days are exposure-only cells; those `SweepSpec.window_cells` marks are evaluated too."""
    evaluated: dict[tuple[Any, ...], Cell] = {}
    exposure: dict[tuple[Any, ...], Cell] = {}
    evaluate_days = {spec.t - dt.timedelta(days=g) for g in spec.evaluate_gaps}
    window = spec.window_cells()
    for i, world in enumerate(worlds):
        for arm in spec.arms:
            if arm not in fixed_policy:
                raise SweepError(f"sweep {spec.preset}: unknown arm {arm!r} (known: {', '.join(fixed_policy)})")
            fixed = fixed_policy[arm]
            for policy in ([fixed] if fixed else spec.policies):
                for t_prime in spec.build_days():
                    cell = Cell(world.world_id, arm, policy, t_prime, spec.t, spec.agent, spec.saas_profile,
                                world.label)
                    key = (world.world_id, arm, policy, t_prime, spec.t)
                    full = not spec.exposure_only or (i in spec.evaluate_worlds
                                                      and (not evaluate_days or t_prime in evaluate_days))
                    (evaluated if full else exposure).setdefault(key, cell)
                    if spec.exposure_only:
                        exposure.setdefault(key, cell)  # the grid's exposure covers every cell
                for t_prime, t, evaluate in window:
                    cell = Cell(world.world_id, arm, policy, t_prime, t, spec.agent, spec.saas_profile, world.label)
                    key = (world.world_id, arm, policy, t_prime, t)
                    exposure.setdefault(key, cell)
                    if evaluate and (not spec.exposure_only or i in spec.evaluate_worlds):
                        evaluated.setdefault(key, cell)
    if not evaluated and not exposure:
        raise SweepError(f"sweep {spec.preset}: no cells")
    return list(evaluated.values()), list(exposure.values())
