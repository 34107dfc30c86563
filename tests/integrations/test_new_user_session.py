"""The scripted new user's session (tests/helpers/new_user_session.py) in a process of its own: it
prints no traceback and no warning, and every error it provokes is an MTPError whose message says
what to change."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

EXPECTED = [
    ("GenerationTimeoutError", "timed out waiting for a slot", "close or exhaust the stream"),
    ("InvalidOptionError", "ChatMTP() got unknown option 'num_predict'", "use max_tokens"),
    ("InvalidOptionError", "MTPLLM() got unknown option 'temperatur'", "did you mean temperature"),
    ("InvalidOptionError", "ChatMTP() got an invalid option value: n_ctx=-1", "greater than or equal to"),
    ("InvalidOptionError", "the call got unknown option 'max_token'", "did you mean max_tokens"),
    ("StructuredOutputParserError", "the structured answer was cut at max_tokens", "raise max_tokens"),
    ("StructuredOutputError", "the structured answer was cut at max_tokens", "raise max_tokens"),
    ("GrammarError", "the grammar does not parse", "line 1"),
    ("InvalidOptionError", "tool_choice", "get_weather"),
    ("InvalidOptionError", "n_ctx=100", "n_ctx >= 256"),
    ("ModelLoadError", "missing.gguf", "not found"),
]
"""Per provoked error, in order: its class, what its message starts with or holds, and the fix it names."""


def test_a_new_users_session_is_quiet_and_every_error_names_the_fix(tmp_path: Path, tiny_paths: dict[str, Path]) -> None:
    shutil.copy(tiny_paths["random"], tmp_path / "model.gguf")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_", "MTP_LLM_MODEL"))}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "tests.helpers.new_user_session", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", "a traceback or warning reached the user"
    lines = done.stdout.splitlines()
    assert lines[-1] == "done"
    reported = [line for line in lines if line.split(":", 1)[0] in {name for name, _, _ in EXPECTED}]
    assert len(reported) == len(EXPECTED), reported
    for line, (name, what, fix) in zip(reported, EXPECTED):
        kind, message = line.split(": ", 1)
        assert kind == name and what in message and fix in message, line
