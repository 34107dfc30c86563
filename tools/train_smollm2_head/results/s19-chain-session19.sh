#!/bin/bash
# session 19 A/B: wait for s19-hidden.sh, then arm A (s16 head, final states only) and arm B (fused: + layers 4,14,24),
# equal steps, same seed/batches, then validation. Every job one thread under nice -n 10, one at a time.
cd /work/main
H=build/smollm2_head
R=tools/train_smollm2_head/results
PY=".venv/bin/python"
STEPS=${STEPS:-600}
while kill -0 $(cat $H/s19-hidden.pid) 2>/dev/null; do
  # session 19: the lead's pauses stretched the states; stop after the first pass (every 10th shard, all 3 blocks)
  if [ -f $H/hidden-fuse/shard-00230.npz ]; then kill 30578; fi
  sleep 15; done
echo "hidden done $(date -u +%T)"
common="--init $H/ckpt-s16.pt --steps $STEPS --warmup 30 --lr 3e-4 --threads 1 --batch 8 --eval-every $STEPS \
 --ckpt-every 20 --soft 0.5 --hard trunk --heldout 60 --upweight 8550:1.5 --weight-decay 0.1 --step-weights 1.0,0.3 \
 --val-draft 3 --draft-ids $H/draft-ids-8192.npy --hidden-dirs $H/hidden-fuse --heldout-dir $H/hidden-heldout-fuse \
 --reload-every 1000000"
# the arms alternate in segments of SEG steps (--stop-at; resume = same command), so they stay at equal steps
SEG=${SEG:-100}
for ((k=SEG; k<=STEPS; k+=SEG)); do
  echo "arm A to $k start $(date -u +%T)"
  nice -n 10 $PY tools/train_smollm2_head/train.py --run s19a $common --log-cpu --stop-at $k >> $H/train-s19a.out 2>&1
  echo "arm B to $k start $(date -u +%T)"
  nice -n 10 $PY tools/train_smollm2_head/train.py --run s19b $common --log-cpu --stop-at $k --fuse 4,14,24 >> $H/train-s19b.out 2>&1
done
echo "arms done $(date -u +%T)"
ids="--draft-ids $H/draft-ids-8192.npy"
for c in s16 s19a s19b; do
  [ $c = s16 ] && nice -n 10 $PY tools/train_smollm2_head/val.py --ckpt $H/ckpt-$c.pt $ids --hidden-dir $H/hidden-heldout-fuse \
      > $R/val-session19-$c-torchheldout-trim8192.json
  echo "val $c $(date -u +%T)"
  nice -n 10 $PY tools/train_smollm2_head/diagnose.py --ckpt $H/ckpt-$c.pt $ids --hidden-dir $H/hidden-heldout-fuse \
      > $R/diag-session19-$c-torchheldout.json
  echo "diag $c $(date -u +%T)"
done
nice -n 10 $PY tools/train_smollm2_head/val.py --ckpt $H/ckpt-s19a.pt $ids > $R/val-session19-s19a-trim8192.json
echo "val s19a llama-heldout $(date -u +%T)"
nice -n 10 $PY tools/train_smollm2_head/val.py --ckpt $H/ckpt-s19b.pt $ids --layers-dir $H/hidden-heldout-fuse \
    > $R/val-session19-s19b-llamafinal-torchlayers-trim8192.json
echo "val s19b mixed $(date -u +%T)"
echo "done $(date -u +%T)"
