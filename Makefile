# vmop: make build | unit | test | lint | verify | e2e | cluster | kwok-cluster | bench | fuzz | contract | generate | example
GO        ?= go
BIN       := bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
LDFLAGS   := -X github.com/vmop/vmop/pkg/version.Version=$(VERSION)
FUZZTIME  ?= 30s
DIST      ?= dist

.PHONY: all build unit test lint e2e cluster kwok-cluster deps bench fuzz contract generate verify example vet images push-images release

all: build

# -tags: imagebuild.Tags (internal/imagebuild), as the images build them.
build:
	$(GO) build -tags grpcnotrace -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

## vm-runner, vm-operator, vm-node and kubectl-vm images as OCI archives
## in DIST/images, tagged VERSION (no container engine needed).
images:
	$(GO) run ./hack/images -version $(VERSION) -out $(DIST)/images

## The same images, pushed to REGISTRY (e.g. registry.example:5000/vmop).
push-images:
	@test -n "$(REGISTRY)" || { echo "usage: make push-images REGISTRY=host[:port]/path"; exit 1; }
	$(GO) run ./hack/images -version $(VERSION) -out $(DIST)/images -push $(REGISTRY)

## Render the bundled example: no cluster needed.
example:
	$(GO) run ./cmd/kubectl-vm render -f examples/local-path-test-vm.yaml

## go test as the tiers run it: without cgo, as the images and krew
## archives are built, which also lets Go link the test programs itself
## (cli-runtime brings kustomize's plugin loader, whose cgo otherwise sends
## every link through gcc), and without DWARF, which only debuggers read:
## together they halve the time the unit tier spends linking.
GOTEST = CGO_ENABLED=0 $(GO) test -ldflags=-w

## The unit tier: every test that needs no root, qemu, etcd, API server or
## built control plane (go test -short; the others skip and say what they
## need). Installs and starts nothing. -count=1: some tests go build and
## run a binary (kubectl-vm, vm-runner) whose sources Go's test cache does
## not track, so a cached pass could be stale.
unit:
	$(GOTEST) -short -count=1 ./...

## Every test, after installing what they need (etcd, the control plane,
## kubelet and kwok, qemu, mmdebstrap, containerd, runc, CNI plugins) and
## building Argo CD and Flux (first run only, ~13 minutes) and the CSI
## snapshot controller and sidecars (first run only, ~11 minutes) for the
## node tests, outside the tests' timeout; a missing one fails its tests.
## vet and lint too: hack/test-all.sh runs them and the other packages
## beside test/node, the longest.
test: deps
	hack/build-gitops.sh >/dev/null
	hack/build-csi.sh >/dev/null
	GO=$(GO) MAKE=$(MAKE) hack/test-all.sh

## golangci-lint (its version in hack/golangci-lint.sh, built once into
## the tests' cache) with .golangci.yml.
lint:
	hack/golangci-lint.sh run ./...

## The operator's integration tests alone (test/e2e), on a cluster with
## controllers and kwok nodes: no pod really runs.
e2e: deps
	VMOP_KUBE_BIN_DIR=$$(hack/build-control-plane.sh all) $(GOTEST) -count=1 -timeout 30m ./test/e2e/...

## The tests' real single-node cluster (kubelet, containerd, this tree's
## images) to try things by hand, as root: prints its KUBECONFIG, runs
## until Ctrl-C, then undoes its changes to the host.
cluster: deps
	$(GO) run ./hack/nodecluster

## test/e2e's cluster with kwok nodes (no pods really run).
kwok-cluster: deps
	$(GO) run ./hack/e2ecluster

deps:
	hack/install-deps.sh

vet:
	$(GO) vet ./...
	# kubectl-vm ships for macOS too (krew/vm.yaml): keep it building there.
	GOOS=darwin $(GO) build -o /dev/null ./cmd/kubectl-vm
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }

## Benchmarks on one core, as a table; then test/e2e's: the operator's
## scale benchmark and kubectl vm start against kubectl patch (on its
## cluster with kwok nodes, one round each); then kubectl apply to
## qemu running and a VM pod's memory on the real node (one round of
## several VMs).
bench: deps
	$(GOTEST) -run '^$$' -bench . -benchmem -cpu 1 ./pkg/... | hack/bench-table.sh
	VMOP_KUBE_BIN_DIR=$$(hack/build-control-plane.sh all) $(GOTEST) -run '^$$' -bench . -benchtime 1x ./test/e2e | hack/bench-table.sh
	VMOP_KUBE_BIN_DIR=$$(hack/build-control-plane.sh all) $(GOTEST) -run '^$$' -bench . -benchtime 1x ./test/node | hack/bench-table.sh

