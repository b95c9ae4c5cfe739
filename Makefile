# flowlb: the two commands of the README are `make demo` and `make test`.
GO ?= go
STATICCHECK = $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: build image test lint unit unit-python openstack upstream upstream-kube-proxy nftcli-large compat demo deps deps-test fuzz fuzz-short bench bench-kube bench-lbaas bench-page bench-smoke generate generate-check e2e-ebpf

# Where build and image write (tests point it at a temporary directory).
BIN ?= bin
# Computed once (a plain ?= would run git at every use).
ifndef VERSION
VERSION := $(shell hack/version.sh)
endif
ifndef REVISION
REVISION := $(shell git rev-parse HEAD)
endif
# The image's creation time is the commit's: same commit, same digest.
ifndef SOURCE_DATE_EPOCH
SOURCE_DATE_EPOCH := $(shell git log -1 --format=%ct)
endif
IMAGE ?= ghcr.io/flowlb/flowlb:$(VERSION)
IMAGE_ARCHES ?= amd64 arm64
HOST_ARCH := $(shell $(GO) env GOARCH)

# One static, reproducible build for the tests, the demo and the image:
# no cgo (the SQLite driver is pure Go), no paths of this machine, no VCS
# stamp but the version, no symbol table or DWARF (-s -w: a third of the
# size; stack traces keep their function names and lines).
GOBUILD = CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false \
	-ldflags "-s -w -X github.com/flowlb/flowlb/internal/shared/version.Version=$(VERSION)"

build:
	$(GOBUILD) -o $(BIN)/flowlb ./cmd/flowlb

# An OCI image layout tarball of linux/$(IMAGE_ARCHES): this machine's
# architecture packs $(BIN)/flowlb itself, the others are cross-built.
image: build
	@set -e; args=; for a in $(IMAGE_ARCHES); do \
		b=$(BIN)/flowlb; \
		if [ "$$a" != "$(HOST_ARCH)" ]; then \
			b=$(BIN)/flowlb-linux-$$a; \
			echo 'GOOS=linux GOARCH='$$a' $(GOBUILD) -o '$$b' ./cmd/flowlb'; \
			GOOS=linux GOARCH=$$a $(GOBUILD) -o $$b ./cmd/flowlb; \
		fi; \
		args="$$args -binary linux/$$a=$$b"; \
	done; \
	$(GO) run ./hack/image -o $(BIN)/flowlb-image.tar -name $(IMAGE) -version $(VERSION) \
		-revision $(REVISION) -created $(SOURCE_DATE_EPOCH) $$args

# What the demo needs (Debian packages, Go modules); deps-test adds the
# lab's Kubernetes binaries and cloud-provider-openstack's controller
# manager, built once from source (minutes), and Keystone.
deps:
	hack/install-deps.sh

deps-test:
	hack/install-deps.sh --test

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...
	$(STATICCHECK) ./...

# The eBPF data plane's objects and Go bindings (committed, so that go
# build needs no clang): generate remakes them from the C sources with
# Debian's clang; generate-check (part of test) makes them again in a
# temporary directory and fails unless they equal the committed files.
generate:
	PATH="$$(dirname $$(command -v $(GO))):$$PATH" hack/gen-bpf.sh

