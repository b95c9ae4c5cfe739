#!/usr/bin/env bash
# Generates the eBPF data plane's objects and Go bindings into DIR
# (default: the package itself) with Debian's clang and bpf2go pinned in
# go.mod. Only UAPI and libbpf headers are used, so the output depends on
# the toolchain's versions and not on the machine's kernel; CI regenerates
# into a temporary directory and compares with the committed files.
set -euo pipefail
cd "$(dirname "$0")/.."
pkg=internal/node/dataplane/ebpf
out=$(realpath "${1:-$pkg}")
# linux/bpf.h includes asm/types.h, which Debian keeps under the multiarch
# directory (clang's bpf target does not look there).
multiarch=$(gcc -print-multiarch)
cd "$pkg"
# socklb: the socket programs; sockterm: the iterators that destroy
# translated sockets (a separate object, so that a kernel refusing them
# still balances); socktcp: TCP counting from TCP's own counts (the
# same, for a kernel without BTF).
for obj in socklb sockterm socktcp; do
	go tool bpf2go -cc clang -strip llvm-strip -target bpfel -go-package ebpf -output-dir "$out" \
		-cflags "-O2 -g -Wall -Werror -I/usr/include/$multiarch" \
		"$obj" "bpf/$obj.c"
done
