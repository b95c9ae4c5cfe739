#!/usr/bin/env bash
# Builds MetalLB's speaker and controller at a pinned version from the
# go.universe.tf/metallb module, through the Go module proxy, statically
# (CGO_ENABLED=0), and caches them with the module's CRDs in
#   ${FLOWLB_METALLB_CACHE:-/var/cache/flowlb/metallb}/<version>/
#     speaker controller crd/*.yaml VERSION
# A second run finds them there and returns at once. Prints the cache
# directory on the last line of standard output; fails, saying which
# module version the proxy refused, when a dependency cannot be had.
#
# The build happens in a throwaway module outside the repository so that
# MetalLB's dependencies never enter flowlb's go.mod; the metallb module
# has no replace directives, so requiring it at the pinned version is
# enough.
set -euo pipefail

version="${FLOWLB_METALLB_VERSION:-v0.16.2}"
module=go.universe.tf/metallb
cache="${FLOWLB_METALLB_CACHE:-/var/cache/flowlb/metallb}/$version"
bins=(speaker controller)

log() { echo "metallb-bins: $*" >&2; }

have_bins() {
	local b
	for b in "${bins[@]}"; do
		[ -x "$cache/$b" ] || return 1
	done
	[ -d "$cache/crd" ] && [ -f "$cache/VERSION" ] && [ "$(cat "$cache/VERSION")" = "$version" ]
}

build() {
	local work
	work="$(mktemp -d /tmp/flowlb-metallb-bins.XXXXXX)"
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" EXIT
	cd "$work"
	# MetalLB's go.mod asks for a newer patch toolchain than it needs
	# (its go line is what counts): build with the installed one.
	export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
	go mod init flowlb.invalid/metallb-bins >/dev/null 2>&1
	local root
	root="$(go mod download -json "$module@$version" | sed -n 's/.*"Dir": "\(.*\)",*/\1/p')"
	[ -d "$root" ] || { log "cannot download $module@$version"; return 1; }
	go mod edit "-require=$module@$version"
	cat >tools.go <<TOOLS
//go:build tools

package tools

import (
	_ "$module/speaker"
	_ "$module/controller"
)
TOOLS
	# Some proxies have no checksum database: fall back to go.sum from the
	# proxy's own downloads only when the database cannot be reached.
	if ! go mod tidy >/dev/null 2>"$work/tidy.err"; then
		if grep -qiE 'sum\.golang\.org|verifying .*: .*(404|410|dial|lookup)' "$work/tidy.err"; then
			log "checksum database unreachable; checking sums against the proxy's downloads only"
			export GONOSUMDB='*'
			go mod tidy >/dev/null
		else
			cat "$work/tidy.err" >&2
			# A module version the proxy will not serve cannot be
			# replaced by another one without changing what is built.
			local refused
			refused="$(sed -n 's/.*: \([^ :]*@v[^ :]*\): reading .*: 403 Forbidden.*/\1/p' "$work/tidy.err" | sort -u | tr '\n' ' ')"
			[ -z "$refused" ] || log "the Go module proxy refuses ${refused% }: MetalLB $version cannot be built here"
			return 1
		fi
	fi
	mkdir -p "$cache"
	local out="$cache/.build.$$"
	mkdir -p "$out"
	log "building ${bins[*]} $version"
	local start=$SECONDS b
	for b in "${bins[@]}"; do
		go build -trimpath -ldflags "-s -w" -o "$out/$b" "$module/$b"
	done
	rm -rf "$cache/crd"
	mkdir -p "$cache/crd"
	cp "$root"/config/crd/bases/*.yaml "$cache/crd/"
	chmod u+w "$cache"/crd/*.yaml
	for b in "${bins[@]}"; do mv -f "$out/$b" "$cache/$b"; done
	rmdir "$out"
	echo "$version" >"$cache/VERSION"
	log "built in $((SECONDS - start)) s"
}

if have_bins; then
	log "cached in $cache"
else
	(build)
	have_bins || { log "build did not leave the binaries in $cache"; exit 1; }
fi
echo "$cache"
