"""Typed configuration: the pydantic models of the world config, the deployment config, the entity-class
registry and the SaaS keys check their files; this module turns a `ValidationError` into the one line the CLI
prints, naming the field as a dotted path (`rates_per_day.hires`, `keys[0].key`).

How a model says what went wrong (its errors are rendered by `one_line`):

- a field's `description` says what its value must be ("an integer >= 1"); a type or range error on the field,
  or `invalid()` raised by one of its validators, reads "<path> must be <description> (got <value>)";
- `must(text)` from a field validator reads "<path> <text>" (a rule that involves another field);
- `fail(sentence)` reads as the sentence itself (checks across entries, unknown names);
- an unknown key reads "unknown key '<path>'", a missing one "<path> is missing".

It lives in `world/` (rank 1), the lowest layer that every config reaches: the registry (rank 3), the deployment
config (rank 6) and `saas_mock`, which may use only `churn_assets.world`.
"""

from __future__ import annotations

import datetime as dt
import types
import typing
from collections.abc import Callable, Iterable
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, PydanticCustomError

INVALID = "config_invalid"
MUST = "config_must"
FAIL = "config_fail"
# Pydantic's error types that mean "the value is not a mapping" (a section or entry given as a scalar or list).
_NOT_A_MAPPING = frozenset({"model_type", "model_attributes_type", "dict_type"})
_INPUT_REPR_MAX = 60

Loc = tuple[int | str, ...]
# A config's way to show a location: (prefix, the rest of the location as a path). The registry says
# "class prices: " for a location inside `entity_classes.prices`; the default says nothing and shows it all.
Label = Callable[[Loc], tuple[str, Loc]]
M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """Unknown keys are refused (a typo is an error, not a silently ignored key) and values are not coerced
    ("2" is not a number, 2.0 is not an integer, true is not a count); an integer is accepted as a float."""

    model_config = ConfigDict(strict=True, extra="forbid")


def invalid() -> PydanticCustomError:
    """The value breaks its field's rule: the message is the field's description."""
    return PydanticCustomError(INVALID, "invalid value")


def must(text: str) -> PydanticCustomError:
    """The value breaks a rule the description does not say (`text` follows the field's path)."""
    # The text travels in the context, never in the template: a `{` in it is not a placeholder.
    return PydanticCustomError(MUST, "{text}", {"text": text})


def fail(sentence: str) -> PydanticCustomError:
    """A check whose message is a whole sentence (it names what it is about itself)."""
    return PydanticCustomError(FAIL, "{sentence}", {"sentence": sentence})


def one_of(choices: Iterable[str], what: str, hint: str = "") -> Callable[[Any], Any]:
    """A before-validator: the value must be one of `choices` (kept in the module that owns the list)."""
    known = tuple(choices)

    def check(value: Any) -> Any:
        if not isinstance(value, str) or value not in known:
            raise fail(f"unknown {what} {value!r}{hint} (known: {', '.join(known)})")
        return value

    return check


def none_is(empty: Callable[[], Any]) -> Callable[[Any], Any]:
    """A before-validator: YAML's empty value (`measures:` with nothing after it) is the empty `empty()`."""
    return lambda value: empty() if value is None else value


def _iso_day(value: Any) -> dt.date:
    try:
        return dt.date.fromisoformat(str(value))
    except ValueError:
        raise invalid() from None


def _iso_day_text(text: str) -> str:
    _iso_day(text)
    return text


# A day as YAML gives it: an unquoted date or a string `date.fromisoformat` reads. `IsoDayText` keeps the
# text as given (`str(value)`, the world config hashes it); `IsoDay` is the `datetime.date`.
IsoDayText = Annotated[str, BeforeValidator(str), AfterValidator(_iso_day_text),
                       Field(description="an ISO day YYYY-MM-DD")]
IsoDay = Annotated[dt.date, BeforeValidator(_iso_day), Field(description="an ISO day YYYY-MM-DD")]


