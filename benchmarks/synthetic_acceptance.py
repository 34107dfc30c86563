"""Calibrated synthetic models accept at the rate they are built for, and MTP output equals plain decoding.

    .venv/bin/python benchmarks/synthetic_acceptance.py --size 150M --format f16 \\
        --acceptance 0.5,0.75,0.9 --n-draft 3 --tokens 256 --threads 2

For each acceptance p: the synthetic hy_v3 model of that size and format, greedy plain decoding and
MTP at --n-draft on 16 prompts with distinct last tokens (the model's continuation depends only on
the last token, so each prompt walks its own stretch of the token cycle), --tokens each. Checks that
MTP's tokens equal plain decoding's and that the engine's counters equal the replay of the loop
(``expected_counters``), and prints the acceptance at each draft position given the earlier ones
were accepted, which should be p (binomial noise: about sqrt(p(1-p)/n) for n trials). Written to
``--out``/synthetic_acceptance.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mtp_llm import MTP, Model
from mtp_llm.bench import SYNTHETIC_PROMPTS, write_table
from mtp_llm.events import TokenEvent
from mtp_llm.gguf.synthetic import expected_counters, spec_of, synthetic_model

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="150M")
    parser.add_argument("--format", default="f16")
    parser.add_argument("--acceptance", default="0.5,0.75,0.9")
    parser.add_argument("--n-draft", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()

    k = args.n_draft
    lines = [
        f"Synthetic {args.size} {args.format}, n_draft={k}, {len(SYNTHETIC_PROMPTS)} prompts x {args.tokens} "
        f"tokens, greedy, threads={args.threads}.",
        "",
        "| p | MTP == plain | counters == replay | drafts accepted / generated "
        "| per position, given the previous (trials) | max deviation from p |",
        "|---|---|---|---|---|---|",
    ]
    ok = True
    for p in (float(x) for x in args.acceptance.split(",")):
        path = synthetic_model(args.size, p, args.format)
        spec = spec_of(path)
        assert spec is not None
        chain = spec.tokens()
        model = Model.load(path)
        plain = MTP(model, n_draft=0, n_ctx=args.tokens + 64, n_threads=args.threads)
        mtp = MTP(model, n_draft=k, n_ctx=args.tokens + 64, n_threads=args.threads)
        same = True
        drafted, accepted = [0] * k, [0] * k
        want_gen = want_acc = 0
        for prompt in SYNTHETIC_PROMPTS:
            ids = []
            for session in (plain, mtp):
                ids.append([e.id for e in session.stream_events(prompt, max_tokens=args.tokens, temp=0)
                            if isinstance(e, TokenEvent)])
            same &= ids[0] == ids[1]
            e = expected_counters(chain, mtp.tokenize_prompt(prompt)[-1], args.tokens, k)
            drafted = [a + b for a, b in zip(drafted, e["drafted_at"])]
            accepted = [a + b for a, b in zip(accepted, e["accepted_at"])]
            want_gen += e["drafts_generated"]
            want_acc += e["drafts_accepted"]
        s = mtp.stats()
        replay = (s.drafts_generated, s.drafts_accepted) == (want_gen, want_acc)
        trials = [drafted[0], *accepted[:-1]]
        cond = [a / n for a, n in zip(accepted, trials)]
        dev = max(abs(c - p) for c in cond)
        ok &= same and replay and dev <= 0.05
        lines.append(
            f"| {p:.2f} | {'yes' if same else 'NO'} | {'yes' if replay else 'NO'} "
            f"| {s.drafts_accepted} / {s.drafts_generated} "
            f"| {' / '.join(f'{c:.3f} ({n})' for c, n in zip(cond, trials))} | {dev:.3f} |"
        )
    write_table("\n".join(lines), args.out, "synthetic_acceptance.md")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
