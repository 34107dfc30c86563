"""Where the command line and the API could disagree, and what their error messages say: one set of
generation defaults, ``auto`` in ``bench --n-draft``, JSON-only ``--json``, ``~`` in paths, the least
``n_ctx``, errors in the CLI's own flags, grammar errors with their reason, head-only and truncated
files, plain-text ``--help``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mtp_llm import MTP, GenerationOptions, Model
from mtp_llm.cli import build_parser, main
from mtp_llm.errors import GrammarError, InvalidOptionError, MissingMTPHeadError, ModelLoadError
from mtp_llm.smollm2 import HEAD_FILE
from tests.helpers import THREADS

BAD_GRAMMAR = 'root ::= ("a" '


def _generate(model: Path, *extra: str) -> list[str]:
    return ["generate", "--model", str(model), "--threads", str(THREADS), *extra]


def _error(capfd: pytest.CaptureFixture[str]) -> str:
    """The one error line the CLI printed (nothing else on stderr)."""
    err = capfd.readouterr().err
    assert err.startswith("mtp-llm: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_generate_has_the_library_defaults(tiny_paths: dict[str, Path], capfd: pytest.CaptureFixture[str]) -> None:
    defaults = GenerationOptions()
    args = build_parser().parse_args(["generate", "Hi"])
    for name in ("max_tokens", "temp", "top_k", "top_p", "min_p", "seed", "repeat_penalty"):
        assert getattr(args, name) == getattr(defaults, name), name
    assert main(_generate(tiny_paths["accept100"], "--json", "Hi")) == 0
    report = json.loads(capfd.readouterr().out)
    assert report["stats"]["tokens_emitted"] == defaults.max_tokens == 256


def test_bench_table_takes_auto(tiny_paths: dict[str, Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    args = ["bench", "--model", str(tiny_paths["accept100"]), "--tokens", "15", "--n-draft", "1,auto", "--threads",
            "1", "--reps", "1", "--warmup", "0", "--no-progress", "--out", str(tmp_path)]
    assert main(args) == 0, capfd.readouterr().err
    rows = json.loads((tmp_path / "bench.json").read_text())["rows"]
    assert [row["n_draft"] for row in rows] == [0, 1, "auto"]
    assert rows[2]["config"] == "mtp n_draft=auto" and rows[2]["acceptance_rate"] == 1.0
    assert "| mtp n_draft=auto |" in (tmp_path / "bench.md").read_text()
    assert main([*args[:6], "1,fast", *args[7:]]) == 2
    assert "--n-draft '1,fast'" in _error(capfd)


def test_generate_json_writes_json_only(tiny_paths: dict[str, Path], capfd: pytest.CaptureFixture[str]) -> None:
    assert main(_generate(tiny_paths["accept100"], "--max-tokens", "8", "--temp", "0", "--n-draft", "3", "--json",
                          "Hi")) == 0
    out = capfd.readouterr().out
    report = json.loads(out)  # the whole of stdout
    assert report["text"] == "aaaaaaaa" and report["finish_reason"] == "length"
    assert report["stats"]["tokens_emitted"] == 8


def test_paths_expand_the_home_directory(tiny_paths: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "trunk").mkdir()
    (tmp_path / "heads").mkdir()
    shutil.copy(tiny_paths["random"], tmp_path / "random.gguf")
    shutil.copy(tiny_paths["random-trunk"], tmp_path / "trunk" / "random-trunk.gguf")
    shutil.copy(tiny_paths["mtp-random-trunk"], tmp_path / "heads" / "mtp-random-trunk.gguf")
    env = dict(os.environ, HOME=str(tmp_path))
    code = "import mtp_llm; print(mtp_llm.Model.load('~/random.gguf').path)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == str(tmp_path / "random.gguf"), proc.stderr
    cli = [sys.executable, "-m", "mtp_llm", "generate", "--threads", "1", "--max-tokens", "4", "--temp", "0", "--json"]
    for model in (["--model", "~/random.gguf"],
                  ["--model=~/trunk/random-trunk.gguf", "--draft-model=~/heads/mtp-random-trunk.gguf"]):
        proc = subprocess.run([*cli, *model, "Hi"], capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["stats"]["tokens_emitted"] == 4


def test_n_ctx_below_a_slot_is_an_error(random_model: Model, tiny_paths: dict[str, Path],
                                        capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(InvalidOptionError, match=r"n_ctx=100 is below 256 tokens.* pass n_ctx >= 256"):
        MTP(random_model, n_ctx=100, n_threads=1)
    assert MTP(random_model, n_ctx=256, n_threads=1).n_ctx == 256
    assert main(_generate(tiny_paths["random"], "--n-ctx", "100", "Hi")) == 2
    err = _error(capfd)
    assert "--n-ctx 100 is below 256 tokens" in err and "pass --n-ctx >= 256" in err and "n_ctx" not in err


def test_cli_errors_name_the_cli_flags(tiny_paths: dict[str, Path], tmp_path: Path,
                                       capfd: pytest.CaptureFixture[str]) -> None:
    trunk = tmp_path / "random-trunk.gguf"  # no head beside it
    shutil.copy(tiny_paths["random-trunk"], trunk)
    with pytest.raises(MissingMTPHeadError, match=r"pass draft_model=Model\.load\('mtp-\.\.\.\.gguf'\).* n_draft=0"):
        MTP(Model.load(trunk), n_threads=1)
    assert main(_generate(trunk, "Hi")) == 2
    err = _error(capfd)
    assert "pass --draft-model mtp-....gguf" in err and "--no-mtp for plain decoding" in err
    assert "draft_model" not in err and "Model.load" not in err and "n_draft" not in err
    assert main(_generate(tiny_paths["random"], "--n-draft-max", "99", "Hi")) == 2
    assert "--n-draft-max must be between 1 and" in _error(capfd)


def test_grammar_errors_carry_the_reason(random_model: Model, tiny_paths: dict[str, Path],
                                         capfd: pytest.CaptureFixture[str]) -> None:
    session = MTP(random_model, n_ctx=256, n_threads=1)
    capfd.readouterr()
    with pytest.raises(GrammarError) as error:
        session.generate("Hi", grammar=BAD_GRAMMAR, max_tokens=4)
    assert "expecting ')' at line 1, column 15, the end of the grammar" in str(error.value)
    with pytest.raises(GrammarError, match=r"expecting newline or end at line 2, column 7, before '\)'"):
        session.generate("Hi", grammar="root ::= a\na ::= )\n", max_tokens=4)
    with pytest.raises(GrammarError, match="rule 'b' is used but not defined"):
        session.generate("Hi", grammar="root ::= b", max_tokens=4)
    assert capfd.readouterr().err == ""
    assert main(_generate(tiny_paths["random"], "--grammar", BAD_GRAMMAR, "Hi")) == 2
    assert "expecting ')'" in _error(capfd)
    assert session.generate("Hi", grammar='root ::= "a"+', max_tokens=3, temp=0) == "aaa"


def test_a_head_only_file_is_not_a_model(tiny_paths: dict[str, Path], tmp_path: Path,
                                         capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ModelLoadError, match=r"the built-in model's MTP head .* not a model.*\(Model\.load_default\(\)\)"):
        Model.load(HEAD_FILE)
    assert main(["generate", "--model", str(HEAD_FILE), "Hi"]) == 2
    err = _error(capfd)
    assert "not a model" in err and "leave out --model" in err and "Model." not in err
    copy = tmp_path / "mtp-head.gguf"
    shutil.copy(HEAD_FILE, copy)
    with pytest.raises(ModelLoadError, match=r"holds only an MTP head's tensors.* not a model"):
        Model.load(copy)
    # A sidecar (a head with its trunk's vocabulary) given as the target.
    assert main(_generate(tiny_paths["mtp-random-trunk"], "Hi")) == 2
    err = _error(capfd)
    assert f"pass its trunk model as --model and --draft-model {tiny_paths['mtp-random-trunk']}" in err, err
    assert "draft_model" not in err


def test_a_truncated_file_says_so(tiny_paths: dict[str, Path], tmp_path: Path) -> None:
    from mtp_llm.draft_vocab import write_trimmed_head

    trimmed = write_trimmed_head(tiny_paths["random"], np.arange(0, 200, 2), tmp_path, "f16")
    for source, cut in ((trimmed, 8), (tiny_paths["random"], 150_000)):
        size = source.stat().st_size
        short = tmp_path / f"short-{source.name}"
        short.write_bytes(source.read_bytes()[: size - cut])
        with pytest.raises(ModelLoadError) as error:
            Model.load(short)
        message = str(error.value)
        found = re.search(rf"'{re.escape(str(short))}' is truncated: {size - cut} bytes of the (\d+) its header describes",
                          message)
        assert found and size - cut < int(found[1]) <= size, message
        assert "download or copy it again" in message and "llama.cpp said" not in message


def test_help_is_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["generate"], ["bench"], []):
        with pytest.raises(SystemExit) as exit_:
            main([*command, "--help"])
        assert exit_.value.code == 0
        out = capsys.readouterr().out
        for markup in ("``", ":mod:", ":class:", ":attr:", ":meth:", ":func:", ":data:"):
            assert markup not in out, (command, markup)
    generate = build_parser()._subparsers._group_actions[0].choices["generate"].format_help()  # type: ignore[union-attr]
    assert 'Longest draft of n_draft="auto"' in " ".join(generate.split())
