"""Task templates: the one source of truth for what the benchmark asks.

A template declares its question text (with `{param}` placeholders), intent, `task_tier`, answer type and
rounding, the entity classes its gold reads, its registry measure, how its parameters are sampled from the
world at T, its share of the default task set, and what moves its answer (`depends_on`, `moving_kinds`).
Gold computations live in `gold.py`; this module imports no fold, so arms and the deterministic agent
may read it (and the parser built on it) without touching the ledger.

Words used in question texts, stated once here and in docs/tasks.md:

- "today" is the task's anchor T. "In the last N days (including today)" is the N days T-N+1 .. T. Windows
  end at T whatever vintage an answer was served from.
- "Held by active users": a license whose holder is active today (docs/rules.md, "Spend": "assigned"); a license is
  "used" in a window when the window has a consumption record on that license.
- "Monthly license spend": docs/rules.md, "Spend" (current list prices of licenses assigned to active users).
- A contract's "latest term" is its most recently recorded term (signed or renewed; it may begin after
  today); its "last day" is that term's expiry. Status is derived from the term dates at today.

`task_tier`: 1 = single-source (one entity class), 2 = cross-source (several classes of the warehouse or
live sources), 3 = cross-modality (needs the contract documents, `contract_terms`, possibly with
warehouse facts).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from churn_assets.canonical import canonical_json, sha256_hex
from churn_assets.tasks.answers import (
    DATE,
    ENTITY,
    ENTITY_LIST,
    FRACTION_2DP,
    INTEGER,
    MONEY,
    TEXT,
    WHOLE_MONTHS,
    AnswerType,
    category,
)
from churn_assets.world.events import ENTITY_CLASSES, EVENT_KINDS, TICKET_PRIORITIES, VENDOR_TIERS

INTENTS = ("spend_visibility", "savings_opportunity", "criticality", "utilization")
TASK_TIERS: dict[int, str] = {1: "single-source", 2: "cross-source", 3: "cross-modality"}
DEFAULT_TIER_SPLIT: dict[int, int] = {1: 81, 2: 63, 3: 36}  # the reference's split of 180 tasks

ANY = "*"  # dependency key: any entity (the answer aggregates over the whole class)

# ---------------------------------------------------------------------------------------------------
# placeholders: how each parameter is written in a question and read back
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placeholder:
    name: str
    pattern: str  # regex of the written value (no groups)
    kind: str  # "id", "int", "day", "dollars", "word"

    def write(self, value: Any) -> str:
        if self.kind == "dollars":
            return f"${int(value):,}"
        return str(value)

    def read(self, text: str) -> Any:
        if self.kind == "int":
            return int(text)
        if self.kind == "dollars":
            return int(text.lstrip("$").replace(",", ""))
        if self.kind == "day":
            return dt.date.fromisoformat(text).isoformat()
        return text


ID_PATTERN = r"[a-z]{2,4}_\d+"  # every entity id (prd_0001, cc_0003, ...): also what the LLM agent's grammar reads
PLACEHOLDERS: dict[str, Placeholder] = {p.name: p for p in (
    Placeholder("cost_center", ID_PATTERN, "id"),
    Placeholder("product", ID_PATTERN, "id"),
    Placeholder("contract", ID_PATTERN, "id"),
    Placeholder("vendor", ID_PATTERN, "id"),
    Placeholder("days", r"\d+", "int"),
    Placeholder("day1", r"\d{4}-\d{2}-\d{2}", "day"),
    Placeholder("day2", r"\d{4}-\d{2}-\d{2}", "day"),
    Placeholder("threshold", r"\$\d{1,3}(?:,\d{3})*", "dollars"),
    Placeholder("priority", "|".join(TICKET_PRIORITIES), "word"),
    Placeholder("tier", "|".join(VENDOR_TIERS), "word"),
    Placeholder("business_unit", r"[A-Z][A-Za-z&\-]*(?: [A-Z][A-Za-z&\-]*)*", "word"),
)}

# ---------------------------------------------------------------------------------------------------
# sampling domains: where a parameter's values come from (the generator resolves them at T)
# ---------------------------------------------------------------------------------------------------

# Named pools of the world at T the generator knows how to list.
POOLS = ("cost_centers", "products", "api_products", "contracts", "vendors", "business_units")


@dataclass(frozen=True)
class Pick:
    """One entity from a pool of the world at T."""

    param: str
    pool: str


@dataclass(frozen=True)
class OneOf:
    param: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class DaySpan:
    """`day1` < `day2` <= T: `day2` = T - end offset, `day1` = `day2` - span (both inside the calendar)."""

    spans: tuple[int, ...]
    end_offsets: tuple[int, ...]


@dataclass(frozen=True)
class SpendThreshold:
    """Whole-dollar multiples of `step` strictly between the lowest and highest cost-center spend at T."""

    param: str = "threshold"
    step: int = 500


Domain = Pick | OneOf | DaySpan | SpendThreshold


def domain_params(domain: Domain) -> tuple[str, ...]:
    return ("day1", "day2") if isinstance(domain, DaySpan) else (domain.param,)


# ---------------------------------------------------------------------------------------------------
# the template
# ---------------------------------------------------------------------------------------------------

# Dependency scope: params whose entity keys the answer depends on; the key names the entity kind.
_SCOPE_PREFIX = {"cost_center": "cost_center", "product": "product", "contract": "contract", "vendor": "vendor",
                 "business_unit": "business_unit"}


@dataclass(frozen=True)
class Template:
    template_id: str
    family: str  # the reference family it covers, or what it adds ("list", "change over time", ...)
    intent: str
    task_tier: int
    text: str
    answer: AnswerType
    classes: tuple[str, ...]  # entity classes the gold reads (and an agent must read)
    measure: str  # the registry measure whose call answers the question (its args are the placeholders)
    sampling: tuple[Domain, ...]
    weight: int  # tasks of this template in the default 180-task set
    # What moves the answer, for the analytic predictor: event tags (a kind, or `kind:qualifier` as
    # tagged by `evaluation.change_events`) on the entities `depends_on` names.
    moving_kinds: frozenset[str]
    scope: tuple[str, ...] = ()  # params naming the entities the answer depends on; () = any entity
    # When the changes that can move the answer happen: "any" day up to T; inside the question's
    # "window" (its last `days` days: a count of events); or inside its "span" (day1, day2] (a change
    # between two days: earlier changes move both counts alike).
    changes_in: str = "any"

    @property
    def params(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(_PLACEHOLDER_RE.findall(self.text)))

    def render(self, params: Mapping[str, Any]) -> str:
        """The question text for `params` (every placeholder filled, nothing else)."""
        missing = [p for p in self.params if p not in params]
        extra = [p for p in params if p not in self.params]
        if missing or extra:
            raise ValueError(f"template {self.template_id}: params missing {missing}, unexpected {extra}")
        return _PLACEHOLDER_RE.sub(lambda m: PLACEHOLDERS[m.group(1)].write(params[m.group(1)]), self.text)

    def depends_on(self, params: Mapping[str, Any]) -> frozenset[str]:
        """Entity keys (`kind:id`, or `*` for any) whose change moves the answer."""
        if not self.scope:
            return frozenset({ANY})
        return frozenset(f"{_SCOPE_PREFIX[p]}:{params[p]}" for p in self.scope)

    def change_window(self, params: Mapping[str, Any], anchor: dt.date) -> tuple[dt.date | None, dt.date]:
        """(after, until): only changes on days after `after` (None: any day) up to `until` move the answer."""
        if self.changes_in == "span":
            return dt.date.fromisoformat(str(params["day1"])), min(anchor, dt.date.fromisoformat(str(params["day2"])))
        if self.changes_in == "window":
            return anchor - dt.timedelta(days=int(params["days"])), anchor
        return None, anchor


_PLACEHOLDER_RE = re.compile(r"\{([a-z_0-9]+)\}")

# ---------------------------------------------------------------------------------------------------
# the templates
# ---------------------------------------------------------------------------------------------------

A, U, P, M = "assignments", "user_status", "prices", "cost_center_membership"
CT, VD, CO, UT, TK = "contract_terms", "vendor_dims", "consumption", "utilization", "tickets"

SPEND, SAVE, CRIT, UTIL = INTENTS
WINDOWS = (7, 14, 21, 30, 45, 60, 90)
USAGE_WINDOWS = (7, 14, 30, 60, 90)
# Idle and seat-use questions use short windows: in the default world every held license is used at least
# every two weeks (see docs/tasks.md), so longer windows would only ask questions whose answer is 0 or 1.
IDLE_WINDOWS = (2, 3, 5, 7, 14)
SPANS = DaySpan(spans=(7, 14, 30, 60), end_offsets=(0, 1, 3, 7, 14))
INCL = "in the last {days} days (including today)"

# Kinds that move who holds what (per license), and what moves a cost center's spend.
HOLDING = frozenset({"license_assigned", "license_unassigned"})
SPEND_MOVES = frozenset({"license_assigned", "license_unassigned", "license_reassigned:across_cost_centers",
                         "user_offboarded:with_license", "user_moved_cost_center:with_license",
                         "price_changed"})
CONTRACT_TERMS = frozenset({"contract_signed", "contract_renewed"})
CONSUMPTION = frozenset({"consumption_logged"})
TICKETS = frozenset({"ticket_opened", "ticket_status_changed", "ticket_resolved"})


def _t(template_id: str, family: str, intent: str, task_tier: int, text: str, answer: AnswerType,
       classes: tuple[str, ...], measure: str, sampling: tuple[Domain, ...], weight: int,
       moving: frozenset[str] | set[str], scope: tuple[str, ...] = (), changes_in: str = "any") -> Template:
    return Template(template_id, family, intent, task_tier, text, answer, classes, measure, sampling, weight,
                    frozenset(moving), scope, changes_in)


TEMPLATES: tuple[Template, ...] = (
    # ----- task_tier 1: single source (one entity class) -----------------------------------------
    _t("t1_list_price", "current list price of a product", SPEND, 1,
       "What is the current monthly list price per seat of product {product}?",
       MONEY, (P,), "list_price", (Pick("product", "products"),), 9, {"price_changed"}, ("product",)),
    _t("t1_price_changes", "price changes (window)", SPEND, 1,
       f"How many list-price changes were recorded {INCL}?",
       INTEGER, (P,), "price_changes", (OneOf("days", WINDOWS),), 3, {"price_changed"},
       changes_in="window"),
    _t("t1_purchases", "license purchases (window)", SPEND, 1,
       f"How many new licenses were purchased {INCL}?",
       INTEGER, (A,), "licenses_purchased", (OneOf("days", WINDOWS),), 4, {"license_purchased"},
       changes_in="window"),
    _t("t1_reclamations", "reclamations in the last N days", SAVE, 1,
       f"How many idle licenses were reclaimed {INCL}?",
       INTEGER, (A,), "idle_licenses_reclaimed", (OneOf("days", WINDOWS),), 5, {"license_unassigned:reclaimed_idle"},
       changes_in="window"),
    _t("t1_freed_by_offboarding", "licenses freed by offboardings (window)", SAVE, 1,
       f"How many licenses were freed because their holder was offboarded {INCL}?",
       INTEGER, (A,), "licenses_freed_by_offboarding", (OneOf("days", WINDOWS),), 2,
       {"license_unassigned:offboarded"}, changes_in="window"),
    _t("t1_unassigned_licenses", "unassigned licenses", SAVE, 1,
       "How many licenses currently have no holder?",
       INTEGER, (A,), "unassigned_licenses", (), 1, HOLDING | {"license_purchased"}),
    _t("t1_offboardings", "offboardings in the last N days", CRIT, 1,
       f"How many users were offboarded {INCL}?",
       INTEGER, (U,), "users_offboarded", (OneOf("days", WINDOWS),), 3, {"user_offboarded"}, changes_in="window"),
    _t("t1_hires", "hires (window)", CRIT, 1,
       f"How many users were hired {INCL}?",
       INTEGER, (U,), "users_hired", (OneOf("days", WINDOWS),), 2, {"user_hired"}, changes_in="window"),
    _t("t1_open_tickets_product", "open tickets of a product", CRIT, 1,
       "How many support tickets on product {product} are currently open or in progress?",
       INTEGER, (TK,), "open_tickets_of_product", (Pick("product", "products"),), 3, TICKETS, ("product",)),
    _t("t1_open_tickets_priority", "open tickets by priority", CRIT, 1,
       "How many {priority}-priority support tickets are currently open or in progress?",
       INTEGER, (TK,), "open_tickets_by_priority", (OneOf("priority", TICKET_PRIORITIES),), 3, TICKETS),
    _t("t1_tickets_opened", "tickets opened (window)", CRIT, 1,
       f"How many support tickets were opened {INCL}?",
       INTEGER, (TK,), "tickets_opened", (OneOf("days", WINDOWS),), 3, {"ticket_opened"}, changes_in="window"),
    _t("t1_vendor_name", "vendor name", CRIT, 1,
       "What is the current name of vendor {vendor}?",
       TEXT, (VD,), "vendor_name", (Pick("vendor", "vendors"),), 4, {"vendor_changed:renamed"}, ("vendor",)),
    _t("t1_vendor_tier", "vendor tier", CRIT, 1,
       "What is the current tier of vendor {vendor} (strategic, preferred or standard)?",
       category(*VENDOR_TIERS), (VD,), "vendor_tier", (Pick("vendor", "vendors"),), 3,
       {"vendor_changed:tier_changed"}, ("vendor",)),
    _t("t1_reassignments_product", "reassignments in the last N days", UTIL, 1,
       "How many direct reassignments (a license moved straight from its holder to another user, without "
       "being freed first) of licenses of product {product} were recorded " + INCL + "?",
       INTEGER, (A,), "direct_reassignments", (Pick("product", "products"), OneOf("days", WINDOWS)), 8,
       {"license_reassigned"}, ("product",), changes_in="window"),
    _t("t1_held_licenses_change", "change over time: licenses with a holder", UTIL, 1,
       "What was the net change in the number of licenses with a holder between {day1} and {day2} "
       "(count at the end of {day2} minus count at the end of {day1})?",
       INTEGER, (A,), "held_licenses_net_change", (SPANS,), 5, HOLDING, changes_in="span"),
    _t("t1_api_calls_product", "API calls of a product in a window", UTIL, 1,
       "How many API calls were made on product {product} " + INCL + "?",
       INTEGER, (CO,), "api_calls", (Pick("product", "api_products"), OneOf("days", USAGE_WINDOWS)), 8,
       CONSUMPTION, ("product",), changes_in="window"),
    _t("t1_distinct_users_product", "distinct users of a product in a window", UTIL, 1,
       "How many distinct users used product {product} " + INCL + "?",
       INTEGER, (CO,), "distinct_users", (Pick("product", "products"), OneOf("days", USAGE_WINDOWS)), 7,
       CONSUMPTION, ("product",), changes_in="window"),
    _t("t1_session_minutes_product", "session minutes of a product (window)", UTIL, 1,
       "How many session minutes were logged on product {product} " + INCL + "?",
       INTEGER, (CO,), "session_minutes", (Pick("product", "products"), OneOf("days", USAGE_WINDOWS)), 5,
       CONSUMPTION, ("product",), changes_in="window"),
    _t("t1_top_product_minutes", "top product by session minutes", UTIL, 1,
       f"Which product had the most session minutes {INCL}?",
       ENTITY, (CO,), "top_product_by_session_minutes", (OneOf("days", (3, 7, 14, 30, 60, 90)),), 3,
       CONSUMPTION, changes_in="window"),
    # ----- task_tier 2: cross-source --------------------------------------------------------------
    _t("t2_cost_center_spend", "monthly license spend of a cost center", SPEND, 2,
       "What is the current monthly license spend of cost center {cost_center}?",
       MONEY, (A, U, M, P), "cost_center_spend", (Pick("cost_center", "cost_centers"),), 9, SPEND_MOVES,
       ("cost_center",)),
    _t("t2_total_spend", "total monthly spend", SPEND, 2,
       "What is the total monthly license spend across all licenses, allocated and unallocated?",
       MONEY, (A, P), "total_spend", (), 1, {"license_purchased", "price_changed"}),
    _t("t2_vendor_spend", "monthly spend on a vendor's products", SPEND, 2,
       "What is the monthly list-price spend on all licenses, assigned or not, of products sold by vendor "
       "{vendor}?",
       MONEY, (A, P), "vendor_spend", (Pick("vendor", "vendors"),), 4, {"license_purchased", "price_changed"},
       ("vendor",)),
    _t("t2_top_cost_center", "top-spending cost center", SPEND, 2,
       "Which cost center has the highest monthly license spend?",
       ENTITY, (A, U, M, P), "top_spending_cost_center", (), 1, SPEND_MOVES),
    _t("t2_top_cost_center_in_unit", "top-spending cost center (per business unit)", SPEND, 2,
       "Which cost center in business unit {business_unit} has the highest monthly license spend?",
       ENTITY, (A, U, M, P), "top_spending_cost_center_in_unit", (Pick("business_unit", "business_units"),), 3,
       SPEND_MOVES,
       ("business_unit",)),
    _t("t2_cost_centers_above", "cost centers above a spend threshold (list)", SPEND, 2,
       "Which cost centers have a monthly license spend above {threshold}?",
       ENTITY_LIST, (A, U, M, P), "cost_centers_above_spend", (SpendThreshold(),), 3, SPEND_MOVES),
    _t("t2_spend_change_cost_center", "change over time: spend of a cost center", SPEND, 2,
       "By how much did the monthly license spend of cost center {cost_center} change between {day1} and "
       "{day2} (spend at the end of {day2} minus spend at the end of {day1})?",
       MONEY, (A, U, M, P), "cost_center_spend_change", (Pick("cost_center", "cost_centers"), SPANS), 4, SPEND_MOVES,
       ("cost_center",), changes_in="span"),
    _t("t2_unallocated_spend", "unallocated monthly spend", SAVE, 2,
       "What is the monthly spend on licenses not allocated to any cost center (unassigned, or held by an "
       "inactive user or by a user without a cost center)?",
       MONEY, (A, U, M, P), "unallocated_spend", (), 1,
       HOLDING | {"license_purchased", "user_offboarded:with_license", "price_changed"}),
    _t("t2_idle_licenses_cost_center", "idle licenses in a cost center", SAVE, 2,
       "How many licenses held by active users of cost center {cost_center} had no usage recorded on the "
       "license itself " + INCL + "?",
       INTEGER, (A, U, M, UT), "idle_licenses_in_cost_center",
       (Pick("cost_center", "cost_centers"), OneOf("days", IDLE_WINDOWS)), 5,
       HOLDING | {"license_reassigned:across_cost_centers", "user_offboarded:with_license",
                  "user_moved_cost_center:with_license"} | CONSUMPTION, ("cost_center",)),
    _t("t2_idle_license_cost", "monthly cost of idle licenses", SAVE, 2,
       "What is the monthly list-price cost of the licenses held by active users on which no usage was "
       f"recorded {INCL}?",
       MONEY, (A, U, P, UT), "idle_license_cost", (OneOf("days", IDLE_WINDOWS),), 3,
       HOLDING | {"user_offboarded:with_license", "price_changed"} | CONSUMPTION),
    _t("t2_unused_licenses_product", "licenses of a product unused for N days", SAVE, 2,
       "How many licenses of product {product} held by active users had no usage recorded on the license "
       "itself " + INCL + "?",
       INTEGER, (A, U, UT), "unused_licenses", (Pick("product", "products"), OneOf("days", IDLE_WINDOWS)), 5,
       HOLDING | {"user_offboarded:with_license"} | CONSUMPTION, ("product",)),
    _t("t2_zero_api_licenses_product", "licenses with zero API usage", SAVE, 2,
       "How many licenses of product {product} held by active users made zero API calls " + INCL + "?",
       INTEGER, (A, U, UT), "zero_api_licenses",
       (Pick("product", "api_products"), OneOf("days", IDLE_WINDOWS)), 4,
       HOLDING | {"user_offboarded:with_license"} | CONSUMPTION, ("product",)),
    _t("t2_active_users_cost_center", "active users in a cost center", CRIT, 2,
       "How many active users are in cost center {cost_center}?",
       INTEGER, (U, M), "active_users", (Pick("cost_center", "cost_centers"),), 4,
       {"user_hired", "user_offboarded", "user_moved_cost_center"}, ("cost_center",)),
    _t("t2_active_users_change_cost_center", "change over time: active users of a cost center", CRIT, 2,
       "What was the net change in the number of active users in cost center {cost_center} between {day1} "
       "and {day2} (count at the end of {day2} minus count at the end of {day1})?",
       INTEGER, (U, M), "active_users_net_change", (Pick("cost_center", "cost_centers"), SPANS), 3,
       {"user_hired", "user_offboarded", "user_moved_cost_center"}, ("cost_center",), changes_in="span"),
    _t("t2_tickets_opened_cost_center", "tickets of a cost center (window)", CRIT, 2,
       f"How many support tickets were opened {INCL} by users whose recorded cost center today is "
       "{cost_center} (offboarded users included: their last cost center counts)?",
       INTEGER, (TK, M), "tickets_opened_by_cost_center",
       (OneOf("days", WINDOWS), Pick("cost_center", "cost_centers")), 2,
       {"user_moved_cost_center"} | TICKETS, ("cost_center",)),
    _t("t2_tickets_opened_vendor", "tickets on a vendor's products (window)", CRIT, 2,
       "How many support tickets on products of vendor {vendor} were opened " + INCL + "?",
       INTEGER, (TK, P), "tickets_opened_on_vendor_products", (Pick("vendor", "vendors"), OneOf("days", WINDOWS)), 2,
       {"product_listed"} | TICKETS, ("vendor",)),
    _t("t2_seat_utilization", "fraction of seats actively used", UTIL, 2,
       "What fraction of the licenses of product {product} held by active users were used " + INCL
       + ", as a number between 0 and 1 rounded to 2 decimals?",
       FRACTION_2DP, (A, U, UT), "seat_utilization",
       (Pick("product", "products"), OneOf("days", IDLE_WINDOWS)), 5,
       HOLDING | {"user_offboarded:with_license"} | CONSUMPTION, ("product",)),
    _t("t2_license_holders_product", "licenses of a product held by active users", UTIL, 2,
       "How many licenses of product {product} are held by active users?",
       INTEGER, (A, U), "licenses_held_by_active_users", (Pick("product", "products"),), 4,
       HOLDING | {"user_offboarded:with_license"}, ("product",)),
    # ----- task_tier 3: cross-modality (contract documents) ---------------------------------------
    _t("t3_contract_annual_value", "contract annual value", SPEND, 3,
       "What is the annual value of the latest term of contract {contract}?",
       MONEY, (CT,), "contract_annual_value", (Pick("contract", "contracts"),), 5, {"contract_renewed"},
       ("contract",)),
    _t("t3_vendor_contract_value", "annual value of a vendor's active contracts", SPEND, 3,
       "What is the total annual value, under their latest terms, of the contracts with vendor {vendor} "
       "that are active today (one of their recorded terms covers today)?",
       MONEY, (CT,), "vendor_active_contract_value", (Pick("vendor", "vendors"),), 3, CONTRACT_TERMS, ("vendor",)),
    _t("t3_committed_seat_gap", "committed seats vs assigned seats", SAVE, 3,
       "How many committed seats of the latest term of contract {contract} are not matched by licenses "
       "purchased under it and held by active users (committed seats minus those licenses; negative when "
       "over-assigned)?",
       INTEGER, (CT, A, U), "committed_seat_gap", (Pick("contract", "contracts"),), 5,
       {"contract_renewed"} | HOLDING | {"user_offboarded:with_license"}, ("contract",)),
    _t("t3_notice_deadline", "renewal notice deadline", SAVE, 3,
       "By which date must renewal notice be given on contract {contract} (the last day of its latest term "
       "minus its notice period)?",
       DATE, (CT,), "renewal_notice_deadline", (Pick("contract", "contracts"),), 3, {"contract_renewed"},
       ("contract",)),
    _t("t3_committed_seats", "committed seats of a contract", SAVE, 3,
       "How many seats does the latest term of contract {contract} commit to?",
       INTEGER, (CT,), "committed_seats", (Pick("contract", "contracts"),), 3, {"contract_renewed"},
       ("contract",)),
    _t("t3_contract_status", "contract active or expired", CRIT, 3,
       "Is contract {contract} active (one of its recorded terms covers today), expired (today is after "
       "the last day of all its recorded terms) or pending (neither) today?",
       category("active", "expired", "pending"), (CT,), "contract_status", (Pick("contract", "contracts"),), 4,
       CONTRACT_TERMS, ("contract",)),
    _t("t3_months_remaining", "months remaining on a contract", CRIT, 3,
       "How many whole months remain until the last day of contract {contract}, that is the largest number "
       "m such that today plus m calendar months falls on or before that last day (0 if it has ended)?",
       WHOLE_MONTHS, (CT,), "months_remaining", (Pick("contract", "contracts"),), 5, {"contract_renewed"},
       ("contract",)),
    _t("t3_contract_vendor_name", "vendor of a contract", CRIT, 3,
       "What is the current name of the vendor of contract {contract}?",
       TEXT, (CT, VD), "contract_vendor_name", (Pick("contract", "contracts"),), 3, {"vendor_changed:renamed"},
       ("contract",)),
    _t("t3_contracts_expiring", "contracts expiring within N days (list)", CRIT, 3,
       "Which contracts active today (one of their recorded terms covers today) have their last day between "
       "today and {days} days from today, both days included?",
       ENTITY_LIST, (CT,), "contracts_expiring", (OneOf("days", (14, 30, 45, 60, 90, 120)),), 3,
       CONTRACT_TERMS),
    _t("t3_contracts_by_vendor_tier", "active contracts by vendor tier (list)", CRIT, 3,
       "Which contracts active today (one of their recorded terms covers today) are with a vendor whose "
       "current tier is {tier}?",
       ENTITY_LIST, (CT, VD), "contracts_by_vendor_tier", (OneOf("tier", VENDOR_TIERS),), 2,
       {"vendor_changed:tier_changed", "contract_signed"}),
)

TEMPLATES_BY_ID: dict[str, Template] = {t.template_id: t for t in TEMPLATES}


def _hashable(value: Any) -> Any:
    """A template field as plain JSON: sets sorted (their order varies between processes), values named by repr."""
    if isinstance(value, frozenset | set):
        return sorted(str(v) for v in value)
    if isinstance(value, tuple | list):
        return [_hashable(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return repr(value)


def templates_hash() -> str:
    """SHA-256 (16 hex digits) of the template list: every field of every template (texts, answer types,
    classes, measures, sampling, weights, what moves the answer). The regression baseline records it."""
    data = [{f.name: _hashable(getattr(t, f.name)) for f in dataclasses.fields(t)} for t in TEMPLATES]
    return sha256_hex(canonical_json(data))[:16]


def template(template_id: str) -> Template:
    try:
        return TEMPLATES_BY_ID[template_id]
    except KeyError:
        raise KeyError(f"unknown template {template_id!r}") from None


def measures() -> dict[str, tuple[str, ...]]:
    """Measure -> the templates using it (every one must be registered in the registry)."""
    out: dict[str, list[str]] = {}
    for t in TEMPLATES:
        out.setdefault(t.measure, []).append(t.template_id)
    return {m: tuple(ids) for m, ids in out.items()}


def template_problems() -> list[str]:
    """Inconsistencies in the declarations above (tests assert there are none)."""
    problems = []
    for t in TEMPLATES:
        where = t.template_id
        if t.intent not in INTENTS:
            problems.append(f"{where}: unknown intent {t.intent}")
        if t.task_tier not in TASK_TIERS:
            problems.append(f"{where}: unknown task_tier {t.task_tier}")
        if not set(t.classes) <= set(ENTITY_CLASSES):
            problems.append(f"{where}: unknown classes {set(t.classes) - set(ENTITY_CLASSES)}")
        documents = "contract_terms" in t.classes
        expected_tier = 3 if documents else (1 if len(t.classes) == 1 else 2)
        if t.task_tier != expected_tier:
            problems.append(f"{where}: reads {t.classes}, which makes it task_tier {expected_tier} (1: one "
                            "class, 2: several classes, 3: the contract documents)")
        sampled = [p for d in t.sampling for p in domain_params(d)]
        if sorted(sampled) != sorted(t.params):
            problems.append(f"{where}: sampled params {sampled} differ from the text's {list(t.params)}")
        unknown = [p for p in t.params if p not in PLACEHOLDERS]
        if unknown:
            problems.append(f"{where}: unknown placeholders {unknown}")
        for d in t.sampling:
            if isinstance(d, Pick) and d.pool not in POOLS:
                problems.append(f"{where}: unknown pool {d.pool}")
        for tag in t.moving_kinds:
            if tag.split(":")[0] not in EVENT_KINDS:
                problems.append(f"{where}: moving kind {tag} is not an event kind")
        if any(p not in t.params or p not in _SCOPE_PREFIX for p in t.scope):
            problems.append(f"{where}: scope {t.scope} must name entity params of the text")
        if t.changes_in == "window" and not any(t.classes[0] in EVENT_KINDS[m.split(":")[0]].classes
                                                  for m in t.moving_kinds if m.split(":")[0] in EVENT_KINDS):
            problems.append(f"{where}: a window question counts the events of its first class "
                            f"({t.classes[0]}), which none of its moving kinds changes")
        needs = {"any": set(), "window": {"days"}, "span": {"day1", "day2"}}.get(t.changes_in)
        if needs is None or not needs <= set(t.params):
            problems.append(f"{where}: changes_in {t.changes_in!r} is unknown or lacks its params")
        if t.weight < 1:
            problems.append(f"{where}: weight must be >= 1")
    for tier, total in DEFAULT_TIER_SPLIT.items():
        got = sum(t.weight for t in TEMPLATES if t.task_tier == tier)
        if got != total:
            problems.append(f"task_tier {tier}: weights sum to {got}, not {total}")
    return problems
