#!/bin/bash
# session 18 (helper-13): is the Q8_0-vs-Q4_1 trunk mismatch material? 1. Q4_1 source states (hidden.py without
# --model) of 6 existing shards into WORK/hidden-q41/, diagnose.py --alt-shards against their Q8_0 states;
# 2. more Q4_1 shards (newest templates first, spread) until HIDDEN_END (killed by hand if the mismatch is small).
set -u
cd /work/main
W=build/smollm2_head
PY=.venv/bin/python
T=tools/train_smollm2_head
log() { echo "$(date -u +%H:%M:%S) $*" | tee -a $W/chain-s18.log; }
log "chain started, waiting for build/quiet/s18/log.txt 'done'"
until grep -q 'done$' build/quiet/s18/log.txt 2>/dev/null; do sleep 60; done
log "quiet loop done: $(tail -1 build/quiet/s18/log.txt)"
M=10:11,60:61,130:131,170:171,205:206,239:240
nice -n 10 $PY $T/hidden.py --backend llama --shard 50 --threads 1 --out-dir $W/hidden-q41 --shard-ids $M \
    > $W/hidden-q41-measure.log 2>&1
log "hidden (measure) rc=$? $(tail -2 $W/hidden-q41-measure.log | tr '\n' ' ')"
S=""; A=""
for k in 00010 00060 00130 00170 00205 00239; do S="$S $W/hidden-q41/shard-$k.npz"; A="$A $W/hidden/shard-$k.npz"; done
nice -n 10 $PY $T/diagnose.py --ckpt $W/ckpt-s16.pt --draft-ids $W/draft-ids-8192.npy --shards $S --alt-shards $A \
    --limit 300 > $W/diag-s18-q41-vs-q80.json 2> $W/diag-s18.err
log "diagnose rc=$? $(cut -c1-300 $W/diag-s18-q41-vs-q80.json)"
END=$(date -u -d "${HIDDEN_END:-08:20}" +%s); NOW=$(date -u +%s)
if [ $((END - NOW)) -gt 120 ]; then
  O=172:173,175:176,113:114,0:1,178:179,181:182,117:118,8:9,184:185,187:188,121:122,16:17,190:191,193:194,125:126,24:25,196:197,199:200,129:130,32:33,202:203,208:209,133:134,40:41,211:212,214:215,137:138,48:49,217:218,220:221,141:142,56:57,223:224,226:227,145:146,64:65,229:230,232:233,149:150,72:73,235:236,238:239,153:154,80:81,157:158,88:89,161:162,96:97,165:166,104:105,169:170,112:113
  log "hidden (more) for $((END - NOW)) s"
  timeout $((END - NOW)) nice -n 10 $PY $T/hidden.py --backend llama --shard 50 --threads 1 --out-dir $W/hidden-q41 \
      --shard-ids $O > $W/hidden-q41-more.log 2>&1
  log "hidden (more) rc=$? $(ls $W/hidden-q41/shard-*.npz | wc -l) Q4_1 shards; $(tail -1 $W/hidden-q41-more.log)"
fi
log "chain done"
