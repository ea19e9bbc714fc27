# Sourced by the bench/*_gpu.sh scripts: the device's Python with this project's transformers stack.
# The device has transformers 5.17 (no `mm_encoder_outputs`, which `easyvideor1.data` uses), so the wheels
# of this venv's versions travel in `.whl/` (git-ignored); see each script's header for the download line.
set -euo pipefail
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
pip install -q --no-deps --target /tmp/tf5 .whl/*.whl
export PYTHONPATH=/tmp/tf5:$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
