#!/usr/bin/env bash
# FSDP2 mixed precision on the lent H200, one rank (issue 37): step time and peak memory of the trainer's three
# dtype settings (fp32; a bf16 model; fp32 shards under bf16 compute) at the Qwen2.5-VL-3B shape (random weights),
# a 64-frame 448 x 448 video prompt (8,192 visual tokens), G = 4 completions of 256 tokens, micro-batches of 4,
# activation checkpointing. Prints `bench/fsdp_mp.py`'s table and writes it as JSON. One GPU makes no collective:
# the fp32 vs bf16 gradient reduction (NCCL reduce-scatter) needs two GPUs and shows in no number here.
#
# The device's transformers is too old: carry this venv's wheels in `.whl/` (git-ignored; see bench/step_gpu.sh).
# Then one `run` call: command `bash bench/fsdp_mp_gpu.sh`, carry [".whl"], timeout_s 420.
source "$(dirname "$0")/gpu_env.sh"
OUT=${OUT:-/tmp/fsdp_mp_gpu}; mkdir -p "$OUT"
python bench/fsdp_mp.py --device cuda --size 3b --frames 64 --res 448 --G 4 --new-tokens 256 --chunk 4 --checkpoint \
    --json "$OUT/fsdp_mp_gpu.json" "$@" 2>&1 | tee "$OUT/fsdp_mp_gpu.txt"
