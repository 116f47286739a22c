# Two commands do all set-up on a fresh machine:
#   make bench   builds everything and runs the benchmark comparison (makes its own data);
#                results go to benchmarks/results/latest/ (git ignores it); REFRESH=1 writes
#                them over the committed benchmarks/results/*.json and docs/ plots instead
#   make test    builds everything and runs the test suite (what .ci/run calls)
#   make fuzz    fuzzes the parsers of untrusted bytes under ASan and UBSan for FUZZ_SECONDS
#                (.ci/run calls it after the tests; docs/fuzzing.md)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
REFRESH ?=

.PHONY: test bench fuzz install clean

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

# The sanitizer build: the cffi extensions compiled again by gcc with ASan and UBSan (every
# UBSan report fatal) into $(ASAN)/lib, beside a copy of the package's Python files made at
# each run, so that the checkout's pimloader/*.so, which the tests import, stay as they are.
FUZZ_SECONDS ?= 100
ASAN     := build/asan
SANITIZE := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g
SHIM     := build/fuzz/coverage_shim.so

$(VENV)/.fuzz: $(VENV)/.base requirements-fuzz.txt
	$(PIP) install -q -r requirements-fuzz.txt
	touch $@

$(ASAN)/.built: $(VENV)/.base setup.py $(NATIVE)
	CC=gcc CFLAGS="$(SANITIZE)" LDFLAGS="-fsanitize=address,undefined" \
		$(PY) setup.py -q build_ext -j 2 --build-lib $(ASAN)/lib --build-temp $(ASAN)/tmp
	touch $@

$(SHIM): fuzz/coverage_shim.c
	mkdir -p $(dir $@)
	gcc -shared -fPIC -O2 -Wall -Wextra -o $@ $< -ldl

install: $(VENV)/.base

test: $(VENV)/.base
	$(PY) -m pytest -q tests

fuzz: $(VENV)/.fuzz $(ASAN)/.built $(SHIM)
	$(PY) -c "import shutil; shutil.copytree('pimloader', '$(ASAN)/lib/pimloader', dirs_exist_ok=True, \
		ignore=shutil.ignore_patterns('*.so', '__pycache__'))"
	$(PY) fuzz/run.py --build $(ASAN)/lib --shim $(SHIM) --seconds $(FUZZ_SECONDS)

bench: $(VENV)/.bench
	$(PY) -m benchmarks $(if $(filter-out 0,$(REFRESH)),--refresh)

clean:
	rm -rf $(VENV) build *.egg-info pimloader/*.so
