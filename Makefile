# Two commands do all set-up on a fresh machine:
#   make bench   builds everything and runs the benchmark comparison (makes its own data);
#                results go to benchmarks/results/latest/ (git ignores it); REFRESH=1 writes
#                them over the committed benchmarks/results/*.json and docs/ plots instead
#   make test    builds everything and runs the test suite (what .ci/run calls)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
REFRESH ?=

.PHONY: test bench install clean

NATIVE := $(wildcard include/*.h csrc/*.c csrc/*.h csrc/*/*.h csrc/build_*.py dpu_src/*.c dpu_src/*.h)

# requirements*.txt pin what the project's machines carry; then pimloader itself, editable, as
# pyproject.toml says: built with its [build-system] requirements (the cffi extensions land in
# pimloader/), its declared dependencies checked against what is installed.
$(VENV)/.base: requirements.txt requirements-dev.txt requirements-dev-nodeps.txt pyproject.toml setup.py $(NATIVE)
	scripts/system-deps.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -r requirements-dev.txt
	$(PIP) install -q --no-deps -r requirements-dev-nodeps.txt
	$(PIP) install -q -e .
	touch $@

# The peers of benchmarks/peers.py are optional: when FFCV cannot be built (its system
# packages missing), make bench goes on and the benchmark reports it as not installed.
$(VENV)/.bench: $(VENV)/.base requirements-bench.txt scripts/bench-system-deps.sh
	scripts/bench-system-deps.sh
	$(PIP) install -q -r requirements-bench.txt
	$(PIP) install -q --no-deps ffcv==1.0.2 || echo "FFCV not installed: the benchmark goes on without it" >&2
	touch $@

install: $(VENV)/.base

test: $(VENV)/.base
	$(PY) -m pytest -q tests

bench: $(VENV)/.bench
	$(PY) -m benchmarks $(if $(filter-out 0,$(REFRESH)),--refresh)

clean:
	rm -rf $(VENV) build *.egg-info pimloader/*.so
