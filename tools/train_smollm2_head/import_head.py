"""A head GGUF back into a checkpoint that train.py ``--init``, val.py and export.py ``--ckpt`` read.

Dequantizes the head tensors of a head file (``mtp_llm.smollm2.read_head``: Q8_0 matrices, f32 norms)
into ``{"head": Head.state_dict(), "step": 0, ...}``; with ``--draft-ids-out`` also saves the file's
trimmed draft vocabulary (its ``d2t``, ``mtp_llm.smollm2.read_draft_ids``) as the int64 .npy that
train.py / val.py / evaluate.py ``--draft-ids`` take. So training can continue from the shipped head on a machine
without its checkpoint; exporting the imported checkpoint with ``--draft-ids`` gives the shipped file byte for byte.

    .venv/bin/python tools/train_smollm2_head/import_head.py --head mtp_llm/models/smollm2-135m-mtp-head.gguf \\
        --out build/smollm2_head/ckpt-shipped.pt --draft-ids-out build/smollm2_head/draft-ids-8192.npy
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from head_model import Head  # noqa: E402


def head_tensors(path: Path) -> dict[str, np.ndarray]:
    import gguf

    from mtp_llm.smollm2 import read_head

    return {name: gguf.quants.dequantize(np.asarray(data), qtype).astype(np.float32)
            for name, (qtype, data) in read_head(path).items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--head", type=Path, default=Path("mtp_llm/models/smollm2-135m-mtp-head.gguf"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--draft-ids-out", type=Path, default=None)
    args = ap.parse_args(argv)

    from mtp_llm.smollm2 import read_draft_ids

    head = Head(head_tensors(args.head))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"head": head.state_dict(), "step": 0, "args": {"imported_from": str(args.head)}, "elapsed": 0.0},
               args.out)
    print(f"wrote {args.out} from {args.head}")
    if args.draft_ids_out is not None:
        ids = read_draft_ids(args.head)
        if ids is None:
            raise SystemExit(f"{args.head} has no d2t (a full head)")
        np.save(args.draft_ids_out, np.sort(ids.astype(np.int64)))
        print(f"wrote {args.draft_ids_out} ({len(ids)} ids)")


if __name__ == "__main__":
    main()
