"""One stage of `churnbench bench` in this process: `python -m churn_assets.benchmark.child STAGE CTX OUT`.

CTX is the stage's `Context` as JSON, OUT the file its `Measured` is written to. A process per stage keeps each
stage's peak resident memory its own (the runner reads it from `os.wait4`)."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

from churn_assets.benchmark.stages import FUNCTIONS, Context
from churn_assets.unique_keys import load_json


def main(argv: list[str]) -> int:
    stage, ctx_path, out_path, repeats = argv
    warnings.simplefilter("ignore")

    ctx = Context(**load_json(Path(ctx_path).read_text(), str(Path(ctx_path))))
    measured = FUNCTIONS[stage](ctx, int(repeats))
    Path(out_path).write_text(json.dumps(measured.to_json(), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
