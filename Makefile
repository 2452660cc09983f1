# The two commands a newcomer needs: `make run` serves the app, `make test` checks everything.
# Both create .venv on first use and install what they need into it.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# checkov and its ~80 pinned dependencies live apart from the app's environment (requirements-tools.txt says why).
TOOLS_VENV ?= .venv-tools
TOOLS := $(TOOLS_VENV)/bin
PORT ?= 8501
PYTEST_ARGS ?=
IMAGE ?= lensa
# Where torch comes from. Empty (the default): scripts/install_torch.py chooses, the CPU build from PyTorch's CPU
# index unless `nvidia-smi -L` finds a GPU (then PyPI's CUDA build); set, it wins, for the venv and docker-build.
TORCH_INDEX_URL ?=
# docker-build with WITH_TORCH=0: the lesson-only image, without torch and the live runs (under 400 MB).
WITH_TORCH ?= 1

.PHONY: run test test-kernels torch lint format clean screenshots bench bench-compose reference-run reference-recipes \
	docker-build \
	docker-run container-check compose-up compose-down kube-play

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch first, the build this machine needs (scripts/install_torch.py says which and why), then the rest: the
# torch==X pin in requirements.txt is then already met (by X+cpu too) and pip leaves it alone.
$(VENV)/.app-installed: requirements.txt scripts/install_torch.py | $(BIN)/python
	TORCH_INDEX_URL="$(TORCH_INDEX_URL)" $(BIN)/python scripts/install_torch.py
	$(BIN)/pip install -q -r requirements.txt
	touch $@

$(VENV)/.dev-installed: requirements.txt requirements-dev.txt scripts/install_torch.py | $(BIN)/python
	TORCH_INDEX_URL="$(TORCH_INDEX_URL)" $(BIN)/python scripts/install_torch.py
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $@ $(VENV)/.app-installed

$(TOOLS_VENV)/.installed: requirements-tools.txt
	$(PYTHON) -m venv $(TOOLS_VENV)
	$(TOOLS)/pip install -q --upgrade pip
	$(TOOLS)/pip install -q -r requirements-tools.txt
	touch $@

## Serve the app on http://localhost:$(PORT) (PORT=8502 make run for a second copy).
run: $(VENV)/.app-installed
	$(BIN)/python -m lensa.ui.serve --server.port $(PORT)

## Install (or check) torch alone in .venv: the lab's "PyTorch is not installed" message names this.
torch: | $(BIN)/python
	TORCH_INDEX_URL="$(TORCH_INDEX_URL)" $(BIN)/python scripts/install_torch.py

## Lint, then the whole test suite: the fast tests on every core, then, one at a time, the tests that time
## something (marked serial), then the browser tests (skipped, with the reason, where /usr/bin/chromium is missing).
## (Serial tests run in their own pytest: Playwright's sync API leaves an event loop that asyncio.run refuses.)
test: lint
	$(BIN)/pytest -n auto -m "not e2e and not serial" $(PYTEST_ARGS)
	$(BIN)/pytest -m "serial and not e2e" $(PYTEST_ARGS)
	$(BIN)/pytest -m e2e $(PYTEST_ARGS)

## The tests that compute with torch's or numpy's CPU kernels (marked torch_kernels, numpy_kernels) again, under
## ATEN_CPU_CAPABILITY=default, =avx2 and =avx512 (each only where this CPU has it and torch would not pick it by
## itself: make test ran that one) and with numpy at its baseline
## (NPY_DISABLE_CPU_FEATURES): what another CPU would run. scripts/test_kernels.py says what it runs and skips.
test-kernels: $(VENV)/.dev-installed
	$(BIN)/python scripts/test_kernels.py $(PYTEST_ARGS)

