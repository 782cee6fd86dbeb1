# hpctrain: two commands on a fresh machine.
#   make demo   installs what is missing, builds, trains the CNN with 2 ranks
#   make test   installs what is missing, builds, runs every test
export GOTOOLCHAIN := auto
SHELL := /bin/bash

GO ?= go
NP ?= 2
DEMO_ARGS ?= -model cnn -epochs 1 -batch 64 -lr 0.01 -momentum 0.9 -metrics out/demo.jsonl

.PHONY: all setup-build setup setup-cuda cgo-check build demo test vet lint bench clean readme-tables
# One target at a time, also under make -j: two setups at once would run two
# apt-get (one fails on dpkg's lock), and cgo-check or vet would run before
# setup installed gcc and the headers. go build and go test use every core.
.NOTPARALLEL:
all: build

# What building and training need (make build, make demo); setup adds the
# tests' python3-onnx and python3-torch, setup-cuda also NVRTC 11.8 from Debian
# (two small packages) for the kernel compile check.
setup-build:
	scripts/setup.sh --build

setup:
	scripts/setup.sh

setup-cuda:
	scripts/setup.sh --cuda

build: setup-build cgo-check
	$(GO) build -o hpctrain .

# Without cgo the build fails in a page of undefined symbols; say why instead.
cgo-check:
	@[ "$$($(GO) env CGO_ENABLED)" = 1 ] || { echo "hpctrain needs cgo (Open MPI, oneDNN and OpenBLAS are C libraries), but go env CGO_ENABLED is $$($(GO) env CGO_ENABLED): unset CGO_ENABLED or set it to 1, with gcc on PATH" >&2; exit 2; }

demo: build
	@mkdir -p out
	scripts/mpirun.sh -np $(NP) ./hpctrain train $(DEMO_ARGS)

# README's generated tables, from the JSON in docs/figures/ (see README).
# README= renders into another copy (TestReadmeTablesCurrent compares it with README.md).
README ?= README.md
readme-tables:
	/usr/bin/python3 bench/readme_tables.py --readme $(README) --table cpu_precision=docs/figures/cpu_precision.json \
		--table cpu_precision_cosine=docs/figures/cpu_precision_cosine.json \
		--table cpu_precision_e2e=docs/figures/cpu_precision_e2e_e24309f.json,docs/figures/cpu_precision_e2e.json \
		--table compare_resnet=docs/figures/compare_resnet8.json,docs/figures/compare_resnet8_bf16_95ae3fc.json,docs/figures/compare_resnet8_bf16.json,docs/figures/compare_resnet20.json \
		--table compare_cnn=docs/figures/compare_cnn.json,docs/figures/compare_cnn_bf16.json \
		--table compare_cnn_avx2=docs/figures/compare_cnn_avx2_29e9895.json,docs/figures/compare_cnn_avx2_df2afeb.json,docs/figures/compare_cnn_avx2.json \
		--table scaling_validation=docs/scaling_validation.json \
		--table cpu_targets:targets=docs/figures/compare_cnn.json,docs/figures/compare_cnn_avx2.json,docs/figures/compare_cnn_bf16.json,docs/figures/compare_resnet8_bf16.json,docs/figures/cpu_precision_e2e.json,docs/figures/cpu_precision.json,docs/figures/cpu_precision_cosine.json,docs/figures/cpu_precision_cosine_1ep_95ae3fc.json

# gofmt is the one of the Go that builds (go.mod's, through GOTOOLCHAIN), not
# whichever is on PATH, if any; it walks the tree (a tarball has no git ls-files).
vet:
	@bad=$$("$$($(GO) env GOROOT)/bin/gofmt" -l .) || exit 1; \
	[ -z "$$bad" ] || { echo "vet: gofmt needed:" $$bad "(gofmt -w them)" >&2; exit 1; }
	$(GO) vet ./...

# Static checks beyond vet, for before a commit (not part of make test: the
# tools come through the Go module proxy). staticcheck's default checks over
# both builds at once (-matrix: code unused in one build only is not
# reported), and nilness over each; both are clean and should stay so.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
NILNESS ?= golang.org/x/tools/go/analysis/passes/nilness/cmd/nilness@v0.52.0
lint: setup-build
	printf 'cgo:\npurego: -tags purego\n' | $(GO) run $(STATICCHECK) -matrix ./...
	$(GO) run $(NILNESS) ./...
	$(GO) run $(NILNESS) -tags purego ./...

test: build setup-cuda vet
	$(GO) test -count=1 -timeout 40m ./...
	$(GO) test -count=1 -tags purego ./internal/openblas ./internal/kernels ./internal/peak ./model
	# Under the race detector: the MPI thread hand-off (ranks under real mpirun),
	# the compute workers, and the peak loops run on every core at once.
	$(GO) test -count=1 -race ./mpi ./affinity ./internal/peak

clean:
	rm -rf hpctrain out
