"""The local model server's process: llama.cpp's own HTTP server (through `xllamacpp`) serving one GGUF file on a
port of the address it is given (`--host`: the service address) until SIGTERM. Started by `services/llm.py`
(`python -m churn_assets.services.llm_server ...`), never imported by the rest of churnbench: only this process
loads the model.

It serves `/health` (200 once the model is loaded), `/v1/chat/completions` (with `response_format` json_schema,
which llama.cpp turns into a grammar the sampler must follow) and `/v1/models`. One slot (`n_parallel` 1) of
`n_ctx` tokens, so the previous conversation stays in the KV cache and the next one that shares its system
prompt reuses it (prefix caching); `threads` inference threads (1 by default: on a shared 2-core machine one was
measured faster than two, docs/llm.md).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from types import FrameType


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m churn_assets.services.llm_server")
    parser.add_argument("--gguf", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--n-ctx", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--alias", required=True, help="the model name /v1/models reports")
    parser.add_argument("--state-dir", help="the state folder that started it (marks the process; unused)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.gguf
    params.model_alias = args.alias
    params.hostnames = [args.host]
    params.port = args.port
    params.n_ctx = args.n_ctx
    params.n_parallel = 1
    params.fit_params = False  # serve n_ctx as asked (the agent id states it), never a size fitted to memory
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.ui = False
    started = time.perf_counter()
    server = xllamacpp.Server(params)  # returns once the model is loaded and the port listens
    print(f"churnbench llm server: {args.alias} from {args.gguf} on {server.listening_address} "
          f"(n_ctx {args.n_ctx}, {args.threads} thread(s)), loaded in {time.perf_counter() - started:.1f} s",
          flush=True)

    def stop(signum: int, frame: FrameType | None) -> None:
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