# Every manifest but kustomize's own file, validated against the Kubernetes OpenAPI schemas kubernetes-validate
# bundles: the oldest and the newest release it carries that the manifests target.
KUBE_MANIFESTS := $(filter-out deploy/kubernetes/kustomization.yaml,$(wildcard deploy/kubernetes/*.yaml))
KUBE_SCHEMA_OLDEST ?= 1.29.0
KUBE_SCHEMA_NEWEST ?= 1.37.0

# checkov runs offline: --skip-download and BC_SKIP_MAPPING keep it from fetching policies and guidelines, and no
# API key is given. Every check it skips is annotated, with the reason, in the file it concerns.
lint: $(VENV)/.dev-installed $(TOOLS_VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/hadolint Dockerfile
	$(BIN)/hadolint deploy/nginx/Dockerfile
	BC_SKIP_MAPPING=TRUE $(TOOLS)/checkov --quiet --compact --skip-download --framework kubernetes -d deploy/kubernetes
	BC_SKIP_MAPPING=TRUE $(TOOLS)/checkov --quiet --compact --skip-download --framework dockerfile -f Dockerfile \
		-f deploy/nginx/Dockerfile
	$(TOOLS)/kubernetes-validate --strict --quiet -k $(KUBE_SCHEMA_OLDEST) $(KUBE_MANIFESTS)
	$(TOOLS)/kubernetes-validate --strict --quiet -k $(KUBE_SCHEMA_NEWEST) $(KUBE_MANIFESTS)

## The benchmarks: each prints its table and rewrites its section of docs/performance.md.
bench: $(VENV)/.dev-installed
	$(BIN)/python -m bench.core_rounding
	$(BIN)/python -m bench.runstats_speed
	$(BIN)/python -m bench.blockscale_speed
	$(BIN)/python -m bench.capture_overhead
	$(BIN)/python -m bench.recorder_cost
	$(BIN)/python -m bench.lab_clock
	$(BIN)/python -m bench.lowp_speed
	$(BIN)/python -m bench.page_rerun
	$(BIN)/python -m bench.browser_roundtrip
	$(BIN)/python -m bench.browser_floor
	$(BIN)/python -m bench.cold_start
	$(BIN)/python -m bench.server_cost --learners 20 --think 1 --seconds 30
	$(BIN)/python -m bench.loadgen --learners 100 --think 5 --seconds 60 --ramp 20 --publish class_5s
	$(BIN)/python -m bench.loadgen --learners 40 --think 1 --seconds 60 --ramp 10 --publish class_1s
	$(BIN)/python -m bench.hostile --learners 100 --think 5 --seconds 60 --ramp 20 --clients 5 --repeats 3 --publish hostile_load
	$(BIN)/python -m bench.lab_isolation --learners 20 --think 5 --seconds 25
	$(BIN)/python -m bench.replicas

## Rebuild the shipped reference run (lensa/data/reference_fp32.npz, reference_fp16.npz): a few minutes on 2 cores.
reference-run: $(VENV)/.app-installed
	$(BIN)/python -m lensa.live.reference

## Rebuild the shipped comparison of the recipes below 16 bits on the reference transformer
## (lensa/data/reference_recipes.npz): 14 arms of 300 steps, tens of minutes on 2 cores.
reference-recipes: $(VENV)/.app-installed
	$(BIN)/python -m lensa.live.lowp_reference

## Screenshots of every page (light theme, en and id, 1280 and 390 px) into docs/screenshots/.
screenshots: $(VENV)/.dev-installed
	$(BIN)/python scripts/screenshots.py

## Build the image: CPU torch (the Dockerfile's default); TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126
## for CUDA; WITH_TORCH=0 for the lesson-only image without torch.
docker-build:
	docker build $(if $(TORCH_INDEX_URL),--build-arg TORCH_INDEX_URL=$(TORCH_INDEX_URL)) \
		--build-arg WITH_TORCH=$(WITH_TORCH) -t $(IMAGE) .

## Serve the image on http://localhost:$(PORT).
docker-run:
	docker run --rm -p $(PORT):8501 $(IMAGE)

## Build the real Dockerfile with podman, both images (with the lab, lesson-only), and prove they serve (as root; no Docker engine needed).
container-check:
	scripts/container_check.sh

## deploy/compose.yaml on this machine's Docker Engine (as root): installs Docker Engine and Compose from Debian and
## starts dockerd when missing, builds every image here (no registry needed; cached for the next time), and brings
## up three replicas behind nginx on http://127.0.0.1:8080 (LENSA_PORT=8090 for another port).
compose-up:
	scripts/compose_stack.sh up

## Take the stack down (its containers and network; the images stay for the next compose-up).
compose-down:
	scripts/compose_stack.sh down

## deploy/kubernetes's Deployment on podman (kube play), checked in the running pod: probes, user, read-only root,
## capabilities, seccomp, the cookie secret (as root; the image make compose-up built, via docker save | podman load).
kube-play: $(VENV)/.dev-installed
	$(BIN)/python scripts/kube_play.py

## The compose stack under a class (200 learners at 5 s) and a killed replica; rewrites its section of
## docs/performance.md. As root, with Docker Engine (make compose-up's); takes the stack down at the end.
bench-compose: $(VENV)/.dev-installed
	$(BIN)/python -m bench.compose

format: $(VENV)/.dev-installed
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) $(TOOLS_VENV) .pytest_cache .ruff_cache .hypothesis
