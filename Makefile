# make demo     compile ResNet-18 for this CPU, check it against onnxruntime, time both
# make test     ruff, then every test suite in parallel (core, each plugin, end to end)
# make install  set up a fresh machine (system packages, uv, the workspace .venv); both above run it
# make lint     ruff only
# make gpu-check            on a machine with an NVIDIA GPU: install from this tree, conformance, models,
#                           speed against PyTorch; the report in $OUT (docs/deploy.md, "On a real GPU")
# make gpu-check-rehearse   the same here, on the CUDA backend's CPU runner (make test runs it)
# make clean    remove caches and build outputs (keeps .venv)

SHELL := /bin/bash
UV := bash scripts/uv
# Every plugin's and example plugin's tests, found by folder, so a new one is tested without editing this file.
TEST_PATHS := core/tests $(wildcard plugins/*/tests) $(wildcard examples/*/tests) conformance/tests tests

.PHONY: help install test demo lint clean gpu-check gpu-check-rehearse gpu-check-wheels
help:
	@sed -n 's/^# make /make /p' Makefile

install:
	@bash scripts/bootstrap.sh

lint: install
	$(UV) run --no-sync ruff check .

# pytest exits 5 when it collected nothing: a broken path or conftest, never a success.
test: lint
	@rc=0; $(UV) run --no-sync pytest -n auto --durations=25 $(TEST_PATHS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
	exit $$rc

demo: install
	$(UV) run --no-sync python scripts/demo.py

# No `install` prerequisite: the GPU machine has no registry to install from (scripts/gpu_check.sh).
gpu-check:
	bash scripts/gpu_check.sh $(GPU_CHECK_ARGS)

gpu-check-wheels:
	bash scripts/gpu_check.sh --wheels

gpu-check-rehearse: install
	bash scripts/gpu_check.sh --rehearse $(GPU_CHECK_ARGS)

clean:
	rm -rf .pytest_cache .ruff_cache .hypothesis build dist
	find . -path ./.venv -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
