#!/usr/bin/env bash
# The trainer's per-phase step time on the lent H200, with and without the frame cache (issue 8): a
# Qwen2.5-VL-3B-shaped model (random weights, bf16, HF engine, activation checkpointing), 64-frame
# 448 x 448 clips (32 s at 2 fps; 8,192 visual tokens each), 2 prompts x G = 4, 64 new tokens, 4 steps
# per run. Prints `bench/train_phases.py`'s table (and writes its numbers as JSON); record it in GPU.md and the
# issue's note. Extra arguments go to the bench (`--cache on`: the cached run only, half the device time).
#
# The device has transformers 5.17 (no `mm_encoder_outputs`, which `easyvideor1.data` uses) and no decord:
# carry the wheels of this venv's versions in `.whl/` (git-ignored), as for bench/step_gpu.sh, plus decord:
#   pip download --no-deps --only-binary=:all: --platform manylinux2014_x86_64 --python-version 3.12 -d .whl \
#       transformers==5.24.0 tokenizers==0.23.3 huggingface_hub==1.33.0 safetensors==0.8.0 regex==2025.11.3 decord==0.6.0
# Then one `run` call: command `bash bench/train_phases_gpu.sh`, carry [".whl"], timeout_s 600.
# Not yet run on a GPU (no device was lent to the session that wrote it); the same script runs on CPU with
# `python bench/train_phases.py` defaults.
source "$(dirname "$0")/gpu_env.sh"
OUT=${OUT:-/tmp/train_phases_gpu}; mkdir -p "$OUT"
python bench/train_phases.py --model qwen2_5_vl:3b --dtype bfloat16 --frames 64 --size 448 --steps 4 --prompts 2 --G 4 \
    --new-tokens 64 --checkpointing --workdir "$OUT/work" --json "$OUT/train_phases_gpu.json" "$@" 2>&1 \
    | tee "$OUT/train_phases_gpu.txt"
