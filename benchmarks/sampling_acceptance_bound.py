"""What exact speculative sampling could accept on the built-in model, against what drafting the head's argmax does.

At temperature T, the target samples from p = softmax(logits / T). A draft equal to the head's argmax is accepted
with probability p(argmax q) (what verification by equality gives); a draft sampled from the head's
q = softmax(head_logits / T_head) and verified by rejection (accept with min(1, p/q), resample the residual) is
accepted with probability sum(min(p, q)), and the output still follows p. Both are computed from llama.cpp's own
logits (``mtp_llm.parity.forward_with_head``) along sampled answers of the built-in model, over a range of T_head,
for the first draft position (the target's logits and the head's at the same row both predict the next token).

    .venv/bin/python benchmarks/sampling_acceptance_bound.py [--temps 0.8,1.0] [--head-temps 0.5,...,1.1] \\
        [--tokens 128] [--out DIR]

Plain softmax at each temperature (no top-k / top-p); six chat questions, one sampled answer each (seeded).
Writes DIR/sampling_acceptance_bound.{md,json}.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from mtp_llm import MTP, Model, TokenEvent
from mtp_llm.bench.common import CHAT_QUESTIONS, cpu_name
from mtp_llm.parity import forward_with_head

QUESTIONS = [*CHAT_QUESTIONS, "Write a short poem about autumn.", "Give me three tips for studying."][:6]


def softmax(logits: np.ndarray, temp: float) -> np.ndarray:
    scaled = logits / temp
    scaled -= scaled.max(-1, keepdims=True)
    weights = np.exp(scaled)
    return weights / weights.sum(-1, keepdims=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--temps", default="0.8,1.0")
    parser.add_argument("--head-temps", default="0.5,0.6,0.7,0.8,0.9,1.0,1.1")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    temps = [float(t) for t in args.temps.split(",")]
    head_temps = [float(t) for t in args.head_temps.split(",")]

    model = Model.load_default()
    session = MTP(model, n_threads=args.threads)
    rows = []
    for temp in temps:
        p_rows: list[np.ndarray] = []
        q_logits: list[np.ndarray] = []
        for seed, question in enumerate(QUESTIONS, start=1):
            prompt = model.apply_chat_template([("user", question)])
            tokens = session.tokenize_prompt(prompt)
            answer = [
                e.id
                for e in session.stream_events(prompt, temp=temp, seed=seed, max_tokens=args.tokens)
                if isinstance(e, TokenEvent)
            ]
            out = forward_with_head(model, tokens + answer, n_threads=args.threads)
            span = slice(len(tokens) - 1, len(tokens) + len(answer) - 2)  # rows whose next token is an answer token
            p_rows.append(softmax(out["trunk_logits"][span].astype(np.float64), temp))
            q_logits.append(out["head_logits"][span].astype(np.float64))
        p = np.concatenate(p_rows)
        head = np.concatenate(q_logits)
        argmax_accept = float(np.take_along_axis(p, head.argmax(-1)[:, None], -1).mean())
        for head_temp in head_temps:
            q = softmax(head, head_temp)
            rows.append(
                {
                    "temp": temp,
                    "head_temp": head_temp,
                    "positions": int(p.shape[0]),
                    "accept_argmax": argmax_accept,
                    "accept_rejection": float(np.minimum(p, q).sum(-1).mean()),
                }
            )

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sampling_acceptance_bound.json").write_text(json.dumps({"cpu": cpu_name(), "rows": rows}, indent=1))
    lines = [
        f"First-draft acceptance on the built-in model ({rows[0]['positions']} positions per temperature; {cpu_name()};",
        "`.venv/bin/python benchmarks/sampling_acceptance_bound.py`).",
        "",
        "| T | T_head | argmax draft, p(argmax q) | sampled draft + rejection, sum min(p, q) | ratio |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        ratio = row["accept_rejection"] / row["accept_argmax"]
        lines.append(
            f"| {row['temp']} | {row['head_temp']} | {row['accept_argmax']:.3f} | {row['accept_rejection']:.3f} | {ratio:.2f} |"
        )
    (args.out / "sampling_acceptance_bound.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
