"""An LLM task's transcript, and the chat model that plays one back (issue 46, item 3: replay for LLM runs).

The transcript is what the model said and what it was shown, turn by turn, recorded by the agent's loops
(`llm.py`) and stored in the task's row of `tasks.jsonl` (field `transcript`, sealed with the row):

    {"reply": "<the model's text>", "finish": "stop" | "length" | ..., "tool_calls": [...]}   (tool calls: tools loop)
    {"call": "measure" | "retrieve" | "search_records", "args": {...}, "result_sha256": "<of what it was shown>"}

`TranscriptChat` is a chat model that answers each turn with the recorded reply instead of asking a model: the
agent's own loop then runs again on the arm's tools, so every read and measure call is made again against the
stores as they are, and the answer comes out of the final reply by the same code. `verify-results --replay`
compares each call's result with its recorded hash, and the answer and verdict with the row's
(`evaluation/replay.py`). Given the live model (`ask`), it also asks it each turn, on the same conversation, and
records where its reply differs from the recorded one: for a model that repeats itself under the recorded seed,
a transcript whose replies were rewritten (a forged final reply) differs there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from churn_assets.canonical import sha256_hex

REPLY, CALL = "reply", "call"


def reply_turn(text: str, finish: str | None, tool_calls: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """A model turn as the transcript records it (tool calls: the tools loop's, with their ids)."""
    turn: dict[str, Any] = {REPLY: text, "finish": finish}
    if tool_calls:
        turn["tool_calls"] = [{"name": c.get("name"), "args": dict(c.get("args") or {}), "id": c.get("id")}
                              for c in tool_calls]
    return turn


def call_turn(name: str, args: Any, result: str) -> dict[str, Any]:
    """A call the model made, with its arguments and the SHA-256 of the result it was shown."""
    return {CALL: name, "args": dict(args) if isinstance(args, Mapping) else args, "result_sha256": sha256_hex(result)}


def finish_of(message: Any) -> str | None:
    """Why a chat model's reply ended (`stop`, `length`, ...; None when not reported)."""
    return (getattr(message, "response_metadata", None) or {}).get("finish_reason")


def text_of(message: Any) -> str:
    """The text of a chat model's reply (its text blocks joined)."""
    content = getattr(message, "content", "")
    if isinstance(content, str):
        return content
    return "".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content
                   if isinstance(b, str) or (isinstance(b, dict) and b.get("type") == "text"))


def replies(transcript: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [t for t in transcript if REPLY in t]


def calls(transcript: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [t for t in transcript if CALL in t]


class TranscriptEnded(Exception):
    """The agent's loop asked for a turn the transcript does not have (its replies were cut or rewritten)."""


@dataclass(frozen=True)
class ReplyDifference:
    turn: int  # 0-based, among the replies
    recorded: str
    asked: str


class TranscriptChat:
    """A LangChain-like chat model (`bind`, `bind_tools`, `invoke`) replying with a transcript's replies in order.
    `load(transcript)` before each task. `ask`: the live chat model (bound the same way each turn), asked too; its
    differing replies are in `differences`, the recorded reply is what the loop goes on with."""

    def __init__(self, ask: Any = None) -> None:
        self.ask = ask
        self._replies: list[Mapping[str, Any]] = []
        self._next = 0
        self.differences: list[ReplyDifference] = []
        self.asked = self.differed = 0  # over every task loaded: replies the live model was asked for, and differed

    def load(self, transcript: Sequence[Mapping[str, Any]]) -> None:
        self._replies, self._next, self.differences = replies(transcript), 0, []

    @property
    def unused(self) -> int:
        """Recorded replies the loop did not ask for (a transcript with turns added)."""
        return len(self._replies) - self._next

    def bind(self, **kwargs: Any) -> _Bound:
        return _Bound(self, self.ask.bind(**kwargs) if self.ask is not None else None)

    def bind_tools(self, specs: Any) -> _Bound:
        return _Bound(self, self.ask.bind_tools(specs) if self.ask is not None else None)

    def invoke(self, messages: list[Any]) -> Any:
        return self.reply(messages, self.ask)

    def reply(self, messages: list[Any], live: Any) -> Any:
        from langchain_core.messages import AIMessage

        if self._next >= len(self._replies):
            raise TranscriptEnded(f"the agent asked for reply {self._next + 1}; the transcript has "
                                  f"{len(self._replies)}")
        recorded = self._replies[self._next]
        if live is not None:
            asked = text_of(live.invoke(messages))
            self.asked += 1
            if asked != recorded[REPLY]:
                self.differed += 1
                self.differences.append(ReplyDifference(self._next, str(recorded[REPLY]), asked))
        self._next += 1
        return AIMessage(content=str(recorded[REPLY]),
                         tool_calls=[{"name": c["name"], "args": c["args"], "id": c.get("id") or f"call_{i}"}
                                     for i, c in enumerate(recorded.get("tool_calls") or [])],
                         response_metadata={"finish_reason": recorded.get("finish")})


class _Bound:
    def __init__(self, chat: TranscriptChat, live: Any) -> None:
        self.chat, self.live = chat, live

    def invoke(self, messages: list[Any]) -> Any:
        return self.chat.reply(messages, self.live)
