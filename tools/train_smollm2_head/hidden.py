"""The trunk's hidden states for every generated sequence.

For each line of ``WORK/gen.jsonl`` this computes the post-final-norm hidden state of every
position, the state llama's graph hands the MTP head (``t_h_nextn`` in patch 0005). ``--backend
llama`` takes it from llama.cpp itself (the source model through
``mtp_llm.parity.trunk_hidden_states``: exact, one prompt pass per sequence); ``--backend torch`` (default) from
trunk.py's fp32 twin on the dequantized weights, which
differs from llama.cpp's Q4_1/Q8_1 arithmetic by ~3.5% (relative) and gives the same argmax at
~0.98 of positions, about the noise between llama.cpp's own flash-attention settings. Writes shards
``WORK/hidden/shard-NNNNN.npz`` (tokens, n_prompt, offsets, hidden as float16) of ``--shard``
sequences each; a rerun continues after the last complete shard (resumable). With ``--follow``
it waits for gen_data.py to append more lines.

``--shard-ids SPEC`` computes only these shards, in this order (``A:B[:STEP]`` ranges, comma separated; shard K =
lines K*shard .. K*shard+shard-1, file ``shard-K.npz``), skipping those that exist, e.g. ``113:171,0:113:4`` = lines
5650.. first, then every 4th older shard. Every shard stores ``first_line`` (its first gen.jsonl line), which
train.py uses for ``--upweight`` when shards are missing. Do not mix a ``--shard-ids`` run with a plain resumable
run in one directory: the plain one counts files to find where to continue.

``--out-dir DIR`` writes the shards there instead of ``WORK/hidden/`` (e.g. another trunk's states of the same lines),
same names, same resumability. ``--layers 9,19`` (``--backend torch`` only, for train.py's experimental ``--fuse``)
also stores those layers' residual-stream outputs (0-based layer index, llama.cpp's ``l_out-IL``: before
output_norm) as ``layers`` [tokens, n_layers, 576] float16 and their indices as ``layer_ids`` in each shard; use it
with ``--out-dir``: the shards are larger, and train.py/val.py read ``layers`` only when asked.

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
from gen_data import DEFAULT_WORK, answers_path, hidden_dir  # noqa: E402


def load_lines(path: Path) -> list[dict]:
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                break  # a line being written
    return rows


def write_shard(path: Path, chunk: list[dict], hidden_of, first_line: int) -> int:
    """The states of these gen.jsonl lines (the first is line ``first_line``) as one shard; returns its tokens."""
    tokens, offsets, n_prompt, hidden = [], [0], [], []
    for a in range(0, len(chunk), 8):
        hidden.extend(hidden_of([r["tokens"] for r in chunk[a : a + 8]]))
    for r in chunk:
        tokens.extend(r["tokens"])
        offsets.append(len(tokens))
        n_prompt.append(r["n_prompt"])
    extra = {}
    if hidden and isinstance(hidden[0], tuple):  # --layers: (h, layers [T, L, E], layer ids)
        extra = {"layers": np.concatenate([lay for _, lay, _ in hidden]),
                 "layer_ids": np.array(hidden[0][2], np.int32)}
        hidden = [h for h, _, _ in hidden]
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, tokens=np.array(tokens, np.int32), offsets=np.array(offsets, np.int64),
             n_prompt=np.array(n_prompt, np.int32), hidden=np.concatenate(hidden),
             first_line=np.array(first_line, np.int64), **extra)
    tmp.replace(path)
    return len(tokens)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work-dir", type=Path, default=DEFAULT_WORK)
    ap.add_argument("--shard", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--follow", action="store_true", help="keep waiting for new lines of gen.jsonl")
    ap.add_argument("--backend", choices=("torch", "llama"), default="torch",
                    help="torch: trunk.py's fp32 twin, ~3.5x faster here, h within 3.5%% (relative) of "
                         "llama.cpp's and the same argmax at 0.98 of positions; llama: llama.cpp itself")
    ap.add_argument("--model", type=Path, default=None,
                    help="llama backend: take the states from this GGUF instead of the Q4_1 source (requant.py's "
                         "Q8_0 copy: prompt passes ~3x faster here, states within ~5%% of the source's, relative)")
    ap.add_argument("--set", choices=("train", "heldout"), default="train",
                    help="heldout: gen-heldout.jsonl into hidden-heldout/ (train.py's validation)")
    ap.add_argument("--shard-ids", type=str, default="",
                    help="only these shards, in this order: comma-separated A:B[:STEP] ranges of shard numbers")
    ap.add_argument("--out-dir", type=Path, default=None,
                    help="write the shards here instead of WORK/hidden/ (or hidden-heldout/)")
    ap.add_argument("--layers", type=str, default="",
                    help="torch backend: also store these layers' residual-stream outputs (0-based, comma separated)")
    args = ap.parse_args(argv)
    layer_ids = [int(v) for v in args.layers.split(",")] if args.layers else []
    if layer_ids and args.backend != "torch":
        ap.error("--layers needs --backend torch")

    from mtp_llm import Model
    from mtp_llm.parity import trunk_hidden_states
    from mtp_llm.smollm2 import source_path

    if args.backend == "torch":
        import torch

        from trunk import Trunk, load_weights

        torch.set_num_threads(args.threads)
        trunk = Trunk(load_weights(source_path()))

        def hidden_of(batch: list[list[int]]) -> list[np.ndarray]:
            t = max(len(s) for s in batch)
            toks = torch.zeros(len(batch), t, dtype=torch.long)
            for i, s in enumerate(batch):
                toks[i, : len(s)] = torch.tensor(s)
            keep = dict.fromkeys(layer_ids) if layer_ids else None
            with torch.inference_mode():  # right padding: causal attention never sees it
                h, _ = trunk.forward(toks, torch.arange(t)[None].expand(len(batch), t),
                                     torch.ones(len(batch), t, dtype=torch.bool), keep=keep)
            if keep is None:
                return [h[i, : len(s)].numpy().astype(np.float16) for i, s in enumerate(batch)]
            lay = torch.stack([keep[k] for k in layer_ids], dim=2)  # [B, T, L, E]
            return [(h[i, : len(s)].numpy().astype(np.float16), lay[i, : len(s)].numpy().astype(np.float16),
                     layer_ids) for i, s in enumerate(batch)]
    else:
        model = Model.load(args.model or source_path(), load_mtp=False)

        def hidden_of(batch: list[list[int]]) -> list[np.ndarray]:
            return [h.astype(np.float16) for h in trunk_hidden_states(model, batch, n_threads=args.threads)]
    hdir = args.out_dir or hidden_dir(args.work_dir, args.set)
    gen = answers_path(args.work_dir, args.set)
    hdir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    n_tok = 0
    if args.shard_ids:
        order = []
        for part in args.shard_ids.split(","):
            a, b, *st = (int(v) for v in part.split(":"))
            order.extend(k for k in range(a, b, st[0] if st else 1) if k not in order)
        rows = load_lines(gen)
        done = 0
        for k in order:
            path = hdir / f"shard-{k:05d}.npz"
            chunk = rows[k * args.shard : (k + 1) * args.shard]
            if path.exists() or len(chunk) < args.shard:
                continue
            n_tok += write_shard(path, chunk, hidden_of, k * args.shard)
            done += 1
            print(f"shard {k} (lines {k * args.shard}..{(k + 1) * args.shard - 1}; {done} this run), "
                  f"{n_tok / (time.time() - t0):.0f} tok/s", flush=True)
        print("finished", flush=True)
        return
    n_shards = len(list(hdir.glob("shard-*.npz")))
    pos = n_shards * args.shard
    while True:
        rows = load_lines(gen)
        if len(rows) - pos < args.shard:
            if not args.follow and len(rows) > pos and args.set == "heldout":
                args.shard = len(rows) - pos  # the last, short shard of a finished held-out set
            elif not args.follow:
                break
            else:
                time.sleep(30)
                continue
        chunk = rows[pos : pos + args.shard]
        n_tok += write_shard(hdir / f"shard-{n_shards:05d}.npz", chunk, hidden_of, pos)
        n_shards += 1
        pos += args.shard
        print(f"shard {n_shards} ({pos} sequences), {n_tok / (time.time() - t0):.0f} tok/s", flush=True)
    print("finished", flush=True)


if __name__ == "__main__":
    main()
