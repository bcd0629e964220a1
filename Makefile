# ncclgo: see README.md. `make test` is the test command (CI runs it through .ci/run).
SHELL := /bin/bash
GO ?= go
# The one rule for the cache folder (headers/fetch.sh, tools/bindgen and the tests read
# NCCLGO_CACHE): $NCCLGO_CACHE, else $XDG_CACHE_HOME/ncclgo, else ~/.cache/ncclgo.
export NCCLGO_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/ncclgo
# Two modules: the library (.) and the generator (tools/bindgen, nested so that a module using the library does not
# get the generator's dependencies); go.work joins them here. ./... stops at a nested module, so PKGS names both.
PKGS := ./... ./tools/bindgen/...
MODULES := . tools/bindgen
# make headers NCCL=x.y.z adds an NCCL release; NCCL_SOURCE=debian|github|pypi|git picks where
# its nccl.h comes from, NCCL_GIT=DIR is the local clone of NVIDIA/nccl that git reads (no network).
NCCL ?=
NCCL_SOURCE ?=
NCCL_GIT ?=

.PHONY: all deps headers libs kernel-inputs generate check-generated tidy-check test test-stackmove test-load test-short bench lint kernels kernels-check gpu-bundle gpu-rehearsal clean

all: lint test

## deps: install what the tests need beyond the README's prerequisites: Open MPI, python3-torch and debootstrap
## (Debian packages; apt as root, else through sudo, else it stops with the command to run) and the torch 2.x
## roots (.ci/torch-chroot.sh build trixie|sid: torch 2.6 and 2.14). Quick when everything is there.
deps:
	.ci/deps.sh

## headers: fetch the pinned header sets (NCCL=<version> instead adds a new NCCL release: pins and caches it;
## NCCL_SOURCE=git NCCL_GIT=<clone of NVIDIA/nccl> takes it from a local clone, without GitHub)
headers:
ifneq ($(NCCL),)
	NCCL='$(NCCL)' NCCL_SOURCE='$(NCCL_SOURCE)' NCCL_GIT='$(NCCL_GIT)' headers/fetch.sh add
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
	@git diff --exit-code --stat -- raw gen kernels docs || { echo "generated files are stale: run make generate and commit" >&2; exit 1; }
	@test -z "$$(git status --porcelain -- raw gen docs)" || { git status --porcelain -- raw gen docs; echo "generate left untracked files" >&2; exit 1; }

## tidy-check: fail when a module's go.mod or go.sum is not what `go mod tidy` makes
tidy-check:
	@for m in $(MODULES); do (cd $$m && $(GO) mod tidy -diff) || { echo "$$m: go.mod/go.sum are not tidy: run go mod tidy there and commit" >&2; exit 1; }; done

## test: everything CI checks: lint, tidy go.mod, fresh generated code, tests with -race (the kernel checks included),
## no-cgo build, gpu-tagged code compiles. kernel-inputs comes before headers: it fetches the header sets too, so the
## nvidia-cuda-dev .deb that cuda.h and the fp16 headers share is downloaded once.
## NCCLGO_STRICT=1 makes a test fail where it would skip for a missing library, header, cache entry or tool;
## tools/testreport reads go test's -json events, keeps go test's closing lines and ends the log with the skipped tests per package.
## -timeout 30m: comm/mpi runs mpirun jobs (the busy-loop comparison at 2 and 4 ranks) that take longer than go test's 10-minute default per package on a loaded 2-core machine.
test: export NCCLGO_STRICT := 1
test: deps lint tidy-check kernel-inputs headers libs check-generated
	set -o pipefail; $(GO) test -race -count=1 -timeout 30m -json $(PKGS) 2>&1 | $(GO) run ./tools/testreport
	CGO_ENABLED=0 $(GO) build $(PKGS)
	set -o pipefail; CGO_ENABLED=0 $(GO) test -count=1 -json ./raw/... 2>&1 | $(GO) run ./tools/testreport
	$(GO) vet -tags gpu $(PKGS)
	$(STACKMOVE)

## test-stackmove: the packages that hand addresses to C, built so that every function call moves the goroutine's
## stack (-d=maymorestack=runtime.mayMoreStackMove): a Go pointer holding a value no pointer may have (MPI_IN_PLACE is
## (void *)1) aborts the test at once, where a normal build aborts only when a stack happens to move (under load).
## make test runs it too; about 3 minutes (comm/mpi's mpirun jobs are most of it).
STACKMOVE_PKGS ?= ./raw/... ./comm ./comm/mpi ./comm/nccl ./comm/internal/...
STACKMOVE = set -o pipefail; $(GO) test -count=1 -timeout 30m -gcflags='all=-d=maymorestack=runtime.mayMoreStackMove' -json $(STACKMOVE_PKGS) 2>&1 | $(GO) run ./tools/testreport
test-stackmove: export NCCLGO_STRICT := 1
test-stackmove: deps libs
	$(STACKMOVE)

## test-load: the timing-sensitive packages (deadlines, timeouts, processes) three times with -race while
## tools/cpuload keeps every CPU busy. Not the whole suite: on CI's 2 cores its tests take about 440 s once
## with -race (make test), and this set 10-12 minutes three times under load (make test-load; go test's
## 10-minute default per package is too short for three runs of comm or comm/rendezvous, hence -timeout).
LOAD_PKGS ?= ./comm/... ./tools/rendezvous ./tools/gpubundle ./tools/cpuload
test-load: export NCCLGO_STRICT := 1
test-load: deps libs
	$(GO) build -o bin/cpuload ./tools/cpuload
	set -o pipefail; bin/cpuload -- $(GO) test -race -count=3 -timeout 30m -json $(LOAD_PKGS) 2>&1 | $(GO) run ./tools/testreport

## test-short: the Go tests only (assumes make headers libs ran)
test-short:
	$(GO) test -count=1 $(PKGS)

## bench: benchmarks with allocation counts
bench: libs
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

## lint: gofmt, go vet and staticcheck (pinned here, run with `go run` so that go.mod gains no dependency; its checks
## are set in staticcheck.conf: the defaults plus ST1005). staticcheck checks three build configurations together
## (-matrix): the default, -tags gpu (the GPU tests) and CGO_ENABLED=0 (make test builds it); code is unused only
## when no configuration that builds it uses it, so a helper of the gpu-tagged tests is not reported.
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; test -z "$$out" || { echo "gofmt needed:"; echo "$$out"; exit 1; }
	$(GO) vet $(PKGS)
	printf 'default:\ngpu: -tags=gpu\nnocgo: CGO_ENABLED=0\n' | $(STATICCHECK) -matrix $(PKGS)

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

## gpu-rehearsal: build the bundle and run it here, without a GPU: it must fail with every package skipped and said why
gpu-rehearsal: gpu-bundle
	tools/gpubundle/rehearse.sh gpu-bundle

clean:
	rm -rf bin dist gpu-bundle
