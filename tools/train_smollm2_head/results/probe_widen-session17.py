"""Session 17 probe: (1) --widen-ff is function-preserving (logits of s16 vs widened, same sequences);
(2) training step time (batch_loss + backward + AdamW step) of n_ff 1536 vs widened heads on the same batches, 1 thread."""
import sys, time
from pathlib import Path
import numpy as np, torch
sys.path.insert(0, "tools/train_smollm2_head")
import gguf
from train import batch_loss, dequantized
from head_model import Head
from mtp_llm.smollm2 import source_path
torch.set_num_threads(1)
W = Path("build/smollm2_head")
E = torch.from_numpy(dequantized(gguf.GGUFReader(str(source_path())), "token_embd.weight"))
base = Head.from_state(torch.load(W / "ckpt-s16.pt", map_location="cpu", weights_only=False)["head"])
widths = [int(a) for a in sys.argv[2:]] or [3072]
heads = {1536: base} | {n: base.widened(n) for n in widths}
seqs = []
for k in (150, 200, 230):
    with np.load(W / "hidden" / f"shard-{k:05d}.npz") as z:
        off, tok, hid, npr = z["offsets"], z["tokens"], z["hidden"], z["n_prompt"]
    for j in range(len(off) - 1):
        seqs.append((tok[off[j]:off[j + 1]].astype(np.int64), hid[off[j]:off[j + 1]], int(npr[j])))
with torch.no_grad():
    x = torch.from_numpy(seqs[0][0])[None]; h = torch.from_numpy(seqs[0][1].astype(np.float32))[None]
    ref = base.steps(E[x], h, 2)
    for n in widths:
        out = heads[n].steps(E[x], h, 2)
        print(f"n_ff {n}: max |g diff| vs s16 (fp32, 2 steps) {max((a - b).abs().max().item() for a, b in zip(ref, out)):.2e}", flush=True)
ids = torch.from_numpy(np.load(W / "draft-ids-8192.npy").astype(np.int64))
remap = torch.full((E.shape[0],), -1, dtype=torch.long); remap[ids] = torch.arange(len(ids))
opts = {n: torch.optim.AdamW(hd.parameters(), lr=1e-9) for n, hd in heads.items()}
rng = np.random.default_rng(0)
tot = {n: [0.0, 0] for n in heads}
budget = float(sys.argv[1])
t_start = time.time(); r = 0
while time.time() - t_start < budget:
    b = [seqs[i] for i in rng.choice(len(seqs), 8, replace=False)]
    order = list(heads) if r % 2 == 0 else list(heads)[::-1]
    for n in order:
        t = time.time()
        loss, _, _, rows = batch_loss(heads[n], E, b, [1.0, 0.3], 320, (ids, remap), 0.5, "trunk")
        opts[n].zero_grad(set_to_none=True); loss.backward(); opts[n].step()
        if r > 0:
            tot[n][0] += time.time() - t; tot[n][1] += rows
    r += 1
rate = {n: tot[n][1] / max(tot[n][0], 1e-9) for n in heads}
print(f"rounds {r}: " + ", ".join(f"n_ff {n} {rate[n]:.0f} rows/s ({rate[n] / rate[1536]:.3f}x)" for n in heads), flush=True)
