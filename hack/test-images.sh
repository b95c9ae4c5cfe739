#!/usr/bin/env bash
# Makes the images Kubernetes' e2e tests run on the lab's real nodes (no
# registry and no internet here): a Debian 12 minbase root (debootstrap,
# from the Debian archive apt uses) with the tools the specs call (sh,
# bash, curl, wget, nc, nslookup/dig, ip, ps, ping, iperf), the static agnhost of the
# pinned release and CoreDNS, packed by hack/testimages as one OCI layout
# tar that `ctr images import` takes, tagged as the upstream images the
# specs name, and a pause image. Cached in
#   ${FLOWLB_IMAGE_CACHE:-/var/cache/flowlb/images}/e2e-<key>.tar
# keyed by the package list and the binaries' digests. Prints its path on
# the last line of standard output.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
cache="${FLOWLB_IMAGE_CACHE:-/var/cache/flowlb/images}"
suite="${FLOWLB_DEBIAN_SUITE:-bookworm}"
packages=(bash curl wget netcat-openbsd bind9-dnsutils iproute2 procps iperf iputils-ping ca-certificates)

log() { echo "test-images: $*" >&2; }

kube="$("$here/kube-bins.sh" | tail -n 1)"
coredns="$("$here/coredns-bins.sh" | tail -n 1)"
agnhost="$kube/agnhost"
mirror="${FLOWLB_DEBIAN_MIRROR:-}"
if [ -z "$mirror" ]; then
	# The archive apt already uses (deb822 or one-line sources).
	mirror="$( { cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null || true; } |
		sed -n 's/^URIs: *\(\S*\/debian\)\/*$/\1/p; s/^deb \(\[[^]]*\] \)\?\(\S*\/debian\)\/* .*/\2/p' | head -n 1)"
fi
[ -n "$mirror" ] || { log "no Debian archive found in apt's sources (set FLOWLB_DEBIAN_MIRROR)"; exit 1; }

key="$( { echo "$suite ${packages[*]}"; sha256sum "$agnhost" "$coredns" "$here/testimages/main.go"; } | sha256sum | cut -c1-16)"
out="$cache/e2e-$key.tar"
if [ -f "$out" ]; then
	echo "$out"
	exit 0
fi
if ! command -v debootstrap >/dev/null 2>&1; then
	[ "$(id -u)" -eq 0 ] || { log "need root to install debootstrap"; exit 1; }
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends debootstrap >/dev/null
fi

work="$(mktemp -d /tmp/flowlb-test-images.XXXXXX)"
cleanup() {
	# debootstrap may leave /proc and /sys mounted in the root on failure.
	for m in proc sys dev/pts dev; do umount -l "$work/root/$m" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$cache"
start=$SECONDS
log "debootstrap $suite minbase from $mirror (${packages[*]})"
debootstrap --variant=minbase --include="$(IFS=,; echo "${packages[*]}")" "$suite" "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
	tail -n 30 "$work/debootstrap.log" >&2
	exit 1
}
root="$work/root"
# As the upstream agnhost image: a user and a group of its own, /uploads,
# and porter's certificate beside the binary.
chroot "$root" groupadd -g 50000 group-defined-in-image
chroot "$root" useradd -u 1000 -M -G group-defined-in-image user-defined-in-image
mkdir -p "$root/uploads"
ln -s agnhost "$root/agnhost-2"
porter="$(go mod download -json "k8s.io/kubernetes@$(basename "$kube")" | sed -n 's/.*"Dir": "\(.*\)",*/\1/p')/test/images/agnhost/porter"
cp "$porter/localhost.crt" "$porter/localhost.key" "$root/"
rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/*
tar --numeric-owner --xattrs -C "$root" --exclude=./dev/* --exclude=./proc/* --exclude=./sys/* -cf "$work/rootfs.tar" .
log "root made in $((SECONDS - start)) s ($(du -sh "$work/rootfs.tar" | cut -f1))"
(cd "$here/.." && go run ./hack/testimages -rootfs "$work/rootfs.tar" -file "/agnhost=$agnhost" -file "/coredns=$coredns" -o "$out")
log "images in $out after $((SECONDS - start)) s"
# Older sets (other packages or binaries) are not used again.
for old in "$cache"/e2e-*.tar; do
	[ "$old" = "$out" ] || rm -f "$old"
done
echo "$out"
