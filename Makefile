# liftbridge-sync developer commands. `make test` is what CI runs (.ci/run).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The Liftbridge server and Go build caches live inside the project.
export LIFTBRIDGE_SYNC_CACHE ?= $(CURDIR)/.cache/liftbridge

.PHONY: all venv server lint type codegen dist test test-dev unit demo bench clean fuzz

all: test

# The C speedups' sources (setup.py lists the same files for the extension).
SPEEDUPS_C := $(sort $(wildcard liftbridge_sync/_speedups*.c))

$(STAMP): setup.cfg setup.py pyproject.toml $(SPEEDUPS_C) liftbridge_sync/_speedups.h
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=23"
	$(BIN)/python -m pip install --quiet -e '.[test,dev,nats,spark]'
	touch $(STAMP)

venv: $(STAMP)

## Install the Liftbridge server binary into $(LIFTBRIDGE_SYNC_CACHE) (reused when present).
server: venv
	$(BIN)/python -m liftbridge_sync.testing install

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

type: venv
	$(BIN)/mypy liftbridge_sync tests bench .ci/check_dist.py

## Regenerate liftbridge_sync/_proto from protos/ (tests check it is up to date).
codegen: venv
	$(BIN)/python -m grpc_tools.protoc --proto_path=protos --python_out=. --pyi_out=. \
		--grpc_python_out=. protos/liftbridge_sync/_proto/api.proto

## The sdist and a manylinux wheel per supported CPython (3.11, 3.12, 3.13; found with
## pyenv or as python3.X on PATH: a missing one fails the build), checked with
## twine --strict and installed into fresh virtualenvs (.ci/dist, .ci/check_dist.py).
dist: venv
	HOST_PYTHON=$(BIN)/python .ci/dist

## What CI runs (.ci/run): ruff and mypy once, then the wheels from `make dist`, each
## installed into a virtualenv of its interpreter (not the checkout): the whole suite on
## 3.11 and 3.13, unit + component tests on 3.12, all with the C speedups required,
## then unit + component tests on the pure-Python fallback (.ci/test-wheels). The C
## speedups are fuzzed under ASan/UBSan first (`fuzz`, FUZZ_SECONDS).
test: venv server lint type fuzz dist
	.ci/test-wheels

## The fast loop while editing: the editable checkout in .venv (C edits rebuilt by
## `make venv`), this interpreter only, unit + component tests by default. Choose with
## ARGS, e.g. make test-dev ARGS="tests/integration/test_publish.py -k ack".
ARGS ?= tests/unit tests/component
test-dev: venv
	LIFTBRIDGE_SYNC_REQUIRE_SPEEDUPS=1 $(BIN)/python -m pytest -n 2 --dist loadfile $(ARGS)

## The C speedups built with AddressSanitizer + UBSan (build/fuzz/) and fuzzed for
## FUZZ_SECONDS (tests/fuzz/fuzz_speedups.py); a sanitizer report fails the run.
FUZZ_SECONDS ?= 60
FUZZ_SO = build/fuzz/_speedups$(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
fuzz: venv
	mkdir -p build/fuzz
	gcc -shared -fPIC -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
		-fno-sanitize-recover=all -Wall -Werror=implicit-function-declaration \
		-I$$($(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['include'])") \
		$(SPEEDUPS_C) -o $(FUZZ_SO)
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
		ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
		PYTHONMALLOC=malloc LIFTBRIDGE_SYNC_FUZZ_MODULE=$(FUZZ_SO) \
		LIFTBRIDGE_SYNC_FUZZ_SECONDS=$(FUZZ_SECONDS) $(BIN)/python -m tests.fuzz.fuzz_speedups

unit: venv
	$(BIN)/python -m pytest tests/unit

demo: venv server
	$(BIN)/python examples/demo.py

bench: venv server
	$(BIN)/python -m bench all

clean:
	rm -rf $(VENV) .cache .mypy_cache .pytest_cache .ruff_cache build dist *.egg-info \
		liftbridge_sync/*.so
