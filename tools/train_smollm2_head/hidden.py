"""The trunk's hidden states for every generated sequence, computed by llama.cpp itself.

For each line of ``WORK/gen.jsonl`` this runs the converted model (the source plus the initial,
untrained head: its trunk is the source's, bit for bit) through ``mtp_llm.parity.forward_with_head``
and keeps ``trunk_hidden``: the post-final-norm state llama's graph hands the MTP head
(``t_h_nextn`` in patch 0005), i.e. exactly what the head sees at inference time (no PyTorch
re-implementation of the trunk, so nothing to drift). Writes shards
``WORK/hidden/shard-NNNNN.npz`` (tokens, n_prompt, offsets, hidden as float16) of ``--shard``
sequences each; a rerun continues after the last complete shard (resumable). With ``--follow``
it waits for gen_data.py to append more lines.

    nice -n 19 .venv/bin/python tools/train_smollm2_head/hidden.py --follow
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_data import DEFAULT_WORK  # noqa: E402


def load_lines(path: Path) -> list[dict]:
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                break  # a line being written
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work-dir", type=Path, default=DEFAULT_WORK)
    ap.add_argument("--shard", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--follow", action="store_true", help="keep waiting for new lines of gen.jsonl")
    args = ap.parse_args(argv)

    from mtp_llm import Model
    from mtp_llm.parity import forward_with_head
    from mtp_llm.smollm2 import converted_path

    model = Model.load(converted_path(None), load_mtp=True)
    hdir = args.work_dir / "hidden"
    hdir.mkdir(parents=True, exist_ok=True)
    n_shards = len(list(hdir.glob("shard-*.npz")))
    pos = n_shards * args.shard
    t0 = time.time()
    n_tok = 0
    while True:
        rows = load_lines(args.work_dir / "gen.jsonl")
        if len(rows) - pos < args.shard:
            if not args.follow:
                break
            time.sleep(30)
            continue
        chunk = rows[pos : pos + args.shard]
        tokens, offsets, n_prompt, hidden = [], [0], [], []
        for r in chunk:
            out = forward_with_head(model, r["tokens"], n_threads=args.threads)
            hidden.append(out["trunk_hidden"].astype(np.float16))
            tokens.extend(r["tokens"])
            offsets.append(len(tokens))
            n_prompt.append(r["n_prompt"])
            n_tok += len(r["tokens"])
        path = hdir / f"shard-{n_shards:05d}.npz"
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, tokens=np.array(tokens, np.int32), offsets=np.array(offsets, np.int64),
                 n_prompt=np.array(n_prompt, np.int32), hidden=np.concatenate(hidden))
        tmp.replace(path)
        n_shards += 1
        pos += args.shard
        print(f"shard {n_shards} ({pos} sequences), {n_tok / (time.time() - t0):.0f} tok/s", flush=True)
    print("finished", flush=True)


if __name__ == "__main__":
    main()
