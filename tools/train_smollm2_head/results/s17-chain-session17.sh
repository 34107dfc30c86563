#!/bin/bash
# session 17: A/B of head capacity at equal training compute: control (n_ff 1536, continues s16) vs --widen-ff,
# both a fresh schedule from ckpt-s16.pt with the s16 recipe at peak LR 3e-4, same seed (same batches);
# step counts scaled by the measured step-time ratio (probe-widen-s17.log), so that pauses do not bias it.
set -u
cd /work/main
W=build/smollm2_head
PY=.venv/bin/python
T=tools/train_smollm2_head
log() { echo "$(date -u +%H:%M:%S) $*" | tee -a $W/chain-s17.log; }
arm() {  # NAME STEPS EVAL_EVERY [extra args]
  local name=$1 steps=$2 ev=$3; shift 3
  log "arm $name: $steps steps, eval every $ev $*"
  nice -n 10 $PY $T/train.py --run $name --init $W/ckpt-s16.pt \
    --steps $steps --warmup 30 --lr 3e-4 --threads 1 --batch 8 --eval-every $ev --ckpt-every 20 \
    --soft 0.5 --hard trunk --heldout 60 --upweight 8550:1.5 --weight-decay 0.1 --step-weights 1.0,0.3 --val-draft 3 \
    --draft-ids $W/draft-ids-8192.npy --keep-best "$@" > $W/train-$name.out 2>&1
  log "arm $name ended rc=$?"
}
for a in ${ARMS:-c w3072}; do
  case $a in
    c) arm s17c 900 300 ;;
    w3072) arm s17w3072 707 236 --widen-ff 3072 ;;
    w4608) arm s17w4608 559 187 --widen-ff 4608 ;;
  esac
done
log "chain done"
