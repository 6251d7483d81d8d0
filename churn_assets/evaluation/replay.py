"""`verify-results --replay`: answer a deterministic run's tasks again and compare every row with the stored one.

The arm is made again from the scenario's stored plan, on the stores as they are now; each task is answered
again, which re-reads every read at its planned (= observed) day through the same readers, each checking the
content hash its store recorded (a staged partition, an operational database, the SaaS API's responses, the
documents, the warehouse's verified content); the row is scored again (`runner.score_answer`) and compared with the
stored row field by field, traces included (store, table, observed day and hash, rows of every read). A field that
differs is a disagreement naming the task; a read the stores refuse (its content changed, its partition is gone)
is one too.

An LLM run (`replay_llm_rows`) is played back from each row's transcript (`arms/agents/llm_transcript.py`): the
agent's loop runs again with the recorded replies in place of the model's, so every read and measure call it made
is made again, through the arm's tools, against the stores as they are. A task is named when a call's result
hashes otherwise than the transcript recorded (or the calls are not the recorded ones), when the answer and its
verdict are not what the final reply gives (an answer or verdict rewritten without the transcript), or, when the
model is asked again (`ask`), where its reply differs from the recorded one (a transcript rewritten with them).

What it proves: the stored answers are the answers the arm gives on the stores as they are, read at the days the
traces say. What it does not: that the stores were right (the other modes and the build checks look at that).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from churn_assets.arms.agents.llm_transcript import TranscriptChat, TranscriptEnded, calls
from churn_assets.errors import UserFacingError
from churn_assets.evaluation.results import canonical
from churn_assets.evaluation.runner import ArmLike, score_answer
from churn_assets.evaluation.verify import Disagreement
from churn_assets.tasks.gold import GoldResolver
from churn_assets.tasks.task_set import Task

# What a replayed row is compared on: everything the answer and its scoring wrote.
COMPARED = ("answer", "answer_text", "verdict", "served_vintage", "gold_served", "traces", "routes", "cost_units",
            "parse_error", "transport_error")
# An LLM row: the same, with the answer's other judgements (the model's spend and seconds are not replayed).
COMPARED_LLM = (*COMPARED, "budget_error", "data_as_of", "grounded", "copied_example", "measures_called")


def replay_rows(arm: ArmLike, tasks: Sequence[Task], rows: Sequence[Mapping[str, Any]],
                resolver: GoldResolver) -> list[Disagreement]:
    """Answer each row's task again through `arm` and compare; rows of tasks outside `tasks` are left to the plain
    check (it reports them)."""
    by_id = {t.task_id: t for t in tasks}
    prepare = getattr(arm, "prepare", None)
    if callable(prepare):
        prepare(list(tasks))
    planned = dict(arm.planned_vintage)
    out: list[Disagreement] = []
    for row in rows:
        task = by_id.get(str(row.get("task_id")))
        if task is None:
            continue
        try:
            answer = arm.answer(task)
        except UserFacingError as e:
            out.append(Disagreement(task.task_id, "replay", None, None, message=f"cannot be answered again: {e}"))
            continue
        again = score_answer(resolver, task, answer, planned, row.get("exposed"))
        for field in COMPARED:
            if canonical(row.get(field)) != canonical(again.get(field)):
                out.append(Disagreement(task.task_id, f"{field} (answered again)", row.get(field), again.get(field)))
    return out


def replay_llm_rows(arm: ArmLike, chat: TranscriptChat, tasks: Sequence[Task], rows: Sequence[Mapping[str, Any]],
                    resolver: GoldResolver) -> list[Disagreement]:
    """Play each row's transcript back through `arm` (whose LLM agent's chat model is `chat`) and compare; rows of
    tasks outside `tasks` are left to the plain check."""
    by_id = {t.task_id: t for t in tasks}
    planned = dict(arm.planned_vintage)
    out: list[Disagreement] = []
    for row in rows:
        task = by_id.get(str(row.get("task_id")))
        if task is None:
            continue
        recorded = row.get("transcript")
        if not isinstance(recorded, list):
            out.append(Disagreement(task.task_id, "transcript", None, None, message="the row records no transcript "
                                    "(an LLM run made before transcripts were recorded, or it was removed): it "
                                    "cannot be played back"))
            continue
        chat.load(recorded)
        try:
            answer = arm.answer(task)
        except TranscriptEnded as e:
            out.append(Disagreement(task.task_id, "transcript", None, None, message=f"cannot be played back: {e}"))
            continue
        except UserFacingError as e:
            out.append(Disagreement(task.task_id, "replay", None, None, message=f"cannot be answered again: {e}"))
            continue
        if chat.unused:
            out.append(Disagreement(task.task_id, "transcript", None, None, message=f"{chat.unused} recorded "
                                    "repl(ies) after the one the agent answered with"))
        again = score_answer(resolver, task, answer, planned, row.get("exposed"))
        out += _call_disagreements(task.task_id, calls(recorded), calls(again.get("transcript") or []))
        for difference in chat.differences:
            out.append(Disagreement(task.task_id, f"reply {difference.turn + 1} (the model asked again)",
                                    difference.recorded, difference.asked))
        for field in COMPARED_LLM:
            if canonical(row.get(field)) != canonical(again.get(field)):
                out.append(Disagreement(task.task_id, f"{field} (played back)", row.get(field), again.get(field)))
    return out


def _call_disagreements(task_id: str, recorded: Sequence[Mapping[str, Any]],
                        again: Sequence[Mapping[str, Any]]) -> list[Disagreement]:
    out = []
    for n, (was, now) in enumerate(zip(recorded, again, strict=False), start=1):
        if (was.get("call"), canonical(was.get("args"))) != (now.get("call"), canonical(now.get("args"))):
            out.append(Disagreement(task_id, f"call {n}", f"{was.get('call')}({was.get('args')})",
                                    f"{now.get('call')}({now.get('args')})"))
        elif was.get("result_sha256") != now.get("result_sha256"):
            out.append(Disagreement(task_id, f"call {n} ({was.get('call')}) result", was.get("result_sha256"),
                                    now.get("result_sha256"), message="what the call returns now hashes otherwise "
                                    "than what the model was shown"))
    if len(recorded) != len(again):
        out.append(Disagreement(task_id, "calls", len(recorded), len(again)))
    return out
