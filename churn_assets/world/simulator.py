"""The seeded world simulator: a Software-Asset-Management world whose every entity class drifts.

`simulate(config)` yields ledger events day by day; `generate_ledger` writes them as a format-2 ledger.
Drift rules beyond the reference (so that every freshness tier really changes): freed seats are
re-assigned and new licenses bought (the assigned pool does not drain), spend follows the current list
price, contracts expire or renew inside the timeline, tickets open and resolve, vendors are renamed or
re-tiered a handful of times. Every entity draws a fixed activity weight at creation; targets are drawn
in proportion to it (constant per-entity Poisson rates, which the predictor later estimates).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from churn_assets.seal_key import SealKey
from churn_assets.world import gc_pause
from churn_assets.world.calendar import add_months
from churn_assets.world.config import WorldConfig
from churn_assets.world.draws import Draws, WeightedPool
from churn_assets.world.events import ID_PREFIXES, LICENSE_MODELS, TICKET_PRIORITIES, VENDOR_TIERS
from churn_assets.world.ledger import Event, LedgerManifest, LedgerWriter

IDLE_WINDOW_DAYS = 30  # a license unused this long may be reclaimed

_VENDOR_STEMS = ("North", "Blue", "Apex", "Cedar", "Quanta", "Silver", "Iron", "Lumen", "Nimbus", "Vertex",
                 "Harbor", "Orbit", "Summit", "Beacon", "Granite", "Helix", "Juniper", "Kestrel", "Meridian",
                 "Nova", "Pioneer", "Redwood", "Sable", "Tidal", "Zephyr", "Aurora", "Bramble", "Cobalt")
_VENDOR_SUFFIXES = ("soft", "ware", "works", "labs", "systems", "cloud", "logic", "data")
_PRODUCT_WORDS = ("Analytics", "CRM", "Design", "Docs", "Mail", "Chat", "Vault", "Build", "Sign", "Notes",
                  "Insight", "Flow", "Desk", "Sheets", "Track", "Meet", "Code", "Guard", "Board", "Forms")
_BUSINESS_UNITS = ("Engineering", "Sales", "Marketing", "Finance", "Operations", "People", "Legal",
                   "Support", "Product", "Research")
_TEAMS = ("Platform", "Core", "Growth", "Enterprise", "EMEA", "Americas", "APAC", "Data", "Tools",
          "Field", "Planning", "Services")
_OFFBOARD_REASONS = ("voluntary", "involuntary")


@dataclass
class _Contract:
    vendor_id: str
    expires_on: dt.date
    term_months: int
    annual_value: float
    committed_seats: int
    notice_days: int
    auto_renew: bool
    active: bool = True


@dataclass
class _License:
    product_id: str
    usage: float = 1.0  # multiplies the holder's activity weight; shelfware is bought but barely used
    holder: str | None = None
    last_used: dt.date | None = None


@dataclass
class _World:
    """The simulator's own bookkeeping (not the fold: the fold reads only the ledger)."""

    vendor_names: dict[str, str] = field(default_factory=dict)
    vendor_tiers: dict[str, str] = field(default_factory=dict)
    vendors: WeightedPool = field(default_factory=WeightedPool)
    product_vendor: dict[str, str] = field(default_factory=dict)
    product_price: dict[str, float] = field(default_factory=dict)
    product_api: dict[str, bool] = field(default_factory=dict)
    products: WeightedPool = field(default_factory=WeightedPool)
    cost_centers: WeightedPool = field(default_factory=WeightedPool)
    user_cc: dict[str, str] = field(default_factory=dict)
    user_weight: dict[str, float] = field(default_factory=dict)
    active_users: WeightedPool = field(default_factory=WeightedPool)
    user_licenses: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    licenses: dict[str, _License] = field(default_factory=dict)
    assigned: WeightedPool = field(default_factory=WeightedPool)
    unassigned: set[str] = field(default_factory=set)
    contracts: dict[str, _Contract] = field(default_factory=dict)
    tickets_open: dict[str, dt.date] = field(default_factory=dict)
    tickets_in_progress: dict[str, dt.date] = field(default_factory=dict)
    scheduled: dict[dt.date, list[tuple[str, str]]] = field(default_factory=lambda: defaultdict(list))
    next_id: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def new_id(self, prefix: str, width: int) -> str:
        n = self.next_id[prefix]
        self.next_id[prefix] = n + 1
        return f"{prefix}_{n:0{width}d}"


