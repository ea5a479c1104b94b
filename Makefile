# Two commands for users (README): `make run` and `make test`. Both install first.
# The environment is .venv, built from the hash-pinned requirements.lock.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
# all of this machine's cores unless told otherwise (make run CORES=4)
CORES  ?= $(shell nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2)
# The lock pins the CPU build torch==2.13.0+cpu. Machines of the CI kind have that wheel in pip's
# find-links folder; elsewhere add PyTorch's CPU index:
#   make run PIP_EXTRA="--extra-index-url https://download.pytorch.org/whl/cpu"
PIP_EXTRA ?=
# GPU clusters: the same pins with PyPI's CUDA build of torch (and its nvidia-* wheels):
#   make run LOCK=requirements-cuda.lock
LOCK ?= requirements.lock

.PHONY: install run run-full test report lock clean-results bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(LOCK) pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --require-hashes $(PIP_EXTRA) -r $(LOCK)
	$(BIN)/python -m pip install --no-deps -e .
	touch $@

install: $(VENV)/.installed

run: install
	$(BIN)/snakemake --cores $(CORES) --rerun-incomplete
	$(BIN)/sinkscope usage

# The full offline scale (about 3-4 hours on 2 cores): config/offline-full.yaml layered on config.yaml
run-full: install
	$(BIN)/snakemake --cores $(CORES) --rerun-incomplete --configfile config.yaml config/offline-full.yaml
	$(BIN)/sinkscope usage

test: install
	$(BIN)/python -m pytest

report: install
	$(BIN)/snakemake --report report.html

# Benchmarks (bench/run.py; needs the default run's prepared models and corpora): regenerates
# BENCHMARKS.md and bench/results.json. BENCH_ARGS=--quick for a one-minute smoke run.
BENCH_ARGS ?=
bench: install
	$(BIN)/python bench/run.py $(BENCH_ARGS)

# Regenerate both locks from pyproject.toml: the CPU one (torch==2.13.0+cpu, from pip's local wheel
# folder) and the CUDA one (torch==2.13.0 from PyPI); tests/test_reproducibility.py checks that
# they pin the same versions of everything else.
lock: install
	$(BIN)/python -m pip install --quiet uv
	$(BIN)/uv pip compile pyproject.toml --extra test --python-version 3.11 \
	  --python-platform x86_64-manylinux_2_28 --generate-hashes --no-header \
	  --constraint envs/torch-cpu.txt --find-links /opt/wheels -o requirements.lock
	$(BIN)/uv pip compile pyproject.toml --extra test --python-version 3.11 \
	  --python-platform x86_64-manylinux_2_28 --generate-hashes --no-header \
	  --constraint envs/torch-cuda.txt -o requirements-cuda.lock
