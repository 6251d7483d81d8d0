"""The world config's schema: the type and range of every key of `default_world.yaml`, as pydantic models.

The defaults stay in the YAML file (one source of truth for the values); these models say what a value must
be, and which keys exist (`--set` paths are resolved against them). `config.py` imports this module on first
use, so that importing the CLI does not import pydantic.

Every validated value keeps the type the hash has always seen: fields the config normalised before (rates,
probabilities, prices, the activity weight) are floats, an integer given for them becomes a float (2 and 2.0
are one world); `Number` fields keep an integer an integer and a float a float, as before; days stay text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, PlainValidator, StringConstraints, ValidationInfo, field_validator

from churn_assets.world.validation import IsoDayText, StrictModel, invalid, must

NAME_PATTERN = r"^[a-z][a-z0-9_]{0,30}$"


def _number(value: Any) -> int | float:
    """An int or a float, returned as given (a bool is not a number)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    raise invalid()


def _within(low: float | None = None, high: float | None = None) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if (low is not None and not value >= low) or (high is not None and not value <= high):
            raise invalid()
        return value

    return check


def _ordered_pair(low_above: float | None = None,
                  low_at_least: float | None = None) -> Callable[[list[Any]], list[Any]]:
    """`[low, high]` with `low <= high` (and, if given, `low > low_above` or `low >= low_at_least`)."""
    def check(pair: list[Any]) -> list[Any]:
        low, high = pair
        if not low <= high or (low_above is not None and not low > low_above) \
                or (low_at_least is not None and not low >= low_at_least):
            raise invalid()
        return pair

    return check


Number = Annotated[int | float, PlainValidator(_number)]
Count = Annotated[int, Field(ge=1, description="an integer >= 1")]
Rate = Annotated[float, Field(ge=0, description="a number >= 0")]
Probability = Annotated[float, Field(ge=0, le=1, description="in [0, 1]")]


def _two(description: str) -> Any:
    """The `Field` of a `[low, high]` pair (a list: what the YAML gives and the hash has always seen)."""
    return Field(min_length=2, max_length=2, description=description)


# The length is checked before the order: the metadata applies in this order.
PriceRange = Annotated[list[float], _two("[low, high] with 0 < low <= high"),
                       AfterValidator(_ordered_pair(low_above=0))]
MinutesRange = Annotated[list[int], _two("[low, high] whole minutes with 0 <= low <= high"),
                         AfterValidator(_ordered_pair(low_at_least=0))]
NumberRange = Annotated[list[Number], _two("[low, high] numbers with low <= high"), AfterValidator(_ordered_pair())]
IntegerRange = Annotated[list[int], _two("[low, high] integers with low <= high"), AfterValidator(_ordered_pair())]


class CalendarSection(StrictModel):
    start: IsoDayText
    days: Annotated[int, Field(ge=1, le=3650, description="1..3650")]


class ReferenceDataSection(StrictModel):
    # Declared in this order on purpose: a field validator sees only the fields declared before it.
    vendors: Count
    business_units: Count
    cost_centers: Count
    products: Count
    users: Count
    initial_licenses: Count
    contracts: Count
    list_price_usd: PriceRange
    contract_terms_months: Annotated[list[Annotated[int, Field(ge=1)]],
                                     Field(min_length=1, description="a non-empty list of whole months >= 1")]
    api_product_share: Annotated[Number, AfterValidator(_within(0, 1)), Field(description="in [0, 1]")]

    @field_validator("initial_licenses")
    @classmethod
    def _at_most_users(cls, value: int, info: ValidationInfo) -> int:
        users = info.data.get("users")
        if users is not None and value > users:
            raise must("must be <= users")
        return value

    @field_validator("contracts")
    @classmethod
    def _one_per_vendor(cls, value: int, info: ValidationInfo) -> int:
        vendors = info.data.get("vendors")
        if vendors is not None and value < vendors:
            raise must("must be >= vendors (every vendor starts with a contract)")
        return value


class ActivityWeightSection(StrictModel):
    distribution: Annotated[Literal["pareto"], Field(description="'pareto'")]
    alpha: Annotated[float, Field(gt=0, description="> 0")]
    # Weights are Pareto draws with scale 1 (>= 1) capped at `max`: a cap below 1 would make them all equal.
    max: Annotated[float, Field(ge=1, description="a number >= 1")]


class RatesPerDaySection(StrictModel):
    """Poisson means per simulated day."""

    hires: Rate
    offboards: Rate
    reassignments: Rate
    cost_center_moves: Rate
    price_changes: Rate
    new_purchases: Rate
    idle_reclamations: Rate
    tickets_opened: Rate
    vendor_changes: Rate
    contract_signings: Rate


class ConsumptionSection(StrictModel):
    events_per_day: Annotated[int, Field(ge=0, description="an integer >= 0")]
    session_minutes: MinutesRange
    api_calls_mean: Annotated[Number, AfterValidator(_within(0)), Field(description="a number >= 0")]


class DriftSection(StrictModel):
    freed_seat_reassign_probability: Probability
    shelfware_share: Probability
    shelfware_usage: Probability
    new_hire_license_probability: Probability
    price_change_range: NumberRange
    contract_renewal_probability: Probability
    renewal_value_change: NumberRange
    renewal_seat_change: IntegerRange
    ticket_start_probability: Probability
    ticket_resolve_probability: Probability
    vendor_rename_share: Probability


class WorldModel(StrictModel):
    """A complete world config (the defaults merged with a file, overrides and flags)."""

    name: Annotated[str, StringConstraints(pattern=NAME_PATTERN),
                    Field(description="lower-case letters, digits or _ (max 31), starting with a letter")]
    seed: Annotated[int, Field(ge=0, description="a non-negative integer")]
    calendar: CalendarSection
    reference_data: ReferenceDataSection
    activity_weight: ActivityWeightSection
    rates_per_day: RatesPerDaySection
    consumption: ConsumptionSection
    drift: DriftSection