class Simulator:
    """Generates one world's events. Deterministic: all randomness comes from `Draws(seed)`."""

    def __init__(self, config: WorldConfig) -> None:
        self.config = config
        self.ref = config.section("reference_data")
        self.rates = config.section("rates_per_day")
        self.drift = config.section("drift")
        self.cons = config.section("consumption")
        aw = config.section("activity_weight")
        self._alpha, self._cap = aw["alpha"], aw["max"]
        self.draws = Draws(config.seed)
        self.w = _World()
        self._out: list[Event] = []
        self.day = config.start

    # -- plumbing -------------------------------------------------------------------------------

    def _emit(self, kind: str, entity_type: str, entity_id: str, **payload: Any) -> None:
        self._out.append(Event(self.day, kind, entity_type, entity_id, payload))

    def _weight(self) -> float:
        return round(self.draws.pareto_weight(self._alpha, self._cap), 4)

    def run(self) -> Iterator[list[Event]]:
        """Yield each day's events in order."""
        for offset in range(self.config.days):
            self.day = self.config.start + dt.timedelta(days=offset)
            if offset == 0:
                self._reference_data()
            self._daily()
            events, self._out = self._out, []
            yield events

    # -- day 0 ----------------------------------------------------------------------------------

    def _reference_data(self) -> None:
        d, w, ref = self.draws, self.w, self.ref
        used_names: set[str] = set()
        for i in range(ref["vendors"]):
            vid = w.new_id(ID_PREFIXES["vendor"], 3)
            name = self._fresh_vendor_name(used_names, i)
            tier = VENDOR_TIERS[0] if d.chance(0.2) else d.choice(VENDOR_TIERS[1:])
            weight = self._weight()
            w.vendor_names[vid], w.vendor_tiers[vid] = name, tier
            w.vendors.add(vid, weight)
            self._emit("vendor_registered", "vendor", vid, name=name, tier=tier, activity_weight=weight)

        units = _BUSINESS_UNITS[: ref["business_units"]]
        cc_names: set[str] = set()
        for i in range(ref["cost_centers"]):
            cid = w.new_id(ID_PREFIXES["cost_center"], 3)
            unit = units[i % len(units)] if i < len(units) else d.choice(units)
            name = f"{unit} {_TEAMS[(i // len(units)) % len(_TEAMS)]}"
            while name in cc_names:
                name = f"{name} {len(cc_names)}"
            cc_names.add(name)
            weight = self._weight()
            w.cost_centers.add(cid, weight)
            self._emit("cost_center_created", "cost_center", cid, name=name, business_unit=unit,
                       activity_weight=weight)

        vendor_ids = list(w.vendor_names)
        lo, hi = ref["list_price_usd"]
        product_names: set[str] = set()
        for i in range(ref["products"]):
            pid = w.new_id(ID_PREFIXES["product"], 4)
            picked = vendor_ids[i] if i < len(vendor_ids) else w.vendors.pick(d)
            assert picked is not None
            vid = picked
            stem = w.vendor_names[vid]
            name = f"{stem} {d.choice(_PRODUCT_WORDS)}"
            while name in product_names:
                name = f"{stem} {d.choice(_PRODUCT_WORDS)} {len(product_names)}"
            product_names.add(name)
            price = round(d.uniform(lo, hi), 2)
            api = d.chance(ref["api_product_share"])
            weight = self._weight()
            w.product_vendor[pid], w.product_price[pid], w.product_api[pid] = vid, price, api
            w.products.add(pid, weight)
            self._emit("product_listed", "product", pid, name=name, vendor_id=vid,
                       license_model=d.choice(LICENSE_MODELS), api_access=api, list_price_usd=price,
                       activity_weight=weight)

        for i in range(ref["contracts"]):
            picked = vendor_ids[i] if i < len(vendor_ids) else w.vendors.pick(d)
            assert picked is not None
            self._sign_contract(picked, existing=True)

        for _ in range(ref["users"]):
            self._hire(with_license=False)
        for uid in list(w.user_cc)[: ref["initial_licenses"]]:
            picked = w.products.pick(d)
            assert picked is not None
            self._purchase_and_assign(picked, uid)

    def _fresh_vendor_name(self, used: set[str], i: int) -> str:
        d = self.draws
        for _ in range(50):
            name = d.choice(_VENDOR_STEMS) + d.choice(_VENDOR_SUFFIXES)
            if name not in used:
                used.add(name)
                return name.capitalize()
        name = f"Vendor{i}"
        used.add(name)
        return name

    # -- contracts ------------------------------------------------------------------------------

    def _sign_contract(self, vendor_id: str, existing: bool = False) -> str:
        """A new contract; `existing` ones were signed before the calendar starts and run into it."""
        d, w = self.draws, self.w
        cid = w.new_id(ID_PREFIXES["contract"], 4)
        term = d.choice(self.ref["contract_terms_months"])
        if existing:
            # The contract is mid-term on day 0: its expiry falls anywhere within one term from now.
            term_days = term * 365 // 12
            expires_on = self.day + dt.timedelta(days=d.integer(0, term_days - 1))
            effective_on = add_months(expires_on + dt.timedelta(days=1), -term)
            signed_on = effective_on - dt.timedelta(days=d.integer(0, 30))
        else:
            signed_on = self.day
            effective_on = self.day + dt.timedelta(days=d.integer(0, 14))
            expires_on = add_months(effective_on, term) - dt.timedelta(days=1)
        seats = d.integer(5, 40)
        vendor_products = [p for p, v in self.w.product_vendor.items() if v == vendor_id]
        mean_price = sum(w.product_price[p] for p in vendor_products) / max(1, len(vendor_products))
        value = round(seats * mean_price * 12 * d.uniform(0.7, 0.95), 2)
        notice = d.choice((30, 60, 90))
        auto = d.chance(0.5)
        weight = self._weight()
        w.contracts[cid] = _Contract(vendor_id, expires_on, term, value, seats, notice, auto)
        self._emit("contract_signed", "contract", cid, vendor_id=vendor_id, term_months=term,
                   signed_on=signed_on.isoformat(), effective_on=effective_on.isoformat(),
                   expires_on=expires_on.isoformat(), annual_value_usd=value, committed_seats=seats,
                   auto_renew=auto, renewal_notice_days=notice, activity_weight=weight)
        self._schedule_term_end(cid)
        return cid

    def _schedule_term_end(self, cid: str) -> None:
        """Decide now (seeded) whether the contract renews inside its notice window or expires."""
        d, c = self.draws, self.w.contracts[cid]
        p = self.drift["contract_renewal_probability"]
        if c.auto_renew:
            p = min(1.0, p + 0.2)
        if d.chance(p):
            earliest = max(self.day, c.expires_on - dt.timedelta(days=c.notice_days))
            span = (c.expires_on - earliest).days
            day = earliest + dt.timedelta(days=d.integer(0, max(0, span)))
            self.w.scheduled[day].append(("renew", cid))
        else:
            self.w.scheduled[c.expires_on + dt.timedelta(days=1)].append(("expire", cid))

    def _renew(self, cid: str) -> None:
        d, c = self.draws, self.w.contracts[cid]
        if not c.active:
            return
        lo, hi = self.drift["renewal_value_change"]
        s_lo, s_hi = self.drift["renewal_seat_change"]
        previous = c.expires_on
        term = d.choice(self.ref["contract_terms_months"])
        effective_on = previous + dt.timedelta(days=1)
        c.expires_on = add_months(effective_on, term) - dt.timedelta(days=1)
        c.term_months = term
        c.annual_value = round(c.annual_value * (1 + d.uniform(lo, hi)), 2)
        c.committed_seats = max(1, c.committed_seats + d.integer(s_lo, s_hi))
        self._emit("contract_renewed", "contract", cid, term_months=term,
                   effective_on=effective_on.isoformat(), expires_on=c.expires_on.isoformat(),
                   annual_value_usd=c.annual_value, committed_seats=c.committed_seats,
                   previous_expires_on=previous.isoformat())
        self._schedule_term_end(cid)

    def _expire(self, cid: str) -> None:
        c = self.w.contracts[cid]
        if c.active and c.expires_on < self.day:
            c.active = False
            self._emit("contract_expired", "contract", cid, expired_on=self.day.isoformat())

    def _contract_for(self, product_id: str) -> str:
        """The vendor's active contract that runs longest; a vendor without one signs a new contract."""
        vid = self.w.product_vendor[product_id]
        active = [(c.expires_on, cid) for cid, c in self.w.contracts.items()
                  if c.vendor_id == vid and c.active and c.expires_on >= self.day]
        if active:
            return max(active)[1]
        return self._sign_contract(vid)

    # -- people and licenses --------------------------------------------------------------------

    def _hire(self, with_license: bool) -> str:
        d, w = self.draws, self.w
        uid = w.new_id(ID_PREFIXES["user"], 6)
        cc = w.cost_centers.pick(d)
        assert cc is not None
        weight = self._weight()
        w.user_cc[uid], w.user_weight[uid] = cc, weight
        w.active_users.add(uid, weight)
        self._emit("user_hired", "user", uid, cost_center_id=cc, activity_weight=weight)
        if with_license:
            pid = w.products.pick(d)
            assert pid is not None
            self._purchase_and_assign(pid, uid)
        return uid

    def _purchase_and_assign(self, product_id: str, user_id: str) -> None:
        w = self.w
        contract_id = self._contract_for(product_id)
        lid = w.new_id(ID_PREFIXES["license"], 6)
        weight = self._weight()
        shelfware = self.draws.chance(self.drift["shelfware_share"])
        w.licenses[lid] = _License(product_id, usage=self.drift["shelfware_usage"] if shelfware else 1.0)
        self._emit("license_purchased", "license", lid, product_id=product_id, contract_id=contract_id,
                   unit_price_usd=w.product_price[product_id], activity_weight=weight)
        self._assign(lid, user_id)

    def _assign(self, lid: str, user_id: str) -> None:
        w, lic = self.w, self.w.licenses[lid]
        lic.holder, lic.last_used = user_id, self.day
        w.unassigned.discard(lid)
        w.assigned.add(lid, w.user_weight[user_id] * lic.usage)
        w.user_licenses[user_id].add(lid)
        self._emit("license_assigned", "license", lid, user_id=user_id, product_id=lic.product_id)

    def _unassign(self, lid: str, reason: str) -> None:
        w, lic = self.w, self.w.licenses[lid]
        assert lic.holder is not None
        self._emit("license_unassigned", "license", lid, user_id=lic.holder, product_id=lic.product_id,
                   reason=reason)
        w.user_licenses[lic.holder].discard(lid)
        lic.holder = None
        w.assigned.discard(lid)
        w.unassigned.add(lid)

    def _holds_product(self, user_id: str, product_id: str) -> bool:
        return any(self.w.licenses[lid].product_id == product_id for lid in self.w.user_licenses[user_id])

    def _pick_user_without(self, product_id: str, exclude: str | None = None) -> str | None:
        for _ in range(20):
            uid = self.w.active_users.pick(self.draws)
            if uid is None:
                return None
            if uid != exclude and not self._holds_product(uid, product_id):
                return uid
        return None

    # -- one day --------------------------------------------------------------------------------

    def _daily(self) -> None:
        d, w, r = self.draws, self.w, self.rates
        for action, cid in w.scheduled.pop(self.day, []):
            (self._renew if action == "renew" else self._expire)(cid)

        for _ in range(d.poisson(r["vendor_changes"])):
            self._vendor_change()
        for _ in range(d.poisson(r["price_changes"])):
            self._price_change()
        for _ in range(d.poisson(r["hires"])):
            self._hire(with_license=d.chance(self.drift["new_hire_license_probability"]))
        for _ in range(d.poisson(r["offboards"])):
            self._offboard()
        for _ in range(d.poisson(r["cost_center_moves"])):
            self._move_cost_center()
        for _ in range(d.poisson(r["reassignments"])):
            self._reassign()
        self._reassign_freed_seats()
        for _ in range(d.poisson(r["new_purchases"])):
            pid = w.products.pick(d)
            uid = self._pick_user_without(pid) if pid else None
            if pid and uid:
                self._purchase_and_assign(pid, uid)
        for _ in range(d.poisson(r["idle_reclamations"])):
            self._reclaim_idle()
        for _ in range(d.poisson(r["contract_signings"])):
            vid = w.vendors.pick(d)
            if vid:
                self._sign_contract(vid)
        self._tickets()
        self._consumption()

    def _vendor_change(self) -> None:
        d, w = self.draws, self.w
        vid = w.vendors.pick(d)
        if vid is None:
            return
        name, tier = w.vendor_names[vid], w.vendor_tiers[vid]
        if d.chance(self.drift["vendor_rename_share"]):
            change = "renamed"
            acquirer = d.choice(_VENDOR_STEMS) + d.choice(_VENDOR_SUFFIXES)
            new_name, new_tier = f"{acquirer.capitalize()} {name.split()[-1]}", tier
            if new_name == name:
                new_name = f"{new_name} Group"
        else:
            change = "tier_changed"
            new_name, new_tier = name, d.choice([t for t in VENDOR_TIERS if t != tier])
        w.vendor_names[vid], w.vendor_tiers[vid] = new_name, new_tier
        self._emit("vendor_changed", "vendor", vid, change=change, name=new_name, tier=new_tier,
                   previous_name=name, previous_tier=tier)

    def _price_change(self) -> None:
        d, w = self.draws, self.w
        pid = w.products.pick(d)
        if pid is None:
            return
        lo, hi = self.drift["price_change_range"]
        old = w.product_price[pid]
        new = max(1.0, round(old * (1 + d.uniform(lo, hi)), 2))
        if new == old:
            return
        w.product_price[pid] = new
        reason = "list_price_increase" if new > old else "list_price_decrease"
        self._emit("price_changed", "product", pid, list_price_usd=new, previous_list_price_usd=old,
                   reason=reason)

    def _offboard(self) -> None:
        d, w = self.draws, self.w
        uid = w.active_users.pick(d)
        if uid is None or len(w.active_users) <= 1:
            return
        w.active_users.discard(uid)
        self._emit("user_offboarded", "user", uid, reason=d.choice(_OFFBOARD_REASONS))
        for lid in sorted(w.user_licenses[uid]):
            self._unassign(lid, "offboarded")

    def _move_cost_center(self) -> None:
        d, w = self.draws, self.w
        uid = w.active_users.pick(d)
        if uid is None:
            return
        old = w.user_cc[uid]
        for _ in range(10):
            new = w.cost_centers.pick(d)
            if new and new != old:
                w.user_cc[uid] = new
                self._emit("user_moved_cost_center", "user", uid, from_cost_center_id=old,
                           to_cost_center_id=new)
                return

    def _reassign(self) -> None:
        d, w = self.draws, self.w
        lid = w.assigned.pick(d)
        if lid is None:
            return
        lic = w.licenses[lid]
        assert lic.holder is not None
        to = self._pick_user_without(lic.product_id, exclude=lic.holder)
        if to is None:
            return
        frm = lic.holder
        w.user_licenses[frm].discard(lid)
        w.user_licenses[to].add(lid)
        lic.holder, lic.last_used = to, self.day
        w.assigned.add(lid, w.user_weight[to] * lic.usage)
        self._emit("license_reassigned", "license", lid, from_user_id=frm, to_user_id=to,
                   product_id=lic.product_id)

    def _reassign_freed_seats(self) -> None:
        p = self.drift["freed_seat_reassign_probability"]
        for lid in sorted(self.w.unassigned):
            if self.draws.chance(p):
                uid = self._pick_user_without(self.w.licenses[lid].product_id)
                if uid is not None:
                    self._assign(lid, uid)

    def _reclaim_idle(self) -> None:
        cutoff = self.day - dt.timedelta(days=IDLE_WINDOW_DAYS)
        idle = [lid for lid in self.w.assigned.members()
                if (self.w.licenses[lid].last_used or self.day) <= cutoff]
        if idle:
            self._unassign(self.draws.choice(idle), "reclaimed_idle")

    def _tickets(self) -> None:
        d, w, drift = self.draws, self.w, self.drift
        for tid in list(w.tickets_in_progress):
            if d.chance(drift["ticket_resolve_probability"]):
                del w.tickets_in_progress[tid]
                self._emit("ticket_resolved", "ticket", tid, status="resolved", previous_status="in_progress")
        for tid, opened in list(w.tickets_open.items()):
            if opened < self.day and d.chance(drift["ticket_start_probability"]):
                del w.tickets_open[tid]
                w.tickets_in_progress[tid] = self.day
                self._emit("ticket_status_changed", "ticket", tid, status="in_progress",
                           previous_status="open")
        for _ in range(d.poisson(self.rates["tickets_opened"])):
            lid = w.assigned.pick(d)
            if lid is None:
                return
            lic = w.licenses[lid]
            tid = w.new_id(ID_PREFIXES["ticket"], 6)
            w.tickets_open[tid] = self.day
            priority = TICKET_PRIORITIES[min(3, int(d.exponential(0.9)))]
            assert lic.holder is not None
            self._emit("ticket_opened", "ticket", tid, user_id=lic.holder, product_id=lic.product_id,
                       priority=priority, status="open")

    def _consumption(self) -> None:
        d, w = self.draws, self.w
        lo, hi = self.cons["session_minutes"]
        api_mean = self.cons["api_calls_mean"]
        for _ in range(self.cons["events_per_day"]):
            lid = w.assigned.pick(d)
            if lid is None:
                return
            lic = w.licenses[lid]
            lic.last_used = self.day
            sessions = d.integer(1, 5)
            minutes = d.integer(lo, hi)
            api_calls = int(d.exponential(api_mean)) if w.product_api[lic.product_id] else 0
            assert lic.holder is not None
            self._emit("consumption_logged", "license", lid, user_id=lic.holder, product_id=lic.product_id,
                       sessions=sessions, session_minutes=minutes, api_calls=api_calls)


def simulate(config: WorldConfig) -> Iterator[Event]:
    """Every event of the world, in ledger order."""
    for day_events in Simulator(config).run():
        yield from day_events


def generate_ledger(
    config: WorldConfig,
    out_dir: Path,
    on_day: Callable[[dt.date], None] | None = None,
    key: SealKey | None = None,
) -> LedgerManifest:
    """Simulate `config` and write `out_dir/ledger.jsonl` + `manifest.json` (atomically); the manifest's meaning
    check is sealed with `key` (default: the state folder's, `seal_key.current_key`)."""
    writer = LedgerWriter(Path(out_dir), config.data, config.world_id, config.config_hash, key)
    try:
        # The simulator's state holds no reference cycle; a 100x world spent 7 s of 84 in the cyclic
        # collector's full collections (123 of them) with it on (see gc_pause).
        with gc_pause.cyclic_gc_paused():
            for day_events in Simulator(config).run():
                writer.extend(day_events)
                if on_day is not None and day_events:
                    on_day(day_events[0].at)
    except BaseException:
        writer.abort()
        raise
    return writer.close()
