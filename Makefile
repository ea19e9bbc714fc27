# The README's two commands: `make demo` (the main job) and `make test` (every test).
# Both build the virtualenv on first use. On this project's machines torch and torchvision come
# from the local wheel mirror; elsewhere pick a build with e.g.
#   make test TORCH="torch torchvision --index-url https://download.pytorch.org/whl/cpu"
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.14.1 torchvision==0.29.1
BIN := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PYTHONUNBUFFERED := 1

.PHONY: demo test install vllm-venv test-vllm

install: $(VENV)/.installed

$(VENV)/.installed: setup.py settings.ini
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

# The main job on its embedded default (configs/tiny-cpu.yaml): synthetic suite + training on CPU.
demo: install
	$(BIN)/python -m easyvideor1.train

# Every test: package in sync with the notebooks, notebooks clean, notebook lessons, pytest.
test: install
	@set -e; \
	sums() { cat easyvideor1/*.py nbs/*.ipynb | sha1sum; }; \
	before=$$(sums); $(BIN)/nbdev_export; \
	if [ "$$(sums)" != "$$before" ]; then echo "FAIL: easyvideor1/ did not match the notebooks; nbdev_export regenerated it: review and commit"; exit 1; fi; \
	$(BIN)/nbdev_clean; \
	if [ "$$(sums)" != "$$before" ]; then echo "FAIL: notebooks were not clean; nbdev_clean rewrote them: review and commit"; exit 1; fi; \
	echo "package in sync with notebooks; notebooks clean"
	$(BIN)/nbdev_test --n_workers 2
	$(BIN)/python -m pytest -q tests