generate-check:
	@set -e; d=$$(mktemp -d); trap 'rm -rf $$d' EXIT; \
	PATH="$$(dirname $$(command -v $(GO))):$$PATH" hack/gen-bpf.sh $$d; \
	for f in $$(cd $$d && ls); do \
		cmp -s $$d/$$f internal/node/dataplane/ebpf/$$f || { echo "generate-check: internal/node/dataplane/ebpf/$$f differs from its sources: run make generate"; exit 1; }; \
	done; \
	n=$$(ls internal/node/dataplane/ebpf/*_bpfel.* | wc -l); [ $$n -eq $$(ls $$d | wc -l) ] || { echo "generate-check: generated file sets differ"; exit 1; }

# Unit, store (SQLite and PostgreSQL), API, root (namespace) and
# Kubernetes-in-the-lab tests; Kubernetes' own e2e tests on real nodes
# are the upstream target's.
unit:
	FLOWLB_REQUIRE_ROOT=1 FLOWLB_REQUIRE_POSTGRES=1 FLOWLB_REQUIRE_KUBE=1 $(GO) test -count=1 -timeout 40m $$($(GO) list ./... | grep -v /test/upstream)
	$(MAKE) unit-python

# The Octavia provider driver's unit tests (deploy/octavia-provider), on
# Debian's Python with its octavia-lib (hack/install-deps.sh --test).
unit-python:
	cd deploy/octavia-provider && /usr/bin/python3 -m unittest -v

# The real OpenStack test bed (internal/lab/openstack: MariaDB,
# Keystone, Barbican, Neutron ML2/OVN, a chassis per lab node) and flowlb with
# --network neutron-api on it (docs/openstack-lab.md). Not part of unit:
# on 2026-11-29, at load averages of 30-60 on 2 cores, TestCloud took 8
# minutes and TestRealNeutronVIPAndFloatingIP 4 (the bed up in 1.7 to 7
# minutes, Keystone's and Neutron's start the most of it; the first run
# also makes the templates, openstack-lab.md, about 10 minutes more);
# with the checks of the load balancer's security group,
# TestRealNeutronVIPAndFloatingIP took 3.8 minutes on 2026-11-30 at load
# averages of 12-27 (the bed up in 1.7).
# TestRealOctaviaProvider (flowlb as a provider of the real Octavia) took
# 6 to 6.5 minutes at load averages of 12-15, Octavia up in about 2 of
# them (its database migrated at each start); 2.5 minutes on 2026-11-30
# at a load average of 4, with the provider agent and two crashes.
# TestRealOctaviaClients (the openstack CLI and Terraform through that
# Octavia) took 4.5 to 15 minutes on 2026-11-30 at load averages of 2-16.
# TestRealNeutronCallersToken and TestRealOctaviaOVNProvider took about 6
# and 10 minutes at load averages of 12-16: the five of the second line
# together want more than 30 minutes on a loaded machine.
# TestRealOctaviaCPO (cloud-provider-openstack through that Octavia, on the
# lab's Kubernetes with kube-proxy) took 5 to 8 minutes on 2026-11-30 at
# load averages of 5-40; it needs the kube gates too.
# TestRealOctaviaBarbican (TERMINATED_HTTPS through Octavia with a
# certificate container from the bed's Barbican, both providers) took
# 4.7 minutes on 2026-11-30 at a load average of about 15.
# TestRealOctaviaTempest (octavia-tempest-plugin's API suite through that
# Octavia with provider flowlb and, for the comparison, provider ovn, the
# tests of each dealt to two runs side by side) takes the longest: see
# docs/openstack-lab.md.
openstack:
	hack/install-deps.sh --openstack
	FLOWLB_REQUIRE_ROOT=1 FLOWLB_REQUIRE_OPENSTACK=1 $(GO) test -count=1 -timeout 30m -v -run 'TestCloud$$' ./internal/lab/openstack/
	FLOWLB_REQUIRE_ROOT=1 FLOWLB_REQUIRE_OPENSTACK=1 $(GO) test -count=1 -timeout 75m -v -run 'TestRealNeutronVIPAndFloatingIP$$|TestRealNeutronCallersToken$$|TestRealNeutronOrphanSweep$$|TestRealOctaviaProvider$$|TestRealOctaviaOVNProvider$$|TestRealOVNDataPlane$$' ./test/e2e/
	FLOWLB_REQUIRE_ROOT=1 FLOWLB_REQUIRE_OPENSTACK=1 $(GO) test -count=1 -timeout 30m -v -run 'TestRealOctaviaClients$$' ./test/e2e/
	FLOWLB_REQUIRE_ROOT=1 FLOWLB_REQUIRE_OPENSTACK=1 $(GO) test -count=1 -timeout 30m -v -run 'TestRealOctaviaBarbican$$' ./test/e2e/
	FLOWLB_REQUIRE_ROOT=1 FLOWLB_REQUIRE_OPENSTACK=1 FLOWLB_REQUIRE_KUBE=1 $(GO) test -count=1 -timeout 40m -v -run 'TestRealOctaviaCPO$$' ./test/e2e/
	FLOWLB_REQUIRE_ROOT=1 FLOWLB_REQUIRE_OPENSTACK=1 FLOWLB_TEMPEST_PROVIDER=flowlb,ovn $(GO) test -count=1 -timeout 180m -v -run 'TestRealOctaviaTempest$$' ./test/e2e/

# Kubernetes' own e2e tests (the pinned e2e.test: every [sig-network]
# Services spec and every [sig-network] Conformance spec the bed can
# run, docs/kubernetes.md) on the lab with real nodes (kubelets with
# containerd) and flowlb installed by kubectl apply -k as the only
# service proxy; and that such a lab leaves nothing on the machine; and
# flowlb's install with Helm and with kubectl apply -k on real nodes,
# its upgrade under held connections and its uninstall. The junit report
# stays in _artifacts/upstream-e2e.
upstream:
	FLOWLB_REQUIRE_ROOT=1 FLOWLB_REQUIRE_KUBE=1 $(GO) test -count=1 -timeout 80m -v -run 'TestKubernetesE2E$$|TestRealNodesLeaveNothing|TestInstall(Helm|Kustomize)$$' ./test/upstream/

# The same specs with the real kube-proxy (nftables, then iptables) in
# place of flowlb, on the same bed, and the side-by-side table of
# docs/kubernetes.md from the three junit reports (run upstream first).
upstream-kube-proxy:
	FLOWLB_E2E_KUBE_PROXY=nftables,iptables FLOWLB_REQUIRE_ROOT=1 FLOWLB_REQUIRE_KUBE=1 $(GO) test -count=1 -timeout 150m -v -run 'TestKubernetesE2EKubeProxy' ./test/upstream/
	$(GO) run ./hack/e2etable flowlb=_artifacts/upstream-e2e/junit.xml \
		"kube-proxy nftables=_artifacts/upstream-e2e-kube-proxy-nftables/junit.xml" \
		"kube-proxy iptables=_artifacts/upstream-e2e-kube-proxy-iptables/junit.xml" > _artifacts/upstream-e2e-table.md
	cat _artifacts/upstream-e2e-table.md

# The whole end-to-end suite again with the agents on the eBPF data plane
# (FLOWLB_E2E_DATAPLANE=ebpf; docs/lab.md, docs/dataplane.md): `unit`
# runs it on nftables. The clients in nodes and pods have their sockets
# made in their cgroup (the lab's socket maker), so their connections are
# translated at connect(); the checks that differ by design say so in
# their test (docs/dataplane.md, "End to end"). It took 9.4 and 13.5
# minutes in two runs on 2 cores shared with other work (load average
# 2-14): the timeout leaves twice the longer.
e2e-ebpf:
	FLOWLB_E2E_DATAPLANE=ebpf FLOWLB_REQUIRE_ROOT=1 FLOWLB_REQUIRE_POSTGRES=1 FLOWLB_REQUIRE_KUBE=1 $(GO) test -count=1 -timeout 30m ./test/e2e/

# The real openstack CLI against a real flowlb server, and
# octavia-tempest-plugin's whole API suite behind a real Keystone with
# Octavia's default (advanced) RBAC.
compat: build
	test/compat/openstack-cli.sh $(BIN)/flowlb
	test/compat/tempest/run.sh --full $(BIN)/flowlb

# The nft command-line programs (Debian 12's and sid's) listing flowlb's
# tables at 10,000 services: 11 minutes on 2026-11-29 with layout 13, 4.5
# with layout 14 (no counter element until traffic comes), the kernel's
# set dumps walking every set from its start for each message; make test
# lists them at 10 (TestNftCLIReadsTables).
nftcli-large:
	FLOWLB_NFTCLI_LARGE=1 FLOWLB_REQUIRE_ROOT=1 $(GO) test -count=1 -timeout 40m -run TestNftCLIReadsTables -v ./internal/node/dataplane/nftables/

# Every fuzz target: fuzz-short for a few seconds each (part of test),
# fuzz for ten minutes in all.
fuzz-short:
	GO=$(GO) hack/fuzz.sh 5s

fuzz:
	GO=$(GO) hack/fuzz.sh 100s

# The benchmark suite (bench/suite, docs/bench-suite.md): bench-kube
# runs the Kubernetes contests (flowlb on its nftables and on its eBPF
# data plane vs kube-proxy nftables and iptables, alternating; 12
# minutes on 2026-11-24 for three contenders at the default 1,000
# Services, 3 rounds, a third more with the fourth; BENCH_CONTENDERS
# picks some, comma-separated), bench-lbaas the LBaaS API
# contests (flowlb vs the real Octavia: its worker needs 1.5–6 minutes
# per 100 load balancers on a 2-core machine, so about 20–30 minutes at
# the default 100, 3 rounds), each into its own record under
# $(BENCH_RAW): `make bench` takes about 45 minutes. The large sizes are
# runs of their own: BENCH_SERVICES=10000 BENCH_ROUNDS=1 about 27 minutes
# (the record kube-10000.json, 2026-12-01; 65 on 2026-11-28),
# BENCH_LBS=1000 BENCH_LB_ROUNDS=1 about an hour per mode (Octavia's
# 1,000 full load balancers took 36 minutes to ACTIVE).
# bench-page
# gathers the records there into bench/results/suite.json and generates
# docs/images/bench and the page from them, so that one contest can be
# measured again without the other. bench-smoke runs every contender
# once at a small size and generates the page in a temporary directory,
# so that the suite cannot rot (part of test).
BENCH_SERVICES ?= 1000
BENCH_ROUNDS ?= 3
BENCH_CONTENDERS ?=
BENCH_LBS ?= 100
BENCH_LB_ROUNDS ?= 3
BENCH_RAW ?= bench/results/raw
# Each size list keeps its own record (the default's kube.json and
# lbaas.json, others e.g. kube-10000.json), so that a run at another
# size replaces none of the default's; bench-page keeps each cell from
# the latest record that measured it.
comma := ,
BENCH_KUBE_RECORD ?= $(if $(filter 1000,$(BENCH_SERVICES)),kube.json,kube-$(subst $(comma),-,$(BENCH_SERVICES)).json)
BENCH_LBAAS_RECORD ?= $(if $(filter 100,$(BENCH_LBS)),lbaas.json,lbaas-$(subst $(comma),-,$(BENCH_LBS)).json)
BENCH_KUBE = FLOWLB_REQUIRE_ROOT=1 FLOWLB_REQUIRE_KUBE=1 $(GO) test -count=1 -run '^$$' -bench KubeProxyVsFlowlb -benchtime 1x -timeout 180m ./test/e2e/
BENCH_LBAAS = $(GO) run ./bench/lbaas

bench: bench-kube bench-lbaas bench-page

bench-kube: deps-test
	mkdir -p $(BENCH_RAW)
	FLOWLB_BENCH_SERVICES=$(BENCH_SERVICES) FLOWLB_BENCH_ROUNDS=$(BENCH_ROUNDS) FLOWLB_BENCH_RECORD=$(abspath $(BENCH_RAW))/$(BENCH_KUBE_RECORD) \
		$(if $(BENCH_CONTENDERS),FLOWLB_BENCH_CONTENDERS="$(BENCH_CONTENDERS)") \
		FLOWLB_BENCH_COMMAND="make bench-kube BENCH_SERVICES=$(BENCH_SERVICES) BENCH_ROUNDS=$(BENCH_ROUNDS)$(if $(BENCH_CONTENDERS), BENCH_CONTENDERS='$(BENCH_CONTENDERS)')" $(BENCH_KUBE)

bench-lbaas: deps-test build
	mkdir -p $(BENCH_RAW)
	$(BENCH_LBAAS) -flowlb $(BIN)/flowlb -sizes $(BENCH_LBS) -rounds $(BENCH_LB_ROUNDS) -record $(BENCH_RAW)/$(BENCH_LBAAS_RECORD) \
		-command "make bench-lbaas BENCH_LBS=$(BENCH_LBS) BENCH_LB_ROUNDS=$(BENCH_LB_ROUNDS)"

bench-page:
	$(GO) run ./bench/suite -raw $(BENCH_RAW) -out bench/results/suite.json -page docs/bench-suite.md -plots docs/images/bench

bench-smoke:
	@set -e; d=$$(mktemp -d); trap 'rm -rf $$d' EXIT; \
	FLOWLB_BENCH_SERVICES=20 FLOWLB_BENCH_ROUNDS=1 FLOWLB_BENCH_RECORD=$$d/raw/kube.json FLOWLB_BENCH_COMMAND="make bench-smoke" $(BENCH_KUBE); \
	$(GOBUILD) -o $$d/flowlb ./cmd/flowlb; \
	$(BENCH_LBAAS) -flowlb $$d/flowlb -sizes 3 -rounds 1 -modes full -members 3 -batch 10 -record $$d/raw/lbaas.json -command "make bench-smoke"; \
	$(GO) run ./bench/suite -raw $$d/raw -out $$d/suite.json -page $$d/bench-suite.md -plots $$d/images; \
	grep -q "kube-proxy nftables" $$d/bench-suite.md; \
	grep -q "| 3 | octavia | 1 |" $$d/bench-suite.md

test: deps-test lint generate-check fuzz-short unit e2e-ebpf upstream bench-smoke compat

demo: deps build
	hack/demo.sh $(BIN)/flowlb
