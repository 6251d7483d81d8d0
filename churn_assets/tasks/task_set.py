"""A task set: tasks as written to `tasks.jsonl`, their hash, and reading them back.

No fold import: arms and agents load task sets through this module. A task carries what an agent is
asked (question text, anchor) and what scoring needs to know about it (template, params, answer type,
entity classes, measure); gold is never stored with the tasks.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from churn_assets.canonical import canonical_json
from churn_assets.errors import UserFacingError
from churn_assets.files import atomic_write_text
from churn_assets.tasks.templates import TEMPLATES, Template, template
from churn_assets.unique_keys import load_json

TASKS_FILE = "tasks.jsonl"
DRAWN_WITH_FILE = "drawn_with.json"  # beside it: the deployment's task count and seed it was drawn with


class TaskSetError(UserFacingError, ValueError):
    """A task file that cannot be read, or a task set that cannot be built as asked."""


@dataclass(frozen=True)
class Task:
    task_id: str
    world_id: str
    anchor: str  # T, ISO day: "today" in the question
    template_id: str
    params: dict[str, Any] = field(hash=False)
    question_text: str

    @property
    def template(self) -> Template:
        return template(self.template_id)

    @property
    def task_tier(self) -> int:
        return self.template.task_tier

    @property
    def intent(self) -> str:
        return self.template.intent

    def to_json(self) -> dict[str, Any]:
        t = self.template
        return {
            "task_id": self.task_id,
            "world_id": self.world_id,
            "anchor": self.anchor,
            "task_tier": t.task_tier,
            "intent": t.intent,
            "template_id": t.template_id,
            "question_text": self.question_text,
            "params": dict(sorted(self.params.items())),
            "answer_type": t.answer.kind,
            "answer_decimals": t.answer.decimals,
            "entity_classes": list(t.classes),
            "measure": t.measure,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Task:
        return cls(str(d["task_id"]), str(d["world_id"]), str(d["anchor"]), str(d["template_id"]),
                   dict(d["params"]), str(d["question_text"]))


def task_lines(tasks: Iterable[Task]) -> str:
    """The canonical file content: one JSON object per line, sorted keys, no spaces."""
    return "".join(canonical_json(t.to_json()) + "\n" for t in tasks)


def task_set_hash(tasks: Iterable[Task]) -> str:
    """SHA-256 of the canonical `tasks.jsonl` bytes (so `sha256sum tasks.jsonl` gives the same)."""
    return hashlib.sha256(task_lines(tasks).encode()).hexdigest()


def write_tasks(tasks: Sequence[Task], path: Path) -> str:
    """Write `tasks.jsonl` atomically; returns the task-set hash."""
    text = task_lines(tasks)
    # A temporary file of this writer's own: two processes writing the same (world, T) never rename each
    # other's half-written file into place.
    atomic_write_text(path, text)
    return hashlib.sha256(text.encode()).hexdigest()


Drawn = tuple[int, int, int | None]  # (task count, seed, tasks per template or None: drawn by tier and weight)


def drawn_of(count: int, seed: int, per_template: int | None) -> Drawn:
    """What a deployment's `tasks` section draws: with `per_template` k, k tasks of each template (`count`
    unused)."""
    return (count if per_template is None else per_template * len(TEMPLATES)), seed, per_template


def write_drawn_with(path: Path, drawn: Drawn) -> None:
    """Record beside `tasks.jsonl` (at `path`) the task count, seed and per-template count it was drawn with: a
    deployment that asks for others finds it out of date (`drawn_with`) instead of reusing it silently. Written
    after the tasks, so a crash between the two leaves a set that is drawn again, never a record of tasks not
    there. `per_template` is written only when set (a record of a tier-and-weight draw keeps its bytes)."""
    count, seed, per_template = drawn
    record: dict[str, int] = {"count": count, "seed": seed}
    if per_template is not None:
        record["per_template"] = per_template
    atomic_write_text(path.parent / DRAWN_WITH_FILE, canonical_json(record) + "\n")


def drawn_with(path: Path) -> Drawn | None:
    """(count, seed, per_template) the task set at `path` was drawn with; None when not recorded (a set written
    before the record existed, or an unreadable record)."""
    try:
        found = load_json((path.parent / DRAWN_WITH_FILE).read_text(), str(path.parent / DRAWN_WITH_FILE))
        per_template = found.get("per_template")
        return int(found["count"]), int(found["seed"]), None if per_template is None else int(per_template)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def read_tasks(path: Path) -> list[Task]:
    try:
        lines = Path(path).read_bytes().split(b"\n")
    except FileNotFoundError:
        raise TaskSetError(f"task file {path} not found") from None
    if lines and not lines[-1]:
        lines.pop()  # the newline that ends the last line
    tasks = []
    for n, line in enumerate(lines, 1):
        try:
            record = load_json(line.decode("utf-8"), "the line")
            if not isinstance(record, dict):
                raise TypeError(f"a JSON {type(record).__name__}, not an object")
            tasks.append(Task.from_json(record))
        except UnicodeDecodeError:
            raise TaskSetError(f"{path}, line {n}: not UTF-8 text") from None
        except KeyError as e:
            raise TaskSetError(f"{path}, line {n}: not a task (no field {e})") from None
        except (ValueError, TypeError) as e:  # JSONDecodeError is a ValueError
            raise TaskSetError(f"{path}, line {n}: not a task ({' '.join(str(e).split())})") from None
    return tasks


def in_current_format(path: Path) -> bool:
    """Whether the task file at `path` reads back to exactly its bytes: False for a file written by an earlier
    version (another field set, such as a template's measure renamed when measures were registered: issue 45) or
    an unreadable one. Such a set is drawn again rather than reused with a hash today's code cannot reproduce."""
    try:
        return task_lines(read_tasks(path)).encode() == Path(path).read_bytes()
    except (TaskSetError, OSError, KeyError):
        return False


def task_set_counts(tasks: Sequence[Task]) -> dict[str, dict[str, int]]:
    """Tasks per task_tier, intent and template (asset metadata and the CLI summary)."""
    return {
        "task_tier": {str(k): v for k, v in sorted(Counter(t.task_tier for t in tasks).items())},
        "intent": dict(sorted(Counter(t.intent for t in tasks).items())),
        "template": dict(sorted(Counter(t.template_id for t in tasks).items())),
    }
