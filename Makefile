# Two entry points (README "Quick start"): `make run` and `make test`. Both create .venv with the
# pinned requirements when it is missing and bring up PostgreSQL and Redis inside var/ when
# DATABASE_URL / CELERY_BROKER_URL are unset (scripts/services.py). The logic lives in Python;
# these targets stay thin.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-requirements
PYTEST_ARGS ?=

.PHONY: run test venv worker lint bench

venv: $(STAMP)

# Reinstalls when requirements.txt changes. torch is pinned to 2.13.0: that exact spec is the
# local CPU build (any other spec downloads CUDA wheels).
$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

run: $(STAMP)
	$(PY) scripts/services.py exec --instance dev -- $(PY) manage.py demo

test: $(STAMP)
	@# Hook for the browser tests: installs Debian's chromium where missing and possible.
	@if [ -f scripts/ensure_chromium.sh ]; then bash scripts/ensure_chromium.sh || true; fi
	$(PY) scripts/services.py exec --instance test --fast -- $(PY) -m pytest $(PYTEST_ARGS)

# A worker on this host against servers set in the environment (see README "More machines").
worker: $(STAMP)
	$(PY) -m celery -A workers.celery_app worker -P solo -Q $${QUEUE:-cpu} --loglevel INFO

lint: $(STAMP)
	$(PY) -m ruff check .

bench: $(STAMP)
	$(PY) scripts/services.py exec --instance bench -- $(PY) benchmarks/bench_ingest.py
