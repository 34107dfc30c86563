"""Runs the arm64 build of mtp_generate under qemu-aarch64 and checks it against this machine's package.

Usage (scripts/check_aarch64.sh --generate calls it): python check.py STAGE_DIR [CPU ...]

STAGE_DIR holds mtp_generate beside libmtp_*.so and libggml-cpu-<variant>.so, as the wheel's mtp_llm folder does.
For each qemu CPU model: the built-in model generates greedily, plain and with MTP (n_draft 1 and 3); the check
wants the variant ggml loaded to be the one cmake/cpu_variants.py picks for the features the kernel reports to the
program (getauxval), MTP's tokens to equal plain decoding's, and plain decoding's tokens to equal the installed
package's on this machine (same prompt ids, greedy): the arm64 variants compute as x86's AVX2 and AVX-512 ones, bit
for bit (patch 0029). Where they part it prints the first position with both machines' top-2 log-probabilities there
and how far the chosen tokens' log-probabilities drifted before it. A CPU spec CPU:VARIANT forces a variant
(MTP_LLM_CPU_VARIANT).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "cmake"))
import cpu_variants  # noqa: E402

PROMPT = "The capital of France is"
DRAFTS = (0, 1, 3)


def host_run(model_path: str, prompt_ids: list[int] | None, max_tokens: int) -> dict[str, Any]:
    """This machine's greedy runs with the installed package: tokens and each token's top-2 log-probabilities."""
    from mtp_llm import MTP, Model
    from mtp_llm.events import DoneEvent, TokenEvent

    model = Model.load(model_path)
    ids = prompt_ids if prompt_ids is not None else model.tokenize(PROMPT)
    out: dict[str, Any] = {"prompt_ids": model.tokenize(PROMPT), "runs": {}}
    for n_draft in DRAFTS:
        session = MTP(model, n_draft=n_draft, n_ctx=512, n_threads=2, adaptive_threads=False, cache_prompt=False)
        tokens, top, accepted = [], [], ""
        extra: dict[str, Any] = {"top_logprobs": 2} if n_draft == 0 else {}  # the margins where arm64 parts
        for event in session.stream_events(ids, max_tokens=max_tokens, temp=0, **extra):
            if isinstance(event, TokenEvent):
                tokens.append(event.id)
                top.append(event.top_logprobs)
            elif isinstance(event, DoneEvent):
                accepted = f"{event.stats.drafts_accepted}/{event.stats.drafts_generated}"
        out["runs"][n_draft] = {"tokens": tokens, "top": top, "cpu_variant": session.cpu_variant, "accepted": accepted}
        session.close()
    return out


def qemu_run(
    stage: Path, cpu: str, variant: str, model_path: str, max_tokens: int
) -> tuple[list[dict[str, Any]], float]:
    cmd = ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", "-cpu", cpu, str(stage / "mtp_generate"), model_path,
           "--prompt", PROMPT, "--max-tokens", str(max_tokens), "--n-draft", ",".join(map(str, DRAFTS)),
           "--threads", "2"]
    env = dict(os.environ)
    env.pop("MTP_LLM_CPU_VARIANT", None)
    if variant:
        env["MTP_LLM_CPU_VARIANT"] = variant
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"check_aarch64: {' '.join(cmd)} exited with {proc.returncode}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")], seconds


def as_float32(x: float) -> float:
    return float(struct.unpack("f", struct.pack("f", x))[0])


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main() -> int:
    stage = Path(sys.argv[1])
    cpus = sys.argv[2:] or ["cortex-a53", "neoverse-n1", "max"]
    max_tokens = int(os.environ.get("MTP_LLM_AARCH64_TOKENS", "16"))
    from mtp_llm.default_model import default_model_path

    model_path = str(default_model_path())
    print(f"model: {model_path}\nprompt: {PROMPT!r}, {max_tokens} tokens, greedy")
    failures = 0
    parted: list[str] = []  # CPUs whose tokens part from x86-64's
    host: dict[str, Any] | None = None
    for spec in cpus:
        cpu, _, forced = spec.partition(":")  # CPU:VARIANT forces a variant (MTP_LLM_CPU_VARIANT)
        lines, seconds = qemu_run(stage, cpu, forced, model_path, max_tokens)
        info, prompt = lines[0], lines[1]
        runs = {line["n_draft"]: line for line in lines[2:]}
        if host is None:
            host = host_run(model_path, prompt["prompt_ids"], max_tokens)
            x86 = host["runs"][0]["tokens"]
            accepted = ", ".join(f"n_draft={n}: {host['runs'][n]['accepted']}" for n in DRAFTS[1:])
            print(f"x86-64 ({host['runs'][0]['cpu_variant']}): {x86}; drafts accepted {accepted}")
            if host["prompt_ids"] != prompt["prompt_ids"]:
                print(f"FAIL prompt ids differ: x86 {host['prompt_ids']} arm64 {prompt['prompt_ids']}")
                failures += 1
            for n_draft in DRAFTS[1:]:
                if host["runs"][n_draft]["tokens"] != x86:
                    print(f"FAIL x86 n_draft={n_draft} differs from plain: {host['runs'][n_draft]['tokens']}")
                    failures += 1
        best = cpu_variants.best_variant(set(info["hwcaps"]), list(info["scores"]), "aarch64")
        runnable = [v for v in info["scores"] if set(cpu_variants.ARM_VARIANTS[v]) <= set(info["hwcaps"])]
        expected = forced if forced in runnable else best
        ok_variant = info["cpu_variant"] == expected
        plain = runs[0]["tokens"]
        how = f"forced, best here {best}" if forced else f"expected {expected}"
        print(f"\n-cpu {cpu}: features {info['hwcaps']} -> variant {info['cpu_variant']} "
              f"({how}: {'ok' if ok_variant else 'FAIL'}), scores {info['scores']}, {seconds:.0f} s")
        failures += not ok_variant
        for n_draft in DRAFTS:
            run = runs[n_draft]
            same = run["tokens"] == plain
            rate = f"{run['drafts_accepted']}/{run['drafts_generated']} drafts accepted" if n_draft else "plain"
            print(f"  n_draft={n_draft} ({run['driver']}): {run['tokens']} {rate}"
                  + ("" if n_draft == 0 else f", == plain: {'ok' if same else 'FAIL'}"))
            failures += not same
        print(f"  text: {runs[0]['text']!r}")
        at = first_difference(plain, x86)
        arm_top, x86_top = runs[0]["top_logprobs"], host["runs"][0]["top"]
        # the chosen token's log-probability on both machines, over the positions where both chose the same
        same = len(plain) if at is None else at
        drift = max((abs(arm_top[i][0][1] - x86_top[i][0][1]) for i in range(same)), default=0.0)
        if at is None:
            # the logits are computed bit for bit alike: the top-2 log-probabilities too (printed with 9 digits)
            unlike = sum(as_float32(a[1]) != as_float32(b[1]) for i in range(same)
                         for a, b in zip(arm_top[i], x86_top[i]))
            print(f"  == x86-64: {'ok' if not unlike else 'FAIL'} (token for token; {unlike} top-2 "
                  f"log-probabilities unlike x86-64's as float32, chosen ones by at most {drift:.2e})")
            failures += unlike > 0
        else:
            def pair(top: list[Any]) -> str:
                return ", ".join(f"{t}: {lp:.4f}" for t, lp in top[:2])

            print(f"  FAIL != x86-64 from token {at}: arm64 top-2 {{{pair(arm_top[at])}}}, x86-64 top-2 "
                  f"{{{pair(x86_top[at])}}}; before it the chosen tokens' log-probabilities differ by up to "
                  f"{drift:.2e}; {sum(a != b for a, b in zip(plain, x86))} of {len(x86)} positions differ")
            parted.append(spec)
            failures += 1
    print(f"\ncheck_aarch64 --generate: {'all checks pass' if not failures else f'{failures} check(s) failed'} "
          "(variant chosen, MTP == plain, plain == x86-64); tokens equal to x86-64's on "
          f"{len(cpus) - len(parted)} of {len(cpus)} CPUs" + (f", not on {' '.join(parted)}" if parted else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
