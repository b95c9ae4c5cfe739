#!/usr/bin/env bash
# Puts Debian unstable's (sid's) nft beside the machine's own, so that
# TestNftCLIReadsTables (internal/node/dataplane/nftables) can check that the
# newest nftables reads flowlb's tables too, and caches it in
#   ${FLOWLB_NFT_CACHE:-/var/cache/flowlb/nft}/<version>/
# with bin/nft, a wrapper that runs sid's binary on sid's own C library
# through sid's dynamic loader (its libraries need a newer glibc than
# bookworm's, so it cannot run on the machine's). A second run finds it
# there and returns at once. Prints bin/nft's path on the last line.
#
# Why Debian's binary packages and not a build from its source packages:
# the mirror this machine reaches serves sid's binary packages but
# answers 404 for every file of its source packages (the .dsc, the
# .orig.tar.xz and the .debian.tar.xz of nftables and libnftnl alike),
# so there is no source to build from here.
#
# The package lists go to a directory of the script's own, not to the
# machine's apt state: nothing of sid is installed on the machine.
set -euo pipefail

# The version measured last; sid moves on, and then its current one is
# taken (and cached under its own version) rather than failing.
version="${FLOWLB_NFT_VERSION:-1.1.7-3}"
root="${FLOWLB_NFT_CACHE:-/var/cache/flowlb/nft}"
cache="$root/$version"
mirror="${FLOWLB_NFT_MIRROR:-http://deb.debian.org/debian}"
# nft, its libraries, theirs, and sid's C library with its loader.
packages=(nftables libnftables1 libnftnl11 libmnl0 libjansson4 libgmp10 libxtables12 libedit2 libbsd0 libmd0 libtinfo6 libc6)

log() { echo "nft-bins: $*" >&2; }

if [ -x "$cache/bin/nft" ] && [ "$("$cache/bin/nft" --version 2>/dev/null | awk '{print $2}')" = "v${version%%-*}" ]; then
	echo "$cache/bin/nft"
	exit 0
fi
# Another version of sid's, cached when sid had moved on.
for other in "$root"/*/bin/nft; do
	if [ -z "${FLOWLB_NFT_VERSION:-}" ] && [ -x "$other" ] && "$other" --version >/dev/null 2>&1; then
		echo "$other"
		exit 0
	fi
done
if [ "$(id -u)" -ne 0 ]; then
	log "need root to write $cache"
	exit 1
fi

work="$(mktemp -d /tmp/flowlb-nft-bins.XXXXXX)"
# shellcheck disable=SC2064
trap "rm -rf '$work'" EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs" "$work/root"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror sid main" >"$work/sources.list"
apt=(apt-get -q -o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
	-o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o Dir::State::status=/dev/null
	-o APT::Sandbox::User=root)
log "fetching sid's package list"
"${apt[@]}" update >/dev/null
have="$(apt-cache -o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null \
	-o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o Dir::State::status=/dev/null \
	show nftables 2>/dev/null | awk '/^Version:/ {print $2; exit}')"
if [ -z "$have" ]; then
	log "sid lists no nftables"
	exit 1
fi
if [ "$have" != "$version" ]; then
	log "sid has nftables $have now, not $version: taking $have"
	version="$have"
	cache="$root/$version"
fi
log "downloading nftables $version and what it runs on"
(cd "$work/debs" && "${apt[@]}" download "${packages[@]}" >/dev/null)
for d in "$work"/debs/*.deb; do
	dpkg-deb -x "$d" "$work/root"
done

rm -rf "$cache.tmp"
mkdir -p "$cache.tmp/bin"
mv "$work/root" "$cache.tmp/root"
cat >"$cache.tmp/bin/nft" <<EOF
#!/bin/sh
# sid's nft $version on sid's C library (hack/nft-bins.sh).
root="$cache/root"
lib="\$root/usr/lib/x86_64-linux-gnu"
exec "\$lib/ld-linux-x86-64.so.2" --library-path "\$lib" "\$root/usr/sbin/nft" "\$@"
EOF
chmod 755 "$cache.tmp/bin/nft"
rm -rf "$cache"
mv "$cache.tmp" "$cache"
"$cache/bin/nft" --version >&2
echo "$cache/bin/nft"
