"""The exception every asset and job raises for an error the user can act on (a refused launch, a partition no
world backs, a missing input): a `dg.Failure` whose error, as Dagster records it and the UI shows it, is its one
line, with no class name and no stack (decision 323).

Dagster records a step failure's error from the exception's traceback (`serializable_error_info_from_exc_info`):
a plain `dg.Failure` shows in the UI as `dagster._core.definitions.events.Failure: <line>` above ten frames of
Dagster's executor and one of ours, in the step failure and again in the run failure, which copies the first
step failure's error. The one exception whose error Dagster records as given, without formatting its traceback,
is a `DagsterUserCodeProcessError` carrying one `SerializableErrorInfo` (an error already serialized by another
process, which it hoists as is). `StepRefusal` is both: Dagster's executor catches it as a `Failure` (its
description and metadata are the step's failure metadata, what the CLI prints and the sensors read; no retry)
and serializes it as the error it carries, the line with an empty stack. The trace of where it was raised is
not lost for a bug (a bug is not a `UserFacingError` and is never turned into one of these).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg
from dagster._core.errors import DagsterUserCodeProcessError
from dagster_shared.error import SerializableErrorInfo

# The class name the error carries: what the UI and GraphQL (`error.className`) called a refusal before, a Failure.
FAILURE_CLASS = "Failure"


class StepRefusal(DagsterUserCodeProcessError, dg.Failure):
    """A step failure whose recorded error is `line` alone (see the module doc). `DagsterUserCodeProcessError`
    first in the bases: `Failure.__init__` chains to `Exception`, never to that class's `__init__`, which needs
    the error infos as a keyword."""

    def __init__(self, line: str, metadata: Mapping[str, Any] | None = None) -> None:
        dg.Failure.__init__(self, description=line, metadata=dict(metadata or {}), allow_retries=False)
        self.user_code_process_error_infos = [SerializableErrorInfo(message=line, stack=[], cls_name=FAILURE_CLASS)]

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled across a pool worker's boundary like any exception, with its metadata (Exception's own reduce
        # would pass only the line).
        return (StepRefusal, (self.description or "", dict(self.metadata)))
