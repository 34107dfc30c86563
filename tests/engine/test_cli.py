"""The ``mtp-llm`` command line on the tiny models: generate, automatic draft length, errors, bench."""

from __future__ import annotations

import json

import pytest
import subprocess
import sys


def test_cli_generate_streams_and_prints_stats(tiny_paths) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mtp_llm", "generate", "--model", str(tiny_paths["accept100"]), "--threads", "1",
         "--max-tokens", "8", "--n-draft", "3", "--json", "Hi"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)  # --json: stdout is the JSON only, the text inside it
    assert report["text"] == "aaaaaaaa"
    assert report["finish_reason"] == "length"
    assert report["stats"]["acceptance_rate"] == 1.0 and report["stats"]["tokens_emitted"] == 8



def test_cli_automatic_draft_length_is_the_default(tiny_paths) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mtp_llm", "generate", "--model", str(tiny_paths["accept100"]), "--threads", "1",
         "--max-tokens", "40", "--n-draft-max", "2", "--json", "Hi"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout)["stats"]
    assert stats["n_draft"] == 2 and len(stats["draft_length_counts"]) == 3
    assert stats["draft_length_counts"][0] >= 3  # plain decoding measured first
    assert stats["draft_controller"]["iteration_us"][0] > 0
    bad = subprocess.run([sys.executable, "-m", "mtp_llm", "generate", "--n-draft", "fast", "Hi"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "'auto'" in bad.stderr



def test_cli_no_mtp(tiny_paths) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mtp_llm", "generate", "--model", str(tiny_paths["random"]), "--threads", "1",
         "--max-tokens", "8", "--no-mtp", "--json", "Hi"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["stats"]["drafts_generated"] == 0



def test_cli_chat_needs_a_chat_template(tiny_paths) -> None:
    """--chat on a model without a chat template is a clear error (the real model's run is in test_real_model)."""
    proc = subprocess.run(
        [sys.executable, "-m", "mtp_llm", "generate", "--model", str(tiny_paths["random"]), "--threads", "1",
         "--max-tokens", "4", "--chat", "Hi"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2 and "no chat template" in proc.stderr and "Traceback" not in proc.stderr



def test_cli_reports_errors_without_traceback(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mtp_llm", "generate", "--model", str(tmp_path / "missing.gguf"), "Hi"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "not found" in proc.stderr and "Traceback" not in proc.stderr



def test_cli_bench_runs_end_to_end(tiny_paths, tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mtp_llm", "bench", "--model", str(tiny_paths["accept100"]), "--tokens", "15",
         "--n-draft", "1,2", "--threads", "1", "--reps", "1", "--warmup", "0", "--no-progress", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "bench.json").read_text())
    assert [row["n_draft"] for row in report["rows"]] == [0, 1, 2]
    # 15 tokens at n_draft=2 on the always-agreeing model: 5 passes of 2 accepted drafts + 1.
    assert report["rows"][2]["acceptance_rate"] == 1.0, report["rows"][2]
    assert report["rows"][2]["mean_accepted_length"] == 3.0, report["rows"][2]
    assert (tmp_path / "bench.md").exists() and (tmp_path / "bench.png").exists()
    assert report["meta"]["threads"] == 1  # the engine's count, not the flag's raw value



def test_cli_bench_parallel(tiny_paths, tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mtp_llm", "bench", "--model", str(tiny_paths["accept100"]), "--tokens", "15",
         "--parallel", "1,2", "--n-draft", "2,auto", "--threads", "1", "--reps", "1", "--warmup", "0",
         "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "parallel.json").read_text())
    assert [(row["n_draft"], row["streams"]) for row in report["rows"]] == [
        (0, 1), (0, 2), (2, 1), (2, 2), ("auto", 1), ("auto", 2)
    ]
    assert all(row["acceptance_rate"] == 1.0 for row in report["rows"] if row["n_draft"] == 2)
    assert report["meta"]["n_parallel"] == 2 and report["meta"]["n_ctx_slot"] >= 256
    assert "Cache memory per slot" in (tmp_path / "parallel.md").read_text()
    rows = {(row["n_draft"], row["streams"]): row for row in report["rows"]}
    for streams in (1, 2):
        auto = rows[("auto", streams)]
        best = max((0, 2), key=lambda k: rows[(k, streams)]["aggregate_tps"])
        assert auto["best_fixed"] == best
        # one repetition: its ratio is the ratio of the two speeds
        assert auto["vs_best_fixed"] == pytest.approx(auto["aggregate_tps"] / rows[(best, streams)]["aggregate_tps"])
    assert "the median of per-repetition ratios" in (tmp_path / "parallel.md").read_text()
