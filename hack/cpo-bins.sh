#!/usr/bin/env bash
# Builds cloud-provider-openstack's openstack-cloud-controller-manager, the
# unchanged client the end-to-end test TestCloudProviderOpenStack runs
# against flowlb, from the k8s.io/cloud-provider-openstack module served by
# the Go module proxy, and caches it in
#   ${FLOWLB_CPO_CACHE:-/var/cache/flowlb/cpo}/<version>/
# A second run finds it there and returns at once. Prints the cache
# directory on the last line of standard output.
#
# The module's go.mod has replace directives, which `go install mod@version`
# refuses, so the build runs in a writable copy of the module's source.
set -euo pipefail

version="${FLOWLB_CPO_VERSION:-v1.34.1}"
cache="${FLOWLB_CPO_CACHE:-/var/cache/flowlb/cpo}/$version"
bin=openstack-cloud-controller-manager
module=k8s.io/cloud-provider-openstack

log() { echo "cpo-bins: $*" >&2; }

have_bin() {
	[ -x "$cache/$bin" ] && [ -f "$cache/VERSION" ] && [ "$(cat "$cache/VERSION")" = "$version" ]
}

build() {
	local work
	work="$(mktemp -d /tmp/flowlb-cpo-bins.XXXXXX)"
	# shellcheck disable=SC2064
	trap "chmod -R u+w '$work'; rm -rf '$work'" EXIT
	export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
	local dir
	dir="$(cd "$work" && go mod download -json "$module@$version" | sed -n 's/.*"Dir": "\(.*\)",*/\1/p')"
	[ -d "$dir" ] || { log "cannot download $module@$version"; return 1; }
	cp -r "$dir" "$work/src"
	chmod -R u+w "$work/src"
	cd "$work/src"

	# Some proxies have no checksum database: fall back to the proxy's own
	# downloads only when the database cannot be reached.
	if ! go mod download >/dev/null 2>"$work/download.err"; then
		if grep -qiE 'sum\.golang\.org|verifying .*: .*(404|410|dial|lookup)' "$work/download.err"; then
			log "checksum database unreachable; checking sums against the proxy's downloads only"
			export GONOSUMDB='*'
			go mod download >/dev/null
		else
			cat "$work/download.err" >&2
			return 1
		fi
	fi

	local ld="-s -w -X $module/pkg/version.Version=$version"
	mkdir -p "$cache"
	log "building $bin $version (several minutes on 2 cores)"
	local start=$SECONDS
	go build -trimpath -ldflags "$ld" -o "$cache/.$bin.$$" "./cmd/$bin"
	mv -f "$cache/.$bin.$$" "$cache/$bin"
	echo "$version" >"$cache/VERSION"
	log "built in $((SECONDS - start)) s"
}

if have_bin; then
	log "cached in $cache"
else
	(build)
	have_bin || { log "build did not leave $bin in $cache"; exit 1; }
fi
echo "$cache"
