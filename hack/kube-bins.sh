#!/usr/bin/env bash
# Builds the pinned Kubernetes binaries the lab runs (kube-apiserver,
# kube-controller-manager, kube-proxy; for real nodes kubelet and
# kube-scheduler; kubectl of the same release) and Kubernetes' own e2e
# tests with their test server and runner (e2e.test, agnhost, ginkgo)
# from the k8s.io/kubernetes module, through the Go module proxy, and
# caches them in
#   ${FLOWLB_KUBE_CACHE:-/var/cache/flowlb/kube}/<version>/
# A second run finds them there and returns at once. Also installs Debian's
# etcd-server (etcd) and kubernetes-client (kubectl) when they are missing.
# Prints the cache directory on the last line of standard output.
#
# The build happens in a throwaway module outside the repository: the
# kubernetes module refers to its staging modules (k8s.io/api, client-go,
# ...) as v0.0.0 with local replace paths that a module consumer cannot
# follow, so the throwaway module replaces each of them with its published
# version (v0.<minor>.<patch> for v1.<minor>.<patch>).
set -euo pipefail

version="${FLOWLB_KUBE_VERSION:-v1.34.4}"
staging="v0.${version#v1.}"
cache="${FLOWLB_KUBE_CACHE:-/var/cache/flowlb/kube}/$version"
bins=(kube-apiserver kube-controller-manager kube-proxy kubelet kube-scheduler kubectl)
# Built apart: agnhost from test/images, e2e.test with go test -c, and
# the ginkgo CLI of the version e2e.test is built with, which runs it in
# parallel processes.
extra=(agnhost e2e.test ginkgo)

log() { echo "kube-bins: $*" >&2; }

install_debs() {
	local missing=()
	command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
	command -v kubectl >/dev/null 2>&1 || missing+=(kubernetes-client)
	[ ${#missing[@]} -eq 0 ] && return 0
	if [ "$(id -u)" -ne 0 ]; then
		log "need root to install ${missing[*]}"
		return 1
	fi
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	local apt=(apt-get -o DPkg::Lock::Timeout=600)
	if ! "${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
		"${apt[@]}" update -qq
		"${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	fi
}

have_bins() {
	local b
	for b in "${bins[@]}" "${extra[@]}"; do
		[ -x "$cache/$b" ] || return 1
	done
	[ -f "$cache/VERSION" ] && [ "$(cat "$cache/VERSION")" = "$version" ]
}

build() {
	local work
	work="$(mktemp -d /tmp/flowlb-kube-bins.XXXXXX)"
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" EXIT
	cd "$work"
	export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
	go mod init flowlb.invalid/kube-bins >/dev/null 2>&1

	# The staging modules, from the kubernetes module's own replace block.
	local modfile
	modfile="$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
	[ -f "$modfile" ] || { log "cannot download k8s.io/kubernetes@$version"; return 1; }
	local mods
	mods="$(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$modfile")"
	[ -n "$mods" ] || { log "no staging modules found in $modfile"; return 1; }
	local m args=()
	for m in $mods; do
		args+=("-replace=$m=$m@$staging")
	done
	go mod edit "${args[@]}" "-require=k8s.io/kubernetes@$version"

	local pkgs=()
	for b in "${bins[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
	pkgs+=(k8s.io/kubernetes/test/images/agnhost github.com/onsi/ginkgo/v2/ginkgo)
	# e2e.test is the test binary of test/e2e: the module graph must also
	# hold what its test files import (a dependency's tests are not part
	# of this module's "all").
	local root
	root="$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/.*"Dir": "\(.*\)",*/\1/p')"
	local testimports
	testimports="$(sed -n '/^import (/,/^)/p' "$root/test/e2e/e2e_test.go" | grep -o '"[^"]*\.[^"]*"' | tr -d '"' | sort -u)"
	cat >tools.go <<EOF
//go:build tools

package tools

import (
$(for p in "${pkgs[@]}" $testimports; do echo "	_ \"$p\""; done)
)
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

	local pkgv=k8s.io/component-base/version cgv=k8s.io/client-go/pkg/version
	local minor="${version#v1.}"
	minor="${minor%%.*}"
	local date ld=""
	date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
	for v in $pkgv $cgv; do
		ld+=" -X $v.gitVersion=$version -X $v.gitMajor=1 -X $v.gitMinor=$minor"
		ld+=" -X $v.gitTreeState=clean -X $v.buildDate=$date"
	done
	mkdir -p "$cache"
	local out="$cache/.build.$$"
	mkdir -p "$out"
	log "building ${bins[*]} ${extra[*]} $version (about 25 minutes on 2 cores)"
	local start=$SECONDS
	go build -trimpath -ldflags "-s -w$ld" -o "$out/" "${pkgs[@]}"
	log "built ${bins[*]} agnhost in $((SECONDS - start)) s; building e2e.test"
	go test -c -trimpath -ldflags "-s -w$ld" -o "$out/e2e.test" k8s.io/kubernetes/test/e2e
	for b in "${bins[@]}" "${extra[@]}"; do mv -f "$out/$b" "$cache/$b"; done
	rmdir "$out"
	echo "$version" >"$cache/VERSION"
	log "built in $((SECONDS - start)) s"
}

install_debs
if have_bins; then
	log "cached in $cache"
else
	(build)
	have_bins || { log "build did not leave the binaries in $cache"; exit 1; }
fi
echo "$cache"
