# zipccl developer targets. They install what they need into $(PYTHON)'s
# environment (use PYTHON=.venv/bin/python for a virtualenv); the Go
# toolchain (go >= 1.26, with cgo and a C compiler) must be on PATH.
PYTHON ?= python3
GO ?= go
PIP := $(PYTHON) -m pip
TORCH_VERSION ?= 2.15.0

.PHONY: setup deps test demo bench wheel clean

# Tools and torch. torch is installed only when missing, so an existing
# (e.g. CPU-only) build is kept.
deps:
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) install "torch==$(TORCH_VERSION)"
	$(PIP) install numpy pytest pytest-timeout build wheel ninja

# Editable install: libzipccl.so and zipccl._C land in python/zipccl/. Once
# the editable install exists, later runs rebuild in place incrementally
# (go's build cache, ninja in build/) instead of recompiling everything.
setup: deps
	@if $(PYTHON) -c "import sys, zipccl; sys.exit(not zipccl.__file__.startswith('$(CURDIR)/python/'))" 2>/dev/null; then \
		echo "$(PYTHON) setup.py build_ext --inplace"; \
		$(PYTHON) setup.py -q build_ext --inplace; \
	else \
		echo "$(PIP) install -e . --no-build-isolation"; \
		$(PIP) install -e . --no-build-isolation; \
	fi

test: setup
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) test -race ./...
	@if [ -f backend/codec/fuzz.sh ]; then echo "bash backend/codec/fuzz.sh"; bash backend/codec/fuzz.sh; fi
	$(PYTHON) -m pytest -q tests/

demo: setup
	$(PYTHON) -m zipccl info

bench: setup
	$(PYTHON) -m zipccl bench

# dist/zipccl-<version>-<python>-<platform>.whl, with libzipccl.so inside.
wheel: deps
	$(PYTHON) -m build --wheel --no-isolation

clean:
	rm -rf build dist python/*.egg-info .pytest_cache
	rm -f python/zipccl/_C*.so python/zipccl/libzipccl.so python/zipccl/libzipccl.h
	find . -name __pycache__ -type d -prune -not -path './.git/*' -exec rm -rf {} +
