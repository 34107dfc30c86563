"""Short fuzz campaigns (tools/fuzz.py, fixed seed, a few seconds each): chat templates,
grammars, schemas and tools, chat histories and model output, GGUF structure and metadata. No
child dies and none hangs (docs/reliability.md reports the long campaigns)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("campaign", ["template", "grammar", "schema", "history", "gguf", "gguf-meta"])
def test_short_campaign_has_no_death_and_no_hang(campaign: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "tools/fuzz.py", "--campaign", campaign, "--seconds", "4", "--seed", "51", "--batch", "25",
         "--keep", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["executions"] >= 10, report
    assert report["deaths"] == 0 and report["hangs"] == 0, report
    assert proc.returncode == 0, proc.stderr[-2000:]
