#!/bin/bash
# session 18 (helper-13): the mismatch diagnostic again with per-file and differing-row figures, then the same
# comparison on the held-out validation answers (Q4_1 source text): their Q8_0 states vs the Q4_1 ones.
set -u
cd /work/main
W=build/smollm2_head
PY=.venv/bin/python
T=tools/train_smollm2_head
R=$T/results
log() { echo "$(date -u +%H:%M:%S) $*" | tee -a $W/chain-s18.log; }
log "diag chain started"
S=""; A=""
for k in 00010 00060 00130 00170 00205 00239; do S="$S $W/hidden-q41/shard-$k.npz"; A="$A $W/hidden/shard-$k.npz"; done
nice -n 10 $PY $T/diagnose.py --ckpt $W/ckpt-s16.pt --draft-ids $W/draft-ids-8192.npy --shards $S --alt-shards $A \
    --limit 300 > $R/diag-session18-train-q41-vs-q80.json 2>> $W/diag-s18.err
log "diagnose (train shards) rc=$?"
nice -n 10 $PY $T/hidden.py --backend llama --set heldout --threads 1 --out-dir $W/hidden-heldout-q80 \
    --model $W/SmolLM2-135M-Instruct.Q8_0.gguf > $W/hidden-heldout-q80.log 2>&1
log "hidden (held-out, Q8_0) rc=$? $(tail -2 $W/hidden-heldout-q80.log | tr '\n' ' ')"
nice -n 10 $PY $T/diagnose.py --ckpt $W/ckpt-s16.pt --draft-ids $W/draft-ids-8192.npy \
    --shards $W/hidden-heldout/shard-00000.npz $W/hidden-heldout/shard-00001.npz \
    --alt-shards $W/hidden-heldout-q80/shard-00000.npz $W/hidden-heldout-q80/shard-00001.npz \
    --limit 60 > $R/diag-session18-heldout-q41-vs-q80.json 2>> $W/diag-s18.err
log "diagnose (held-out) rc=$?"
log "diag chain done"
