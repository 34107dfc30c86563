"""Record where the built-in model's head drafts the right token, and replay that trace through the
automatic draft length's controller against fixed lengths (no timing noise from the machine).

    .venv/bin/python benchmarks/draft_trace.py record tests/unit/data/smollm2_first_drafts.json
    .venv/bin/python benchmarks/draft_trace.py replay tests/unit/data/smollm2_first_drafts.json \
        --costs 9300,11350,15900,19000,22000 --noise 0.1

``record``: greedy answers to four chat prompts (plain decoding), then llama.cpp's head logits at every
position (``mtp_llm.parity.forward_with_head``): bit i says whether a first draft made at answer
position i is the target's next token. ``replay``: ``_core.internals.DraftController`` chooses each round's
length on that trace; later draft positions are accepted with ``--later`` probability; the iteration
of k drafts costs ``--costs[k]`` us times log-normal noise. Prints tokens/s of auto and of each
fixed length. The costs above are SmolLM2 with its trimmed head at 2 threads (n_draft 1 = 1.22 and
n_draft 2 = 1.71 plain passes, from benchmarks/built_in_speed.py); a 2-core AMD EPYC (Zen 4) measured
8360,9215,12392 (1.10 and 1.48).
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path

from mtp_llm import _core
from mtp_llm.bench.common import CHAT_QUESTIONS



def record(out: Path, tokens: int, threads: int) -> None:
    from mtp_llm import MTP, Model
    from mtp_llm.events import TokenEvent
    from mtp_llm.parity import forward_with_head

    model = Model.load_default()
    plain = MTP(model, n_draft=0, draft_model=None, n_threads=threads)
    traces = []
    for question in CHAT_QUESTIONS:
        prompt = model.tokenize(model.apply_chat_template([("user", question)]))
        answer = [e.id for e in plain.stream_events(prompt, max_tokens=tokens, temp=0) if isinstance(e, TokenEvent)]
        seq = prompt + answer
        head = forward_with_head(model, seq, n_threads=threads)["head_logits"].argmax(-1)
        # Head row i pairs token i with the trunk's state at i - 1: it drafts token i + 1.
        traces.append("".join("1" if head[i] == seq[i + 1] else "0" for i in range(len(prompt), len(seq) - 1)))
    out.write_text(json.dumps({"model": "built-in (SmolLM2-135M-Instruct, trimmed head)", "questions": CHAT_QUESTIONS,
                               "first_draft_accepted": traces}, indent=1) + "\n")


def replay(
    traces: Sequence[str],
    choose: Callable[[_core.internals.DraftController, int], int],
    costs: Sequence[float],
    *,
    reps: int = 12,
    later: float = 0.53,
    noise: float = 0.1,
    seed: int = 0,
) -> tuple[float, list[int]]:
    """Tokens per second and iterations per length when ``choose(controller, limit)`` picks each
    round's length on the recorded traces (one call per trace, ``reps`` times over)."""
    rng = random.Random(seed)
    controller = _core.internals.DraftController(len(costs) - 1)
    tokens = time = 0.0
    lengths = [0] * len(costs)
    for _ in range(reps):
        for trace in traces:
            controller.interrupt()  # a new call
            pos = 0
            while pos < len(trace):
                k = max(0, min(choose(controller, len(trace) - pos - 1), len(trace) - pos - 1))
                accepted = 0
                if k and trace[pos] == "1":
                    accepted = 1
                    while accepted < k and rng.random() < later:
                        accepted += 1
                us = costs[k] * rng.lognormvariate(0.0, noise)
                controller.observe(k, accepted, int(us), int(0.1 * costs[0] * k), False)
                pos += 1 + accepted
                tokens += 1 + accepted
                time += us
                lengths[k] += 1
    return tokens / time * 1e6, lengths


def _fixed(k: int) -> Callable[[_core.internals.DraftController, int], int]:
    return lambda controller, limit: min(k, limit)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("out", type=Path)
    rec.add_argument("--tokens", type=int, default=128)
    rec.add_argument("--threads", type=int, default=2)
    rep = sub.add_parser("replay")
    rep.add_argument("trace", type=Path)
    rep.add_argument("--costs", default="9300,11350,15900,19000,22000")
    rep.add_argument("--noise", type=float, default=0.1)
    rep.add_argument("--later", type=float, default=0.53,
                     help="acceptance of draft positions after the first, given the one before (the shipped head: 0.53)")
    rep.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    if args.command == "record":
        record(args.out, args.tokens, args.threads)
        return 0
    traces = json.loads(args.trace.read_text())["first_draft_accepted"]
    costs = [float(c) for c in args.costs.split(",")]
    for seed in range(args.seeds):
        auto, lengths = replay(traces, lambda c, limit: c.choose(limit), costs, noise=args.noise, seed=seed,
                               later=args.later)
        fixed = [replay(traces, _fixed(k), costs, noise=args.noise, seed=seed, later=args.later)[0]
                 for k in range(len(costs))]
        print(f"seed {seed}: auto {auto:.1f} t/s, fixed {' / '.join(f'{f:.1f}' for f in fixed)}; "
              f"auto / best fixed {auto / max(fixed):.3f}; auto's lengths {'/'.join(map(str, lengths))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
