"""Write the trained head (``WORK/ckpt.pt``) as the small GGUF the repo ships.

Matrices are stored as ``--type`` (q8_0 by default: 4.0 MB; f16: 8.0 MB), norm vectors as f32,
all as ``blk.30.*`` (``mtp_llm/smollm2.py`` ``HEAD_TENSORS``). Then checks through llama.cpp that
the converted model's head computes what PyTorch computes (``mtp_llm.parity.forward_with_head``
on a held-out sequence: max |logit difference|, argmax agreement).

    .venv/bin/python tools/train_smollm2_head/export.py --out mtp_llm/models/smollm2-135m-mtp-head.gguf

``--draft-ids FILE`` writes the file as the package ships it: with the trimmed draft vocabulary as
``d2t`` (``mtp_llm.smollm2.write_head(..., draft_ids=)``), and the check compares the logits of those ids only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_data import DEFAULT_WORK  # noqa: E402
from head_model import Head  # noqa: E402
from train import dequantized  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work-dir", type=Path, default=DEFAULT_WORK)
    ap.add_argument("--out", type=Path, default=Path("mtp_llm/models/smollm2-135m-mtp-head.gguf"))
    ap.add_argument("--type", choices=("q8_0", "f16"), default="q8_0")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ckpt", type=Path, default=None, help="checkpoint to export (default: WORK/ckpt.pt)")
    ap.add_argument("--draft-ids", type=Path, default=None,
                    help="int64 .npy of token ids: store them as the head's d2t (the shipped, trimmed head)")
    args = ap.parse_args(argv)
    keep = np.load(args.draft_ids).astype(np.int64) if args.draft_ids is not None else None
    torch.set_num_threads(args.threads)

    import gguf

    from mtp_llm.smollm2 import source_path, write_head

    source = source_path()
    ck = torch.load(args.ckpt or args.work_dir / "ckpt.pt", map_location="cpu", weights_only=False)
    # shaped as the checkpoint; only n_ff 1536 converts (smollm2.convert keeps the trunk's n_ff)
    head = Head.from_state(ck["head"])
    qtype = gguf.GGMLQuantizationType[args.type.upper()]
    stored = {}
    for name, arr in head.tensors().items():
        arr = arr.astype(np.float32)
        if arr.ndim == 1:
            stored[name] = (gguf.GGMLQuantizationType.F32, arr)
        elif qtype == gguf.GGMLQuantizationType.F16:
            stored[name] = (qtype, arr.astype(np.float16))
        else:
            stored[name] = (qtype, gguf.quants.quantize(arr, qtype))
    write_head(stored, args.out, draft_ids=keep)
    trim = f", d2t of {len(keep)} ids" if keep is not None else ""
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.2f} MB{trim}) from step {ck['step']}")

    # llama.cpp vs PyTorch on one sequence (the head as stored: dequantize what was written)
    from mtp_llm import Model
    from mtp_llm.parity import forward_with_head
    from mtp_llm.smollm2 import converted_path, read_head

    back = {k: gguf.quants.dequantize(np.asarray(d), q).astype(np.float32) for k, (q, d) in read_head(args.out).items()}
    ref = Head(back)
    model = Model.load(converted_path(args.out), load_mtp=True)
    text = model.apply_chat_template([("user", "Could you tell me about the moon?")])
    toks = model.tokenize(text) + model.tokenize("The moon is Earth's only natural satellite.", add_special=False)
    out = forward_with_head(model, toks, n_threads=args.threads)
    E = torch.from_numpy(dequantized(gguf.GGUFReader(str(source)), "token_embd.weight"))
    with torch.no_grad():
        g = ref.steps(E[torch.tensor([toks])], torch.from_numpy(out["trunk_hidden"])[None], 1)[0][0]
        logits = (g @ E.t()).numpy()
    theirs = out["head_logits"]
    if keep is not None:  # a trimmed head scores only its d2t ids (the others are -inf)
        logits, theirs = logits[:, keep], theirs[:, keep]
    diff = np.abs(logits - theirs).max()
    agree = float((logits.argmax(-1) == theirs.argmax(-1)).mean())
    print(f"llama.cpp vs PyTorch head logits on {len(toks)} tokens: max |diff| {diff:.4f}, argmax agreement {agree:.3f}")


if __name__ == "__main__":
    main()
