#!/bin/bash
# session 19: torch twin states + intermediate layers of 48 train shards spread over gen.jsonl (every 5th shard)
cd /work/main
echo "start $(date -u +%T)"
nice -n 10 .venv/bin/python tools/train_smollm2_head/hidden.py --backend torch --shard 50 --threads 1 \
    --out-dir build/smollm2_head/hidden-fuse --layers 4,9,14,19,24 --shard-ids 0:240:10,5:240:10
echo "end $(date -u +%T)"
