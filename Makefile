# paper_repro: `make reproduce` regenerates every table and figure; `make test` runs the CPU suite.
SHELL := /bin/bash
.DEFAULT_GOAL := help
export PYTHONPATH := $(CURDIR)
export PYTHONUNBUFFERED := 1
export MPLBACKEND := Agg

DEPS_CHECK := import torch, triton, numpy, pandas, matplotlib, sympy, pytest, papermill, tqdm, nbformat, ipykernel
HAVE_DEPS := $(shell python3 -c "$(DEPS_CHECK)" >/dev/null 2>&1 && echo yes)
HAVE_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo yes)
# suites are split over every visible GPU (one process each); GPUS=1 keeps them on one
GPUS ?= $(if $(HAVE_GPU),$(shell nvidia-smi -L | wc -l),1)
VENV := .venv
ifeq ($(HAVE_DEPS),yes)
PY := python3
PY_DEP :=
else
PY := $(VENV)/bin/python
PY_DEP := $(VENV)/.installed
endif
# CPU machines get a CPU torch; the newest triton (3.6's interpreter breaks on numpy >= 2.4).
TORCH_PIN := $(if $(HAVE_GPU),torch,torch==2.13.0)
TRITON_PIN := $(if $(HAVE_GPU),triton,triton==3.9.0)
BENCH_ARGS ?=
QUICK ?=
NOTEBOOK_KERNEL ?= python3

.PHONY: help setup test test-gpu proofs bench figures reproduce claims clean

help:
	@echo "make reproduce   proofs + benchmarks (GPU only) + every figure and table + claims report"
	@echo "make test        CPU test suite (Triton kernels through the interpreter, torch path, proofs)"
	@echo "make proofs      sympy derivations and boundary proofs"
	@echo "make bench       GPU benchmark suites -> data/<gpu>/ (QUICK=1 for a small subset)"
	@echo "make figures     execute every notebook with papermill -> figures/"

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q $(TORCH_PIN) $(TRITON_PIN) numpy pandas matplotlib sympy pytest pytest-xdist \
	    papermill ipykernel nbformat tqdm torchrl
	touch $@

setup: $(PY_DEP)
	@$(PY) -c "import torch, triton; print('torch', torch.__version__, '| triton', triton.__version__, '| cuda', torch.cuda.is_available())"

test: $(PY_DEP)
	$(PY) -m pytest -q -n 2 -p no:cacheprovider tests --doctest-modules paper_repro/kernels

test-gpu: $(PY_DEP)
	$(PY) -m pytest -q -m gpu -p no:cacheprovider

proofs: $(PY_DEP)
	$(PY) -m proofs

bench: $(PY_DEP)
	$(PY) -m paper_repro.bench all --gpus $(GPUS) $(if $(QUICK),--quick,) $(BENCH_ARGS)

figures: $(PY_DEP)
	$(PY) -m paper_repro.notebooks_runner $(if $(QUICK),--quick,)

reproduce: $(PY_DEP)
	$(MAKE) proofs
ifeq ($(HAVE_GPU),yes)
	$(MAKE) bench
else
	@echo "No CUDA GPU here: rendering every table and figure from the recorded measurements in data/."
endif
	$(MAKE) figures
	@$(PY) -m paper_repro.bench.provenance_summary

clean:
	rm -rf $(VENV) .pytest_cache
