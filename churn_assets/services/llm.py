"""The embedded local model server: llama.cpp's HTTP server (`python -m churn_assets.services.llm_server`, through
`xllamacpp`) serving one GGUF file on a free port of the service address (CHURNBENCH_SERVICE_HOST, default
127.0.0.1), supervised like the other embedded services (a record in `<state>/services/llm.json`, `/health` waited
for, its log in `<state>/services/llm.out`).

Unlike Postgres, Mongo and the SaaS API it is started on demand, by the first evaluation of an `--agent llm`
scenario whose model settings name a local model (`ensure_llm_server`), not by `services up`; `services down`
stops it and `services status` shows it once it has been started. The record states which model it serves
(the GGUF's SHA-256, `n_ctx`, threads): a run that needs another one stops it and starts the one it needs
(one local model server per state folder). Its URL and port are found through the record at run time and never
enter an agent id, so a stored scenario runs again after the server was restarted on another port.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from churn_assets.services.base import ServiceError, ServiceStatus, http_health, url_host
from churn_assets.services.process import ProcessService, log_tail, read_record, services_lock
from churn_assets.state import StatePaths

NAME = "llm"
LOAD_TIMEOUT_S = 180.0  # loading a 1.1 GB model on a loaded 2-core machine takes tens of seconds


@dataclass(frozen=True)
class LlmServerConfig:
    """What the server serves. `gguf` is where the file is now (not part of its identity: `identity()` is)."""

    gguf: Path
    sha256: str
    alias: str
    n_ctx: int
    threads: int

    def identity(self) -> dict[str, Any]:
        return {"gguf_sha256": self.sha256, "n_ctx": self.n_ctx, "threads": self.threads}


class LlmService(ProcessService):
    """The local model server of a state folder; `config` is needed to start it (status and stop need none)."""

    name = NAME
    label = "local model server (llama.cpp, xllamacpp)"
    url_env = ""  # no external mode: an external endpoint (CHURNBENCH_LLM_BASE_URL) is used without this service
    start_timeout = LOAD_TIMEOUT_S

    def __init__(self, config: LlmServerConfig | None = None) -> None:
        self.config = config

    def external_url(self) -> str | None:
        return None

    def log_file(self, paths: StatePaths) -> Path:
        return paths.services_dir / f"{self.name}.out"  # llama.cpp logs to its output, which goes here

    def _config(self) -> LlmServerConfig:
        if self.config is None:
            raise ServiceError("internal: the local model server needs a model to start")
        return self.config

    def command(self, paths: StatePaths, host: str, port: int) -> list[str]:
        c = self._config()
        # --state-dir only marks the process as this state folder's (`owned_processes`); the server ignores it
        return [sys.executable, "-m", "churn_assets.services.llm_server", "--gguf", str(c.gguf), "--host", host,
                "--port", str(port),
                "--n-ctx", str(c.n_ctx), "--threads", str(c.threads), "--alias", c.alias,
                "--state-dir", str(paths.root)]

    def record_extra(self) -> dict[str, Any]:
        return {"model": self._config().identity(), "alias": self._config().alias}

    def url_for(self, host: str, port: int) -> str:
        return f"http://{url_host(host)}:{port}"

    def health(self, url: str, timeout: float) -> None:
        http_health(url, timeout)

    def owned_processes(self, paths: StatePaths) -> list[Any]:
        import psutil

        found = []
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info.get("cmdline") or []
            if "churn_assets.services.llm_server" in cmdline and str(paths.root) in cmdline:
                found.append(proc)
        return found


LLM = LlmService()  # status and stop (`services status|down`)


def ensure_llm_server(paths: StatePaths, config: LlmServerConfig) -> str:
    """The base URL (`http://<service address>:<port>/v1`) of this state folder's model server serving `config`: the
    running one when it serves that model, else (re)started and waited for until `/health` answers. One starter
    at a time per state folder (the services lock); a server serving another model is stopped first."""
    service = LlmService(config)
    paths.ensure()
    with services_lock(paths):
        current = service.status(paths)
        record = read_record(paths, NAME) or {}
        if current.state == "running" and record.get("model") == config.identity():
            return f"{current.url}/v1"
        if current.state == "unresponsive":
            raise ServiceError(f"the local model server of {paths.root} (pid {current.pid}) is running but does not "
                               f"answer ({current.detail}); `churnbench services down` stops it")
        if current.state == "running":
            service.stop(paths)  # it serves another model (or context size, or thread count)
        try:
            started = service.start(paths)
        except ServiceError:
            log = service.log_file(paths)
            last = next((line for line in reversed(log_tail(log, 40).splitlines()) if line.strip()), "(no log)")
            raise ServiceError(f"the local model server did not start for {config.alias} ({config.gguf}): "
                               f"{' '.join(last.split())[:240]} (log: {log})") from None
    assert started.url is not None
    return f"{started.url}/v1"


def llm_server_failure(paths: StatePaths) -> str | None:
    """Why this state folder's model server is not serving (it died, or stopped answering), or None when it
    answers (or was never started)."""
    status = LLM.status(paths)
    if status.state in ("running", "stopped"):
        return None
    log = LLM.log_file(paths)
    return f"the local model server (pid {status.pid}) is {status.state}: {status.detail} (log: {log})"


def llm_status(paths: StatePaths, *, check_health: bool = True) -> ServiceStatus | None:
    """The server's status for `services status`, or None when it was never started in this state folder."""
    if read_record(paths, NAME) is None:
        return None
    return LLM.status(paths, check_health=check_health)
