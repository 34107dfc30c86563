"""Session 16 probe: training step speed with bf16 autocast vs fp32 on this CPU (1 thread), same batches."""
import sys, time
from pathlib import Path
import numpy as np, torch
sys.path.insert(0, "tools/train_smollm2_head")
import gguf
from train import batch_loss, dequantized, initial_tensors, load_shards
from head_model import Head
from mtp_llm.smollm2 import source_path
torch.set_num_threads(1)
W = Path("build/smollm2_head")
src = source_path()
E = torch.from_numpy(dequantized(gguf.GGUFReader(str(src)), "token_embd.weight"))
head = Head(initial_tensors(src))
head.load_state_dict(torch.load(W / "ckpt-s15.pt", map_location="cpu", weights_only=False)["head"])
tmp = W / "probe-shards"
seqs = []
for k in (113, 130, 150, 160):
    with np.load(W / "hidden" / f"shard-{k:05d}.npz") as z:
        off, tok, hid, npr = z["offsets"], z["tokens"], z["hidden"], z["n_prompt"]
    for j in range(len(off) - 1):
        seqs.append((tok[off[j]:off[j + 1]].astype(np.int64), hid[off[j]:off[j + 1]], int(npr[j])))
ids = torch.from_numpy(np.load(W / "draft-ids-8192.npy").astype(np.int64))
remap = torch.full((E.shape[0],), -1, dtype=torch.long); remap[ids] = torch.arange(len(ids))
rng = np.random.default_rng(0)
tot = {False: [0.0, 0], True: [0.0, 0]}
budget = float(sys.argv[1]) if len(sys.argv) > 1 else 70
t_start = time.time()
r = 0
while time.time() - t_start < budget:
    batches = [[seqs[i] for i in rng.choice(len(seqs), 8, replace=False)] for _ in range(2)]
    for fp32 in ((False, True) if r % 2 == 0 else (True, False)):
        for b in batches:
            t = time.time()
            loss, _, _, rows = batch_loss(head, E, b, [1.0, 0.3], 320, (ids, remap), 0.5, "trunk", fp32)
            loss.backward()
            head.zero_grad(set_to_none=True)
            if r > 0:
                tot[fp32][0] += time.time() - t; tot[fp32][1] += rows
    r += 1
bf, fp = tot[False][1] / max(tot[False][0], 1e-9), tot[True][1] / max(tot[True][0], 1e-9)
print(f"rounds {r} bf16 {bf:.0f} rows/s fp32 {fp:.0f} rows/s ratio fp32/bf16 {fp / bf:.2f}", flush=True)
print("FP32" if fp > 1.05 * bf else "BF16")
