# ncclgo: see README.md. `make test` is the test command (CI runs it through .ci/run).
SHELL := /bin/bash
GO ?= go
export NCCLGO_CACHE ?= $(HOME)/.cache/ncclgo
NCCL ?=

.PHONY: all headers libs kernel-inputs generate check-generated test test-short bench lint kernels kernels-check gpu-bundle clean

all: lint test

## headers: fetch the pinned header sets (NCCL=<version> adds a new NCCL release first)
headers:
ifneq ($(NCCL),)
	NCCL=$(NCCL) headers/fetch.sh add
else
	headers/fetch.sh headers
endif

## libs: fetch the real libraries the tests load (Debian's libnccl2, libcuda1)
libs:
	headers/fetch.sh libs

## generate: regenerate raw/ and gen/ snapshots (same as go generate ./...)
generate: headers
	$(GO) generate ./...

## check-generated: regenerate and fail on any difference from what is committed
check-generated: generate
	@git diff --exit-code --stat -- raw gen kernels || { echo "generated files are stale: run make generate and commit" >&2; exit 1; }
	@test -z "$$(git status --porcelain -- raw gen)" || { git status --porcelain -- raw gen; echo "generate left untracked files" >&2; exit 1; }

## test: everything CI checks: lint, fresh generated code, tests with -race (the kernel checks included), no-cgo build, gpu-tagged code compiles
test: export NCCLGO_STRICT := 1
test: lint headers libs kernel-inputs check-generated
	$(GO) test -race -count=1 ./...
	CGO_ENABLED=0 $(GO) build ./...
	CGO_ENABLED=0 $(GO) test -count=1 ./raw/...
	$(GO) vet -tags gpu ./...

## test-short: the Go tests only (assumes make headers libs ran)
test-short:
	$(GO) test -count=1 ./...

## bench: benchmarks with allocation counts
bench: libs
	$(GO) test -run '^$$' -bench . -benchmem ./...

## lint: gofmt and go vet
lint:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; test -z "$$out" || { echo "gofmt needed:"; echo "$$out"; exit 1; }
	$(GO) vet ./...

## kernels: regenerate the committed PTX from kernels/*.cu with nvcc (installs nvidia-cuda-toolkit)
kernels:
	kernels/build.sh ptx

## kernel-inputs: fetch what the kernel checks need: ptxas 11.8, CUDA's fp16/bf16 headers, libcu++'s <nv/target>
kernel-inputs:
	headers/fetch.sh kernels

## kernels-check: the kernel checks alone, no nvcc (make test runs them too): the PTX is add.cu's, ptxas assembles it
## for every sm_8x/sm_9x with warnings as errors, add.cu run on the CPU gives the Go reference's bits
kernels-check: kernel-inputs
	NCCLGO_STRICT=1 $(GO) test -count=1 -run '^(TestPTX|TestKernelHostEmulation)' ./kernels/

## gpu-bundle: build everything a GPU run needs into gpu-bundle/ (see docs/gpu.md)
gpu-bundle:
	tools/gpubundle/build.sh gpu-bundle

clean:
	rm -rf bin dist gpu-bundle
