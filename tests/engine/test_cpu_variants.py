"""ggml's CPU backend built once per instruction-set level and chosen at run time: the extension loads the variant
ggml's own scoring picks for this CPU, reports it (``cpu_backend()``, ``Device.variant``, ``MTP.cpu_variant``,
``mtp-llm info``), and every variant this machine runs decodes losslessly (greedy MTP == plain, every draft of the
accept-all model accepted). The variants with AVX2 and FMA (haswell and up) compute the built-in model bit for bit
alike (patch 0027), so they print the same greedy text. ``MTP_LLM_CPU_VARIANT`` forces one, as the qemu checks of
scripts/check_wheel.sh do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mtp_llm import MTP, cpu_backend, list_devices

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "cmake"))
import cpu_variants  # noqa: E402  (cmake/cpu_variants.py: the build's list and ggml's scoring)

BACKEND = cpu_backend()
needs_variants = pytest.mark.skipif(not BACKEND.runtime_variants, reason="a build for one CPU (GGML_NATIVE)")

CHILD = """
import json, sys
from mtp_llm import MTP, Model, cpu_backend
out = {"variant": cpu_backend().variant, "features": cpu_backend().features}
session = MTP(Model.load(sys.argv[1]), n_draft=3, n_threads=2)
prompt = "To be, or not to be"
out["mtp"] = session.generate(prompt, max_tokens=32, temp=0)
out["plain"] = session.generate(prompt, max_tokens=32, temp=0, n_draft=0)
out["session_variant"] = session.cpu_variant
forced = MTP(Model.load(sys.argv[2]), n_draft=3, n_threads=2)
forced.generate(prompt, max_tokens=32, temp=0)
stats = forced.last_stats
out["accept100"] = [stats.drafts_accepted, stats.drafts_generated]
print(json.dumps(out))
"""


def run_child(variant: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MTP_LLM_CPU_VARIANT"}
    if variant:
        env["MTP_LLM_CPU_VARIANT"] = variant
    return subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, env=env, timeout=300)


@needs_variants
def test_the_loaded_variant_is_the_best_this_cpu_runs() -> None:
    assert BACKEND.built and set(BACKEND.built) <= set(cpu_variants.X86_VARIANTS) | set(cpu_variants.ARM_VARIANTS)
    forced = os.environ.get("MTP_LLM_CPU_VARIANT")  # scripts/check_avx2.sh runs the suite on one variant
    expected = forced or cpu_variants.best_variant(cpu_variants.cpu_flags(), list(BACKEND.built))
    assert BACKEND.variant == expected
    assert BACKEND.scores[BACKEND.variant] == (BACKEND.scores[forced] if forced else max(BACKEND.scores.values())) > 0
    assert Path(BACKEND.path).name == f"libggml-cpu-{BACKEND.variant}.so" and Path(BACKEND.path).is_file()
    # the library sits beside the extension, with the shared llama.cpp libraries of this package's own names
    package = Path(BACKEND.path).parent
    assert {p.name for p in package.glob("libmtp_*.so")} >= {"libmtp_ggml-base.so", "libmtp_llama.so"}


@needs_variants
def test_the_variant_is_reported_on_the_cpu_device_the_session_and_the_cli(random_session: MTP) -> None:
    (cpu,) = [d for d in list_devices() if d.type == "cpu"]
    assert cpu.variant == BACKEND.variant == random_session.cpu_variant
    assert all(d.variant == "" for d in list_devices() if d.type != "cpu")
    info = subprocess.run([sys.executable, "-m", "mtp_llm", "info", "--model", str(random_session.model.path)],
                          capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(info.stdout)["cpu_backend"]["variant"] == BACKEND.variant


def _runnable() -> list[str]:
    return [tag for tag, score in BACKEND.scores.items() if score > 0] if BACKEND.runtime_variants else []


@needs_variants
@pytest.mark.parametrize("variant", _runnable())
def test_every_variant_this_machine_runs_decodes_losslessly(variant: str, tiny_paths: dict[str, Path]) -> None:
    result = run_child(variant, str(tiny_paths["random"]), str(tiny_paths["accept100"]))
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout)
    assert out["variant"] == out["session_variant"] == variant
    assert out["mtp"] == out["plain"] and out["mtp"]
    accepted, drafted = out["accept100"]
    assert accepted == drafted > 0
    # the features ggml reports are the variant's instruction sets: none above them
    needs = {**cpu_variants.X86_VARIANTS, **cpu_variants.ARM_VARIANTS}[variant]
    features = out["features"]
    if variant in cpu_variants.X86_VARIANTS:
        assert ("AVX2" in features) == ("avx2" in needs)
        assert ("AVX512" in features) == ("avx512f" in needs)
        assert ("AVX512_VNNI" in features) == ("avx512_vnni" in needs)


ALIKE_CHILD = """
import hashlib, json
from mtp_llm import MTP, Model, cpu_backend
from mtp_llm.bench.common import CHAT_QUESTIONS
from mtp_llm.parity import forward_with_head
model = Model.load_default()
long_prompt = model.apply_chat_template([("user", " ".join(CHAT_QUESTIONS * 2))])  # over 64 tokens: tiled attention
out = {"variant": cpu_backend().variant, "logits": {}}
for name, text in (("short", model.apply_chat_template([("user", CHAT_QUESTIONS[0])])), ("long", long_prompt)):
    ids = model.tokenize(text)
    rows = forward_with_head(model, ids, n_threads=2)
    out["logits"][name] = [len(ids), hashlib.sha256(rows["trunk_logits"].tobytes()).hexdigest(),
                           hashlib.sha256(rows["head_logits"].tobytes()).hexdigest()]
