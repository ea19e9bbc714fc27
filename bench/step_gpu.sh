#!/usr/bin/env bash
# One training step naive vs shared prefix on the lent H200 at the Qwen3-VL-8B shape (random weights, bf16):
# a 128-frame 512x512 video prompt (16,384 visual tokens, ~17k-token prompt), G = 8, 128 sampled tokens,
# 512-token completions in the log-prob pass and the update, micro-batches of 4, activation checkpointing
# of the prompt (and of the naive sequences). Prints the table with peak GPU memory per phase and, last,
# `step speedup: N.NNx`. About 3-4 minutes after the machine starts. With `--compare vision`: the same step with
# the vision tower frozen, its features recomputed in every pass vs cached (`lora.use_vision_features`).
#
# The device has transformers 5.17 (no `mm_encoder_outputs`, the vision path `easyvideor1.data` uses), so the
# wheels of this venv's transformers 5.24 and the versions it needs travel in `.whl/` (git-ignored; 19 MB):
#   pip download --no-deps --only-binary=:all: --platform manylinux2014_x86_64 --python-version 3.12 -d .whl \
#       transformers==5.24.0 tokenizers==0.23.3 huggingface_hub==1.33.0 safetensors==0.8.0 regex==2025.11.3
# Then one `run` call: command `bash bench/step_gpu.sh`, carry [".whl"], timeout_s 600.
source "$(dirname "$0")/gpu_env.sh"
OUT=${OUT:-/tmp/step_gpu}; mkdir -p "$OUT"
python bench/step.py --family qwen3_vl --size 8b --dtype bfloat16 --device cuda --frames 128 --res 512 \
    --G 8 --new-tokens 128 --completion-len 512 --chunk 4 --checkpoint --engine loop "$@" 2>&1 | tee "$OUT/step_gpu.txt"
