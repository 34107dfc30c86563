"""Loading from a Hugging Face Hub repository: the real huggingface_hub client against a local
server (tests/helpers/hub_server.py) that serves the project's tiny GGUF files the way the Hub does."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mtp_llm import MTP, MissingMTPHeadError, Model, ModelLoadError
from mtp_llm.gguf.hyv3 import read_hy_v3, write_hy_v3
from mtp_llm.gguf.tiny_models import SPLIT_PARTS

from tests.helpers import THREADS, make_session
from tests.helpers.hub_server import FakeHub, serve


huggingface_hub = pytest.importorskip("huggingface_hub")
pytest.importorskip("huggingface_hub.constants")

REPO = "mtp-llm/tiny-GGUF"
TRUNK_REPO = "mtp-llm/trunk-GGUF"
PROMPT = "Hello"


def _tokens(model: Model, draft: Model | None | str = "auto") -> list[int]:
    session = make_session(model, draft_model=draft, n_draft=2, n_ctx=256)
    return [e.id for e in session.stream_events(PROMPT, max_tokens=10, temp=0) if hasattr(e, "id")]


@pytest.fixture(scope="module")
def repo_files(tiny_paths: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, bytes]]:
    """The repositories' files: a model in two quantisations, a split GGUF, a file that is not a
    GGUF, a README; and a trunk-only target with its head under another name."""
    config, tensors, vocab, template = read_hy_v3(tiny_paths["random"])
    q8 = write_hy_v3(tmp_path_factory.mktemp("q8") / "q8.gguf", config, tensors, vocab, file_type="q8_0")
    split = {
        f"random-split-{k:05d}-of-{SPLIT_PARTS:05d}.gguf": tiny_paths["random-split"]
        .with_name(f"random-split-{k:05d}-of-{SPLIT_PARTS:05d}.gguf")
        .read_bytes()
        for k in range(1, SPLIT_PARTS + 1)
    }
    main = {
        "README.md": b"# tiny\n",
        "tiny-F32.gguf": tiny_paths["random"].read_bytes(),
        "tiny-Q8_0.gguf": q8.read_bytes(),
        "notes/broken.gguf": b"<html>not a model</html>\n",
        **split,
    }
    trunk = {
        "random-trunk.gguf": tiny_paths["random-trunk"].read_bytes(),
        "mtp-head.gguf": tiny_paths["mtp-random-trunk"].read_bytes(),
    }
    return {REPO: main, TRUNK_REPO: trunk}


@pytest.fixture()
def hub(
    repo_files: dict[str, dict[str, bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeHub]:
    fake = FakeHub()
    for repo_id, files in repo_files.items():
        fake.add_commit(repo_id, files)
    with serve(fake):
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        # The client reads this one at import: without it, its user agent asks the Hub it was
        # imported with (the real one) for a registry of coding agents.
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_TELEMETRY", True)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        yield fake


def _cached_files(tmp_path: Path) -> list[str]:
    root = tmp_path / "hf-cache"
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and ".locks" not in p.parts)


# ------------------------------------------------------------------ loading --


def test_glob_loads_the_one_match_and_decodes_like_the_local_file(
    hub: FakeHub, tiny_paths: dict[str, Path], random_model: Model
) -> None:
    model = Model.from_pretrained(REPO, "*F32.gguf")
    assert model.path.name == "tiny-F32.gguf" and "hf-cache" in str(model.path)
    assert model.path.read_bytes() == tiny_paths["random"].read_bytes()
    assert model.sidecar_path is None  # the head is embedded
    assert _tokens(model) == _tokens(random_model)
    kinds = [r.split(" ")[0] + " " + r.split("/")[1] for r in hub.requests]
    assert kinds == ["GET api", "HEAD mtp-llm", "GET cdn"]


def test_second_call_uses_the_cache_without_a_request(hub: FakeHub) -> None:
    first = Model.from_pretrained(REPO, "*F32.gguf")
    hub.requests.clear()
    second = Model.from_pretrained(REPO, "*F32.gguf")
    assert hub.requests == []
    assert second.path == first.path


def test_offline_mode_loads_from_the_cache_and_never_calls(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    online = Model.from_pretrained(REPO, "*F32.gguf")
    hub.requests.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert Model.from_pretrained(REPO, "*F32.gguf", refresh=True).path == online.path
    with pytest.raises(ModelLoadError, match=r"HF_HUB_OFFLINE is set and the cache .* has no matching file") as info:
        Model.from_pretrained(REPO, "*Q8_0.gguf")
    assert REPO in str(info.value) and "*Q8_0.gguf" in str(info.value)
    assert hub.requests == []


def test_split_gguf_is_fetched_whole_and_loaded_from_the_first_part(hub: FakeHub, random_model: Model) -> None:
    model = Model.from_pretrained(REPO, "random-split-*.gguf")
    assert model.path.name == f"random-split-00001-of-{SPLIT_PARTS:05d}.gguf"
    assert sorted(p.name for p in model.path.parent.glob("random-split-*")) == [
        f"random-split-{k:05d}-of-{SPLIT_PARTS:05d}.gguf" for k in range(1, SPLIT_PARTS + 1)
    ]
    assert model.has_mtp_head  # the head is in the last part
    assert _tokens(model) == _tokens(random_model)
    hub.requests.clear()
    assert Model.from_pretrained(REPO, f"random-split-00002-of-{SPLIT_PARTS:05d}.gguf").path == model.path
    assert hub.requests == []


def test_trunk_only_target_gets_the_repositorys_head(hub: FakeHub, tiny_paths: dict[str, Path]) -> None:
    model = Model.from_pretrained(TRUNK_REPO, "*.gguf")
    assert model.path.name == "random-trunk.gguf" and model.needs_sidecar
    assert model.sidecar_path is not None and model.sidecar_path.name == "mtp-head.gguf"
    session = make_session(model, n_draft=2)
    assert session.draft_model is not None and session.draft_model.path == model.sidecar_path
    local = Model.load(tiny_paths["random-trunk"])
    expected = _tokens(local, Model.load(tiny_paths["mtp-random-trunk"]))
    assert _tokens(model) == expected
    hub.requests.clear()
    again = Model.from_pretrained(TRUNK_REPO, "*.gguf")
    assert again.sidecar_path == model.sidecar_path and hub.requests == []


def test_revision_pins_a_commit(hub: FakeHub, repo_files: dict[str, dict[str, bytes]], tiny_paths: dict[str, Path]) -> None:
    old = hub.repos[REPO]["main"].sha
    new = hub.add_commit(REPO, {**repo_files[REPO], "tiny-F32.gguf": tiny_paths["accept100"].read_bytes()})
    pinned = Model.from_pretrained(REPO, "tiny-F32.gguf", revision=old)
    latest = Model.from_pretrained(REPO, "tiny-F32.gguf")
    assert pinned.path.parent.name == old and latest.path.parent.name == new
    assert pinned.path.read_bytes() == tiny_paths["random"].read_bytes()
    assert latest.path.read_bytes() == tiny_paths["accept100"].read_bytes()
    hub.requests.clear()
    assert Model.from_pretrained(REPO, "tiny-F32.gguf", revision=old).path == pinned.path
    assert hub.requests == []


# ---------------------------------------------------------------- bad input --


@pytest.mark.parametrize(
    ("repo_id", "pattern", "revision", "message"),
    [
        ("nobody/nothing", "*.gguf", None, "repository not found"),
        (REPO, "*F32.gguf", "v9", "revision not found"),
        (REPO, "*Q2_K.gguf", None, r"no model file matches at commit \w+; its GGUF files: tiny-F32.gguf"),
        (REPO, "tiny-*.gguf", None, r"2 model files match at commit \w+: tiny-F32.gguf, tiny-Q8_0.gguf; pass a"),
        (TRUNK_REPO, "mtp-*.gguf", None, "only MTP heads match"),
        (REPO, "notes/*.gguf", None, r"'broken.gguf' is not a GGUF file \(it starts with b'<htm'"),
    ],
)
def test_bad_input_names_the_repo_the_pattern_and_what_was_found(
    hub: FakeHub, repo_id: str, pattern: str, revision: str | None, message: str
) -> None:
    with pytest.raises(ModelLoadError, match=message) as info:
        Model.from_pretrained(repo_id, pattern, revision=revision)
    assert f"repo {repo_id!r}" in str(info.value) and repr(pattern) in str(info.value)


def test_download_cut_off_mid_file_leaves_nothing_loaded_or_cached(hub: FakeHub, tmp_path: Path) -> None:
    hub.cut_off.add("tiny-F32.gguf")
    with pytest.raises(ModelLoadError, match=r"downloading 'tiny-F32.gguf' failed") as info:
        Model.from_pretrained(REPO, "*F32.gguf")
    assert REPO in str(info.value)
    assert not [f for f in _cached_files(tmp_path) if "/blobs/" in f or "/snapshots/" in f]
    hub.cut_off.clear()
    hub.gone.clear()
    assert Model.from_pretrained(REPO, "*F32.gguf").n_embd == 64


def test_corrupt_download_is_caught_by_its_hash_and_removed(hub: FakeHub, tmp_path: Path) -> None:
    hub.corrupt.add("tiny-F32.gguf")
    with pytest.raises(ModelLoadError, match=r"the download of 'tiny-F32.gguf' is corrupt \(its sha256 is \w+, the "):
        Model.from_pretrained(REPO, "*F32.gguf")
    assert not [f for f in _cached_files(tmp_path) if "/blobs/" in f or "/snapshots/" in f]
    hub.corrupt.clear()
    model = Model.from_pretrained(REPO, "*F32.gguf")
    assert hashlib.sha256(model.path.read_bytes()).hexdigest() == model.path.resolve().name


def test_missing_huggingface_hub_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(ModelLoadError, match=r"needs huggingface_hub: pip install 'mtp-llm\[hub\]'"):
        Model.from_pretrained(REPO, "*.gguf")


# --------------------------------------------------- local sidecars, CLI --


def test_local_trunk_picks_up_the_head_beside_it(tiny_paths: dict[str, Path]) -> None:
    trunk = Model.load(tiny_paths["random-trunk"])
    assert trunk.sidecar_path == tiny_paths["mtp-random-trunk"]
    session = make_session(trunk, n_draft=2)
    assert session.draft_model is not None and session.draft_model.path == tiny_paths["mtp-random-trunk"]
    with pytest.raises(MissingMTPHeadError, match="trunk-only"):
        MTP(trunk, draft_model=None, n_threads=THREADS)
    assert Model.load(tiny_paths["random"]).sidecar_path is None  # embedded head


def test_cli_hf_and_info(hub: FakeHub, capsys: pytest.CaptureFixture[str], tiny_paths: dict[str, Path]) -> None:
    from mtp_llm.cli import main

    assert main(["info", "--hf", TRUNK_REPO]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["draft_model"].endswith("/mtp-head.gguf") and not info["has_mtp_head"]
    assert main(["info", "--model", str(tiny_paths["random-trunk"])]) == 0
    assert json.loads(capsys.readouterr().out)["draft_model"] == str(tiny_paths["mtp-random-trunk"])
    args = ["generate", "--max-tokens", "8", "--temp", "0", "--n-ctx", "256", "--threads", "1", "--quiet-stats", PROMPT]
    assert main([*args[:1], "--hf", f"{REPO}:*F32.gguf", *args[1:]]) == 0
    from_hub = capsys.readouterr().out
    assert main([*args[:1], "--model", str(tiny_paths["random"]), *args[1:]]) == 0
    assert from_hub == capsys.readouterr().out and from_hub.strip()


# ------------------------------------------------------------ integrations --


def test_langchain_and_llamaindex_take_repo_id_and_filename(hub: FakeHub, random_model: Model) -> None:
    from mtp_llm.langchain import MTPLLM as LangChainLLM
    from mtp_llm.llamaindex import MTPLLM as LlamaIndexLLM

    expected = make_session(random_model).generate(PROMPT, max_tokens=8, temp=0)
    params = dict(repo_id=REPO, filename="tiny-F32.gguf", n_threads=THREADS, n_ctx=256, max_tokens=8, temperature=0)
    chain_llm = LangChainLLM(**params)
    assert chain_llm.invoke(PROMPT) == expected
    index_llm = LlamaIndexLLM(**params)
    assert index_llm.complete(PROMPT).text == expected
    assert index_llm.metadata.model_name == "tiny-F32"
    with pytest.raises(ModelLoadError, match="repository not found"):
        LangChainLLM(repo_id="nobody/nothing", filename="*.gguf", n_ctx=256).invoke(PROMPT)
