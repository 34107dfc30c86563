#!/bin/bash
# session 19, second half of the A/B chain (s19-chain.sh was stopped after starting arm B's first segment, to put a
# validation at step 200 of both arms before the last segment): wait for that segment, then A/B to 200, validation,
# A/B to 300 (train.py's own VAL at 300), diagnose.
cd /work/main
H=build/smollm2_head
R=tools/train_smollm2_head/results
PY=".venv/bin/python"
STEPS=300
while kill -0 19736 2>/dev/null; do sleep 10; done
echo "arm B to 100 done $(date -u +%T)"
common="--init $H/ckpt-s16.pt --steps $STEPS --warmup 30 --lr 3e-4 --threads 1 --batch 8 --eval-every $STEPS \
 --ckpt-every 20 --soft 0.5 --hard trunk --heldout 60 --upweight 8550:1.5 --weight-decay 0.1 --step-weights 1.0,0.3 \
 --val-draft 3 --draft-ids $H/draft-ids-8192.npy --hidden-dirs $H/hidden-fuse --heldout-dir $H/hidden-heldout-fuse \
 --reload-every 1000000"
ids="--draft-ids $H/draft-ids-8192.npy"
seg() {  # arm A then arm B to step $1
  echo "arm A to $1 start $(date -u +%T)"
  nice -n 10 $PY tools/train_smollm2_head/train.py --run s19a $common --log-cpu --stop-at $1 >> $H/train-s19a.out 2>&1
  echo "arm B to $1 start $(date -u +%T)"
  nice -n 10 $PY tools/train_smollm2_head/train.py --run s19b $common --log-cpu --stop-at $1 --fuse 4,14,24 >> $H/train-s19b.out 2>&1
}
seg 200
cp $H/ckpt-s19a.pt $H/ckpt-s19a-200.pt; cp $H/ckpt-s19b.pt $H/ckpt-s19b-200.pt
for c in s16 s19a-200 s19b-200; do
  nice -n 10 $PY tools/train_smollm2_head/val.py --ckpt $H/ckpt-$c.pt $ids --hidden-dir $H/hidden-heldout-fuse \
      > $R/val-session19-$c-torchheldout-trim8192.json
  echo "val $c $(date -u +%T)"
done
for c in s19b-200 s19a-200; do
  nice -n 10 $PY tools/train_smollm2_head/diagnose.py --ckpt $H/ckpt-$c.pt $ids --hidden-dir $H/hidden-heldout-fuse \
      > $R/diag-session19-$c-torchheldout.json
  echo "diag $c $(date -u +%T)"
done
nice -n 10 $PY tools/train_smollm2_head/val.py --ckpt $H/ckpt-s19b-200.pt $ids --layers-dir $H/hidden-heldout-fuse \
    > $R/val-session19-s19b-200-llamafinal-torchlayers-trim8192.json
echo "val s19b-200 mixed $(date -u +%T)"
nice -n 10 $PY tools/train_smollm2_head/val.py --ckpt $H/ckpt-s19a-200.pt $ids > $R/val-session19-s19a-200-llamaheldout-trim8192.json
echo "val s19a-200 llama-heldout $(date -u +%T)"
nice -n 10 $PY tools/train_smollm2_head/diagnose.py --ckpt $H/ckpt-s16.pt $ids --hidden-dir $H/hidden-heldout-fuse \
    > $R/diag-session19-s16-torchheldout.json
echo "diag s16 $(date -u +%T)"
seg 300
echo "arms done $(date -u +%T)"
echo "done $(date -u +%T)"