session = MTP(model, n_draft=3, n_threads=2)
out["answers"] = [session.generate(model.apply_chat_template([("user", q)]), max_tokens=48, temp=0)
                  for q in CHAT_QUESTIONS[:3]]
print(json.dumps(out))
"""


def _fma_runnable() -> list[str]:
    """The x86 variants with FMA (piledriver, haswell and up: patches 0027, 0030); arm64's are checked under qemu."""
    return [v for v in _runnable() if "fma" in cpu_variants.X86_VARIANTS.get(v, ())]


@needs_variants
def test_the_fma_variants_compute_the_built_in_model_bit_for_bit_alike() -> None:
    variants = _fma_runnable()
    if len(variants) < 2:
        pytest.skip(f"this CPU runs {len(variants)} of the x86 FMA variants: nothing to compare")
    results = []
    for variant in variants:
        env = {**os.environ, "MTP_LLM_CPU_VARIANT": variant}
        done = subprocess.run([sys.executable, "-c", ALIKE_CHILD], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        results.append(json.loads(done.stdout))
    first = results[0]
    assert first["logits"]["long"][0] > 64 and all(answer for answer in first["answers"])
    for result in results[1:]:
        assert result["logits"] == first["logits"], (result["variant"], first["variant"])
        assert result["answers"] == first["answers"], (result["variant"], first["variant"])


@needs_variants
def test_a_variant_that_cannot_run_or_does_not_exist_is_refused_with_the_list(tiny_paths: dict[str, Path]) -> None:
    result = run_child("pentium4", str(tiny_paths["random"]), str(tiny_paths["accept100"]))
    assert result.returncode != 0
    assert "ModelLoadError" in result.stderr and "MTP_LLM_CPU_VARIANT=pentium4" in result.stderr
    assert all(tag in result.stderr for tag in BACKEND.built)


def test_a_static_build_reports_itself() -> None:
    if BACKEND.runtime_variants:
        assert BACKEND.variant in BACKEND.built and BACKEND.path
    else:
        assert BACKEND.variant == "static" and BACKEND.path == "" and BACKEND.built == ()
    assert BACKEND.features, "the CPU backend's feature list"
