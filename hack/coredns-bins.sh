#!/usr/bin/env bash
# Builds the pinned CoreDNS the lab's real nodes run as the cluster DNS
# (and that the e2e test image carries as /coredns), with only the
# plugins the lab needs (no forwarding: nothing leaves the lab), from the
# Go module proxy, and caches it in
#   ${FLOWLB_COREDNS_CACHE:-/var/cache/flowlb/coredns}/<version>/coredns
# A second run finds it there and returns at once. Prints the binary's
# path on the last line of standard output.
set -euo pipefail

version="${FLOWLB_COREDNS_VERSION:-v1.13.1}"
cache="${FLOWLB_COREDNS_CACHE:-/var/cache/flowlb/coredns}/$version"
plugins=(errors log health ready kubernetes cache loadbalance loop reload hosts metrics)

log() { echo "coredns-bins: $*" >&2; }

build() {
	local work
	work="$(mktemp -d /tmp/flowlb-coredns.XXXXXX)"
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" EXIT
	cd "$work"
	export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
	go mod init flowlb.invalid/coredns >/dev/null 2>&1
	go mod edit "-require=github.com/coredns/coredns@$version"
	{
		echo 'package main'
		echo
		echo 'import ('
		echo '	_ "github.com/coredns/coredns/core/dnsserver"'
		echo '	"github.com/coredns/coredns/coremain"'
		for p in "${plugins[@]}"; do echo "	_ \"github.com/coredns/coredns/plugin/$p\""; done
		echo ')'
		echo
		echo 'func main() { coremain.Run() }'
	} >main.go
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
	mkdir -p "$cache"
	log "building CoreDNS $version (plugins: ${plugins[*]})"
	local start=$SECONDS
	go build -trimpath -ldflags "-s -w" -o "$cache/.coredns.$$" .
	mv -f "$cache/.coredns.$$" "$cache/coredns"
	log "built in $((SECONDS - start)) s"
}

if [ ! -x "$cache/coredns" ]; then
	(build)
fi
echo "$cache/coredns"