## The contract test's long run: CONTRACT_SPECS random VirtualMachines
## from the CRD's schema (seed CONTRACT_SEED) on the API server, and qemu
## started for the first CONTRACT_QEMU that it accepts.
CONTRACT_SPECS ?= 5000
CONTRACT_QEMU  ?= 300
CONTRACT_SEED  ?= 2
contract: deps
	VMOP_CONTRACT_SPECS=$(CONTRACT_SPECS) VMOP_CONTRACT_QEMU=$(CONTRACT_QEMU) VMOP_CONTRACT_SEED=$(CONTRACT_SEED) \
		VMOP_KUBE_BIN_DIR=$$(hack/build-control-plane.sh all) $(GOTEST) -count=1 -timeout 60m -v -run '^TestContract$$' ./test/contract

## Each fuzz target for FUZZTIME.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzRender -fuzztime $(FUZZTIME) ./pkg/render
	$(GO) test -run '^$$' -fuzz FuzzReader -fuzztime $(FUZZTIME) ./pkg/manifest
	$(GO) test -run '^$$' -fuzz FuzzWriterYAML -fuzztime $(FUZZTIME) ./pkg/manifest
	$(GO) test -run '^$$' -fuzz FuzzEmitter -fuzztime $(FUZZTIME) ./pkg/manifest
	$(GO) test -run '^$$' -fuzz FuzzLabelsOK -fuzztime $(FUZZTIME) ./pkg/api/v1
	$(GO) test -run '^$$' -fuzz FuzzDNSLabelErrors -fuzztime $(FUZZTIME) ./pkg/api/v1
	$(GO) test -run '^$$' -fuzz FuzzParseDisk -fuzztime $(FUZZTIME) ./pkg/kubectl-vm/cmd/create
	$(GO) test -run '^$$' -fuzz FuzzFlags -fuzztime $(FUZZTIME) ./pkg/kubectl-vm/cmd/create
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME) ./pkg/runnerconfig
	$(GO) test -run '^$$' -fuzz FuzzDefault -fuzztime $(FUZZTIME) ./pkg/cloudinit
	$(GO) test -run '^$$' -fuzz FuzzAgentOutput -fuzztime $(FUZZTIME) ./pkg/vm-runner/guestagent
	$(GO) test -run '^$$' -fuzz FuzzHandle -fuzztime $(FUZZTIME) ./pkg/vm-runner/dhcp
	$(GO) test -run '^$$' -fuzz FuzzParseChecksum -fuzztime $(FUZZTIME) ./pkg/vm-runner/diskimport

## The krew release of VERSION (a tag such as v0.1.0): the plugin's
## archives for linux and darwin on amd64 and arm64 in DIST, and the
## manifest for them, DIST/vm.yaml, from the template krew/vm.yaml.
## KREW_PLATFORMS="linux/amd64" builds (and lists) only those.
.PHONY: krew
krew:
	GO=$(GO) KREW_PLATFORMS="$(KREW_PLATFORMS)" hack/krew-dist.sh $(VERSION) $(DIST)

## The release of VERSION (a tag such as v0.1.0), as
## .github/workflows/release.yml makes it on a tag: make krew, make
## push-images to REGISTRY, and the tag's GitHub release with the krew
## archives and manifest (gh). DRY_RUN=1 prints the gh command instead of
## running it; the images still go to REGISTRY, so give one of your own.
release:
	@test -n "$(REGISTRY)" || { echo "usage: make release REGISTRY=host[:port]/path VERSION=v0.1.0 [DRY_RUN=1]"; exit 1; }
	GO=$(GO) MAKE=$(MAKE) DRY_RUN="$(DRY_RUN)" hack/release.sh $(VERSION) $(REGISTRY) $(DIST)

## What is generated or tidied is as it should be: the deep-copy
## functions regenerated (a stale file is replaced: commit it) and
## go.mod and go.sum tidy. gofmt and goimports are lint's; make test runs
## all three.
verify:
	@mkdir -p $(BIN) && cp pkg/api/v1/zz_generated.deepcopy.go $(BIN)/zz_generated.deepcopy.go.before
	$(MAKE) --no-print-directory generate
	@cmp -s $(BIN)/zz_generated.deepcopy.go.before pkg/api/v1/zz_generated.deepcopy.go || \
		{ echo "pkg/api/v1/zz_generated.deepcopy.go was stale (the types changed): regenerated, commit it" >&2; exit 1; }
	$(GO) mod tidy -diff

## Regenerate deep-copy functions after changing pkg/api/v1 types.
generate:
	cd hack/tools && $(GO) build -o ../../$(BIN)/deepcopy-gen k8s.io/code-generator/cmd/deepcopy-gen
	$(BIN)/deepcopy-gen --go-header-file /dev/null --output-file zz_generated.deepcopy.go ./pkg/api/v1
