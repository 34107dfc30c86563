"""The GPU equality cases: greedy tokens and exact acceptance counts of the tiny models.

tests/engine/test_gpu.py runs them on every build; as a script, a CPU build prints them as JSON, the
reference that scripts/check_vulkan.sh and benchmarks/gpu_check.sh compare a GPU build with
(MTP_LLM_GPU_REFERENCE=<file>): ``python tests/helpers/gpu_cases.py > build/gpu-reference.json``.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

from mtp_llm import MTP, Model, TokenEvent
from mtp_llm.gguf.tiny_models import make_tiny_models

MODELS_DIR = Path(__file__).resolve().parents[1] / ".models"  # tests/.models, as tests.helpers.MODELS_DIR
#: Targets: embedded heads (random, forced acceptance 1/3 and 1), a trunk with its sidecar head,
#: and the hybrid (recurrent) Qwen3.5 model, whose rollback is a checkpoint.
MODELS = ("random", "accept33", "accept100", "random-trunk", "hybrid")
PROMPTS = ("Hello", "The quick brown fox jumps over the lazy dog.")
MAX_TOKENS = 24
N_DRAFT = 3  # fixed: exact acceptance counts ("auto" depends on timings)


def load(paths: dict[str, Path], name: str, n_gpu_layers: int = 0, mtp_device: str | None = None) -> Model:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # n_gpu_layers on a CPU build: the warning has its own test
        return Model.load(paths[name], n_gpu_layers=n_gpu_layers, mtp_device=mtp_device)


def run(paths: dict[str, Path], name: str, n_gpu_layers: int = 0, mtp_device: str | None = None) -> dict[str, Any]:
    """Plain and MTP tokens of each prompt, the MTP session's counts and where it ran."""
    model = load(paths, name, n_gpu_layers, mtp_device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = MTP(model, n_draft=0, n_ctx=256, n_threads=1)
        spec = MTP(model, n_draft=N_DRAFT, n_ctx=256, n_threads=1)
    out: dict[str, Any] = {"plain": [], "mtp": []}
    for prompt in PROMPTS:
        for key, session in (("plain", plain), ("mtp", spec)):
            events = session.stream_events(prompt, max_tokens=MAX_TOKENS, temp=0)
            out[key].append([e.id for e in events if isinstance(e, TokenEvent)])
    stats = spec.stats()
    out["drafted"] = stats.drafts_generated
    out["accepted"] = stats.drafts_accepted
    out["iters"] = stats.iters
    out["draft_length_counts"] = list(stats.draft_length_counts)
    out["devices"] = spec.devices
    plain.close()
    spec.close()
    return out


def reference(paths: dict[str, Path]) -> dict[str, dict[str, Any]]:
    return {name: run(paths, name) for name in MODELS}


if __name__ == "__main__":
    json.dump(reference(make_tiny_models(MODELS_DIR)), sys.stdout, indent=1)
    print()
