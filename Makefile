# flowlb: the two commands of the README are `make demo` and `make test`.
GO ?= go
STATICCHECK = $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: build test lint unit compat demo deps fuzz fuzz-short

build:
	$(GO) build -o bin/flowlb ./cmd/flowlb

deps:
	hack/install-deps.sh

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...
	$(STATICCHECK) ./...

# Unit, store (SQLite and PostgreSQL), API, root (namespace) and
# Kubernetes-in-the-lab tests.
unit:
	FLOWLB_REQUIRE_ROOT=1 FLOWLB_REQUIRE_POSTGRES=1 FLOWLB_REQUIRE_KUBE=1 $(GO) test -count=1 -timeout 40m ./...

# The real openstack CLI against a real flowlb server, and
# octavia-tempest-plugin's whole API suite behind a real Keystone with
# Octavia's default (advanced) RBAC.
compat: build
	test/compat/openstack-cli.sh bin/flowlb
	test/compat/tempest/run.sh --full bin/flowlb

# Every fuzz target: fuzz-short for a few seconds each (part of test),
# fuzz for ten minutes in all.
fuzz-short:
	GO=$(GO) hack/fuzz.sh 5s

fuzz:
	GO=$(GO) hack/fuzz.sh 100s

test: deps lint fuzz-short unit compat

demo: deps build
	hack/demo.sh bin/flowlb
