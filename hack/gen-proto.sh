#!/usr/bin/env bash
# Regenerates the Go code of api/proto. Needs Debian's protobuf-compiler and
# the two pinned plugins below; the generated code is committed, so builds
# and CI need none of this.
set -euo pipefail
cd "$(dirname "$0")/.."
GOBIN="$(go env GOPATH)/bin"
export GOBIN PATH="$GOBIN:$PATH"
go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0
protoc --proto_path=api/proto --go_out=api/proto --go_opt=paths=source_relative \
	--go-grpc_out=api/proto --go-grpc_opt=paths=source_relative \
	flowlb/agent/v1/agent.proto
