#!/usr/bin/env bash
# Builds the pinned Helm (v3) that installs deploy/helm/flowlb in the
# tests (the chart's lint and its agreement with the kustomize manifests,
# test/install; its install, upgrade and uninstall on real nodes,
# test/upstream) from the helm.sh/helm/v3 module, through the Go module
# proxy, and caches it in
#   ${FLOWLB_HELM_CACHE:-/var/cache/flowlb/helm}/<version>/helm
# A second run finds it there and returns at once. Prints the binary's
# path on the last line of standard output.
#
# The build happens in a throwaway module outside the repository, with
# the module's own dependency versions, and the link-time settings of
# Helm's Makefile (its version, and the Kubernetes version it assumes for
# `helm template` and `helm lint`, from the client-go it is built with).
set -euo pipefail

version="${FLOWLB_HELM_VERSION:-v3.19.5}"
cache="${FLOWLB_HELM_CACHE:-/var/cache/flowlb/helm}/$version"

log() { echo "helm-bins: $*" >&2; }

build() {
	local work
	work="$(mktemp -d /tmp/flowlb-helm-bins.XXXXXX)"
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" EXIT
	cd "$work"
	export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
	go mod init flowlb.invalid/helm-bins >/dev/null 2>&1
	go mod edit "-require=helm.sh/helm/v3@$version"
	cat >tools.go <<EOF
//go:build tools

package tools

import _ "helm.sh/helm/v3/cmd/helm"
EOF
	# Some proxies have no checksum database: fall back to go.sum from the
	# proxy's own downloads only when the database cannot be reached.
	if ! go mod tidy >/dev/null 2>"$work/tidy.err"; then
		if grep -qiE 'sum\.golang\.org|verifying .*: .*(404|410|dial|lookup)' "$work/tidy.err"; then
			log "checksum database unreachable; checking sums against the proxy's downloads only"
			export GONOSUMDB='*'
			go mod tidy >/dev/null
		else
			cat "$work/tidy.err" >&2
			return 1
		fi
	fi
	local k8s major minor
	k8s="$(go list -f '{{.Version}}' -m k8s.io/client-go)" # v0.<minor>.<patch>
	minor="${k8s#v0.}"
	minor="${minor%%.*}"
	major=1
	local ld="-s -w -X helm.sh/helm/v3/internal/version.version=$version -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
	ld+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=$major -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$minor"
	ld+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=$major -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor"
	mkdir -p "$cache"
	log "building helm $version (client-go $k8s; a few minutes on 2 cores)"
	local start=$SECONDS
	go build -trimpath -ldflags "$ld" -o "$cache/.helm.$$" helm.sh/helm/v3/cmd/helm
	mv -f "$cache/.helm.$$" "$cache/helm"
	log "built in $((SECONDS - start)) s"
}

if [ ! -x "$cache/helm" ]; then
	(build)
	[ -x "$cache/helm" ] || { log "build did not leave $cache/helm"; exit 1; }
fi
echo "$cache/helm"
