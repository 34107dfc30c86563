"""Acceptance of a head through the engine itself, on held-out chat prompts (greedy).

For each held-out prompt (templates and subjects never trained on) and each n_draft, runs an MTP
session on the converted model and a plain session, checks the outputs are identical token for
token (lossless), and reports acceptance at n_draft=1, per-position acceptance and tokens committed
per verify pass (``mean_accepted_length``) at each n_draft.

    nice -n 19 .venv/bin/python tools/train_smollm2_head/evaluate.py --head mtp_llm/models/smollm2-135m-mtp-head.gguf
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from prompts import heldout_prompts  # noqa: E402


def ids(session, prompt, n: int) -> list[int]:
    return [e.id for e in session.stream_events(prompt, max_tokens=n, temp=0) if type(e).__name__ == "TokenEvent"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--head", type=Path, default=None, help="head GGUF (default: the initial, untrained head)")
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--n-draft", type=str, default="1,3")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--draft-ids", type=Path, default=None,
                    help="int64 .npy of sorted token ids: evaluate the head trimmed to them (the converted model "
                         "copied by mtp_llm.gguf.draft_vocab.trim_embedded_head into --work-dir; its LM matrix "
                         "scores only these ids), as the built-in model ships it")
    ap.add_argument("--work-dir", type=Path, default=Path(__file__).resolve().parents[2] / "build" / "smollm2_head")
    args = ap.parse_args(argv)

    from mtp_llm import MTP, Model
    from mtp_llm.smollm2 import converted_path

    path = converted_path(args.head)
    if args.draft_ids is not None:
        import numpy as np

        from mtp_llm.gguf.draft_vocab import trim_embedded_head

        keep = np.load(args.draft_ids).astype(np.int64)
        trimmed = args.work_dir / f"{path.stem}-trim{len(keep)}.gguf"
        if not trimmed.exists():
            trim_embedded_head(path, trimmed, keep)
        path = trimmed
    model = Model.load(path, load_mtp=True)
    prompts = [model.apply_chat_template([("user", p)]) for p in heldout_prompts(args.prompts)]
    # flash attention on: with it off, a multi-row verify pass rounds attention differently from a one-row pass,
    # so greedy MTP on this quantized model can part from plain decoding once drafts are accepted
    plain = MTP(model, draft_model=None, n_draft=0, n_threads=args.threads, flash_attn=True)
    ref = [ids(plain, p, args.max_tokens) for p in prompts]
    plain.close()
    result: dict = {"head": str(args.head), "model": str(path),
                    "draft_ids": str(args.draft_ids) if args.draft_ids else None, "prompts": len(prompts), "max_tokens": args.max_tokens, "n_draft": {}}
    for nd in (int(v) for v in args.n_draft.split(",")):
        s = MTP(model, n_draft=nd, n_threads=args.threads, flash_attn=True)
        same = sum(ids(s, p, args.max_tokens) == r for p, r in zip(prompts, ref))
        st = s.stats()
        result["n_draft"][str(nd)] = {
            "acceptance_rate": round(st.acceptance_rate, 4),
            "per_position": [round(a, 4) for a in st.acceptance_rate_per_position],
            "tokens_per_verify": round(st.mean_accepted_length, 4),
            "drafts": st.drafts_generated,
            "identical_to_plain": f"{same}/{len(prompts)}",
        }
        s.close()
        print(json.dumps(result["n_draft"][str(nd)]), flush=True)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
