"""Session 19: checks of the fused head (``head_model.Head.fused``) before the A/B.

1. A fused copy of a checkpoint (W = 0) computes exactly what the checkpoint computes: the max |diff| of the
   draft-step outputs g^1, g^2 on held-out sequences with their stored trunk layers (fp32 and bf16 autocast) is 0.
2. ``train.batch_loss`` gives the same losses for both, and the fused head's W gets a nonzero gradient.
3. ``load_shards`` without ``layers`` returns what it returned before (the final states only).

    .venv/bin/python tools/train_smollm2_head/check_fuse.py --ckpt build/smollm2_head/ckpt-s16.pt \\
        --shards build/smollm2_head/hidden-heldout-fuse --layers 9,19
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from head_model import Head  # noqa: E402
from train import batch_loss, dequantized, load_shards, split_hidden  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", type=Path, required=True)
    ap.add_argument("--shards", type=Path, required=True)
    ap.add_argument("--layers", type=str, default="9,19")
    ap.add_argument("--n", type=int, default=8, help="sequences")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    import gguf

    from mtp_llm.smollm2 import source_path

    E = torch.from_numpy(dequantized(gguf.GGUFReader(str(source_path())), "token_embd.weight"))
    layers = [int(v) for v in args.layers.split(",")]
    base = Head.from_state(torch.load(args.ckpt, map_location="cpu", weights_only=False)["head"])
    fused = base.fused(len(layers))
    plain = load_shards(args.shards)[: args.n]
    withl = load_shards(args.shards, layers=layers)[: args.n]
    out: dict = {"ckpt": str(args.ckpt), "layers": layers, "sequences": len(plain)}
    out["load_plain_is_final_states"] = all(
        np.array_equal(a[1], b[1][:, : a[1].shape[1]]) and b[1].shape[1] == a[1].shape[1] * (1 + len(layers))
        for a, b in zip(plain, withl))
    diffs = {"fp32": 0.0, "bf16": 0.0}
    with torch.no_grad():
        for (toks, hid, _), (_, hidl, _) in zip(plain, withl):
            x = torch.from_numpy(toks)[None]
            h = torch.from_numpy(hid.astype(np.float32))[None]
            hf, extra = split_hidden(torch.from_numpy(hidl.astype(np.float32))[None], E.shape[1])
            assert torch.equal(h, hf)
            for mode in diffs:
                ctx = torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "bf16")
                with ctx:
                    ga = base.steps(E[x], h, 2)
                    gb = fused.steps(E[x], hf, 2, extra)
                diffs[mode] = max(diffs[mode], *(float((a.float() - b.float()).abs().max()) for a, b in zip(ga, gb)))
    out["max_abs_diff_g"] = diffs
    la = batch_loss(base, E, plain, [1.0, 0.3], 320, soft=0.5, hard="trunk")
    lb = batch_loss(fused, E, withl, [1.0, 0.3], 320, soft=0.5, hard="trunk")
    out["losses_base"], out["losses_fused"] = la[1], lb[1]
    lb[0].backward()
    out["grad_norm_W"] = float(fused.w(Head.FUSE).grad.norm())
    out["param_count"] = {"base": sum(p.numel() for p in base.parameters()),
                          "fused": sum(p.numel() for p in fused.parameters())}
    print(json.dumps(out))
    assert out["load_plain_is_final_states"] and diffs["fp32"] == 0.0 and diffs["bf16"] == 0.0
    assert la[1] == lb[1] and out["grad_norm_W"] > 0


if __name__ == "__main__":
    main()