def parse(model: type[M], data: Any, error: Callable[[str], Exception], *, label: Label | None = None,
          show_input: bool = True) -> M:
    """`data` validated by `model`, or `error(<one line>)` raised. `show_input=False` for files with secrets:
    the message never quotes a value. The ValidationError is not chained: its text quotes every input."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise error(one_line(e, model, label=label, show_input=show_input)) from None


def one_line(err: ValidationError, model: type[BaseModel], *, label: Label | None = None,
             show_input: bool = True) -> str:
    """The first error of `err` as one sentence, and how many others there are."""
    errors = err.errors(include_url=False)
    text = describe(errors[0], model, label or _whole_path, show_input)
    others = len(errors) - 1
    if others:
        text += f" (and {others} more problem{'s' if others > 1 else ''})"
    return text


def describe(error: ErrorDetails, model: type[BaseModel], label: Label, show_input: bool) -> str:
    loc = tuple(error["loc"])
    kind = error["type"]
    depth, field = field_at(model, loc)
    # An unknown or missing key is named in full, and so is a sentence's place (the label may drop a prefix
    # there); any other error names the field whose rule it breaks (an error on a list item is the list's: its
    # description says what the items must be).
    prefix, rest = label(loc if kind in ("extra_forbidden", "missing", FAIL) else loc[:depth])
    path = render_path(rest)
    ctx = error.get("ctx") or {}
    if kind == FAIL:
        sentence: str = ctx["sentence"]
        return prefix + sentence
    if kind == "extra_forbidden":
        return f"{prefix}unknown key {path!r}"
    if kind == "missing":
        return f"{prefix}{path} is missing"
    # What the sentence is about: the path, "top level" for the whole file, nothing after a label's prefix.
    subject = path or ("" if prefix else "top level")
    if kind == MUST:
        predicate = ctx["text"]
    elif field is not None and field.description:
        predicate = f"must be {field.description}"
    elif kind in _NOT_A_MAPPING:  # a section or an entry given as a scalar or a list
        predicate = "must be a mapping"
    else:  # a field without a description: pydantic's own words
        subject, predicate = (f"{subject}:" if subject else ""), error["msg"]
    sentence = f"{subject} {predicate}" if subject else predicate
    return prefix + sentence + _got(error, show_input)


def _got(error: ErrorDetails, show_input: bool) -> str:
    value = error.get("input")
    if not show_input or error["type"] in _NOT_A_MAPPING or isinstance(value, dict):
        return ""
    shown = repr(value)
    if len(shown) > _INPUT_REPR_MAX:
        shown = shown[:_INPUT_REPR_MAX - 3] + "..."
    return f" (got {shown})"


def _whole_path(loc: Loc) -> tuple[str, Loc]:
    return "", loc


def render_path(loc: Loc) -> str:
    """`('keys', 0, 'key')` -> `keys[0].key`."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def field_at(model: type[BaseModel], loc: Loc) -> tuple[int, FieldInfo | None]:
    """How many parts of `loc` lead to a field of `model` (through sections, mapping keys and list items),
    and the deepest field they name (None when the location ends inside a mapping's or list's entry)."""
    node: Any = model
    field: FieldInfo | None = None
    depth = 0
    for i, part in enumerate(loc):
        sub = _model_in(node)
        if sub is not None and isinstance(part, str) and part in sub.model_fields:
            field = sub.model_fields[part]
            node = field.annotation
        elif (entry := _entry_type(node, part)) is not None:
            field, node = None, entry
        else:
            break
        depth = i + 1
    return depth, field


def section_model(model: type[BaseModel], name: str) -> type[BaseModel] | None:
    """The model of `model`'s section `name`; None when `name` is no field or a leaf."""
    field = model.model_fields.get(name)
    return None if field is None else _model_in(field.annotation)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model class of a section's annotation (`Section` or `Section | None`), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) is Annotated:
        return _model_in(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        found = [m for a in typing.get_args(annotation) if (m := _model_in(a)) is not None]
        return found[0] if len(found) == 1 else None
    return None


def _entry_type(annotation: Any, part: int | str) -> Any:
    """The model type of one entry, `part` being a key of a `dict[str, Entry]` or an index of a `list[Entry]`."""
    origin = typing.get_origin(annotation)
    fits = (origin is dict and isinstance(part, str) and part != "[key]") or (origin is list and isinstance(part, int))
    entry = _entry_of(annotation)
    return entry if fits and _model_in(entry) is not None else None


def leaf_fields(model: type[BaseModel], prefix: str = "") -> dict[str, FieldInfo]:
    """Every non-section field of `model` and its sections, by dotted path (tests check each has a description)."""
    out: dict[str, FieldInfo] = {}
    for name, field in model.model_fields.items():
        sub = _model_in(field.annotation) or _model_in(_entry_of(field.annotation))
        if sub is not None:
            out.update(leaf_fields(sub, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = field
    return out


def _entry_of(annotation: Any) -> Any:
    """The entry type of a `dict[K, Entry]` or a `list[Entry]`, else None."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    return args[1] if origin is dict else args[0] if origin is list else None
