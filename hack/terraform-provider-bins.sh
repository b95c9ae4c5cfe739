#!/usr/bin/env bash
# Builds the Terraform OpenStack provider that test/compat's
# TestTerraformOpenStack runs against flowlb, from the
# github.com/terraform-provider-openstack/terraform-provider-openstack
# module served by the Go module proxy, and caches it in
#   ${FLOWLB_TF_PROVIDER_CACHE:-/var/cache/flowlb/terraform-provider-openstack}/<version>/
# as terraform-provider-openstack, the name Terraform's dev_overrides look
# for. A second run finds it there and returns at once. Prints the cache
# directory on the last line of standard output. Terraform itself is not
# built here (no Debian package; see docs/api-compatibility.md).
set -euo pipefail

version="${FLOWLB_TF_PROVIDER_VERSION:-v1.54.1}"
cache="${FLOWLB_TF_PROVIDER_CACHE:-/var/cache/flowlb/terraform-provider-openstack}/$version"
bin=terraform-provider-openstack
module=github.com/terraform-provider-openstack/terraform-provider-openstack

log() { echo "terraform-provider-bins: $*" >&2; }

have_bin() {
	[ -x "$cache/$bin" ] && [ -f "$cache/VERSION" ] && [ "$(cat "$cache/VERSION")" = "$version" ]
}

build() {
	local work
	work="$(mktemp -d /tmp/flowlb-tf-provider.XXXXXX)"
	# shellcheck disable=SC2064
	trap "chmod -R u+w '$work'; rm -rf '$work'" EXIT
	export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
	local dir
	dir="$(cd "$work" && go mod download -json "$module@$version" | sed -n 's/.*"Dir": "\(.*\)",*/\1/p')"
	[ -d "$dir" ] || { log "cannot download $module@$version"; return 1; }
	# A writable copy: the build may update go.sum, which the module
	# cache's read-only copy refuses.
	cp -r "$dir" "$work/src"
	chmod -R u+w "$work/src"
	cd "$work/src"
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
	mkdir -p "$cache"
	log "building $bin $version (several minutes on 2 cores)"
	local start=$SECONDS
	go build -trimpath -ldflags "-s -w" -o "$cache/.$bin.$$" .
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
