# Sourced by the *-bins.sh scripts that build a client from a Go module
# the module proxy serves and cache it. Those modules' go.mod files have
# replace directives, which `go install mod@version` refuses, so the build
# runs in a writable copy of the module's source (the build may also
# update go.sum, which the module cache's read-only copy refuses).
#
# The sourcing script sets: name (for log lines), module, version, cache
# (the directory for this version), bin, pkg (the package to build,
# relative to the module) and ldflags; then calls module_bin, which builds
# unless the cache holds this version, and prints the cache directory on
# the last line of standard output.

log() { echo "$name: $*" >&2; }

have_bin() {
	[ -x "$cache/$bin" ] && [ -f "$cache/VERSION" ] && [ "$(cat "$cache/VERSION")" = "$version" ]
}

build() {
	local work
	work="$(mktemp -d "/tmp/flowlb-$name.XXXXXX")"
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

	mkdir -p "$cache"
	log "building $bin $version (several minutes on 2 cores)"
	local start=$SECONDS
	go build -trimpath -ldflags "$ldflags" -o "$cache/.$bin.$$" "$pkg"
	mv -f "$cache/.$bin.$$" "$cache/$bin"
	echo "$version" >"$cache/VERSION"
	log "built in $((SECONDS - start)) s"
}

module_bin() {
	if have_bin; then
		log "cached in $cache"
	else
		(build)
		have_bin || { log "build did not leave $bin in $cache"; exit 1; }
	fi
	echo "$cache"
}
