# zipccl developer targets. They install what they need into $(PYTHON)'s
# environment (use PYTHON=.venv/bin/python for a virtualenv); the Go
# toolchain (go >= 1.26, with cgo and a C compiler) must be on PATH.
PYTHON ?= python3
GO ?= go
PIP := $(PYTHON) -m pip
TORCH_VERSION ?= 2.15.0

.PHONY: setup deps test demo bench plotting wheel clean cuda test-cuda-emu test-gpu

# Tools and torch. torch is installed only when missing, so an existing
# (e.g. CPU-only) build is kept.
deps:
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) install "torch==$(TORCH_VERSION)"
	$(PIP) install numpy pytest pytest-timeout expecttest hypothesis build wheel ninja
	@# The frameworks tests/frameworks/ trains over zipccl, at pinned versions
	@# (DeepSpeed without its CUDA ops: DS_BUILD_OPS=0)
	for f in tests/frameworks/requirements-*.txt; do DS_BUILD_OPS=0 $(PIP) install -r $$f || exit 1; done

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

test: setup cuda test-cuda-emu
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	@# staticcheck, pinned as a go.mod tool (its first run builds it: about 90 s)
	$(GO) tool staticcheck ./...
	$(GO) test -race ./...
	@if [ -f backend/codec/fuzz.sh ]; then echo "bash backend/codec/fuzz.sh"; bash backend/codec/fuzz.sh; fi
	@# the slowest tests listed: CI has 90 minutes for the whole of make test
	$(PYTHON) -m pytest -q --durations=25 tests/

# CUDA kernels (cuda/): libzipccl_cuda.so for sm_80 and sm_90, warnings as
# errors; nvcc is installed from PyPI when missing. Compile-only without a GPU.
cuda:
	$(MAKE) -C cuda PYTHON=$(PYTHON)

# The kernels' CTA bodies run on the CPU over an emulated grid (g++, no CUDA)
# on the Go codec's golden vectors (tests/cuda_emu/).
test-cuda-emu:
	$(MAKE) -C tests/cuda_emu

# The real kernels against the Go codec, on a machine with a GPU (they skip
# with a reason elsewhere).
test-gpu: setup cuda
	ZIPCCL_CUDA_LIB=$(CURDIR)/build/cuda/libzipccl_cuda.so $(PYTHON) -m pytest -q -m gpu tests/test_gpu.py
	ZIPCCL_CUDA_LIB=$(CURDIR)/build/cuda/libzipccl_cuda.so $(GO) test -tags gpu -count=1 ./cuda/gotest/

# The main job: a small GPT trained on 4 ranks with gloo and with zipccl,
# DDP then FSDP2, over 1 Gbit/s links in network namespaces when root
# (unshaped loopback otherwise); prints the table and checks, writes a plot
# to benchmarks/results/. DEMO_ARGS adds options (python -m zipccl demo -h).
DEMO_ARGS ?=
demo: setup plotting
	$(PYTHON) -m zipccl info
	$(PYTHON) -m zipccl demo $(DEMO_ARGS)

# A short collective benchmark: every op, bf16, 4 ranks on 1 Gbit/s links,
# gloo and zipccl side by side; CSV and plot under benchmarks/results/.
BENCH_ARGS ?= --world-size 4 --link-rate 1gbit --ops all --dtype bfloat16 --sizes 1M,16M
bench: setup plotting
	$(PYTHON) -m zipccl bench collectives $(BENCH_ARGS)

plotting:
	@$(PYTHON) -c "import matplotlib" 2>/dev/null || $(PIP) install matplotlib

# dist/zipccl-<version>-<python>-<platform>.whl, with libzipccl.so inside.
wheel: deps
	$(PYTHON) -m build --wheel --no-isolation

clean:
	rm -rf build dist python/*.egg-info .pytest_cache
	rm -f python/zipccl/_C*.so python/zipccl/libzipccl.so python/zipccl/libzipccl.h
	find . -name __pycache__ -type d -prune -not -path './.git/*' -exec rm -rf {} +
