#!/bin/bash
# SPDX-License-Identifier: MIT
#
# siw-module.sh - build siw.ko (soft-iWARP) for the test guest's kernel.
#
# Usage: tests/vm/siw-module.sh KPKG KROOT
#
# Debian builds its kernels without CONFIG_RDMA_SIW (6.1 and 6.12 alike),
# so the module is built here, out of tree, from the same version's
# linux-source package against its linux-headers: the vermagic and symbol
# CRCs then match the kernel in KROOT (the unpacked KPKG), and the module
# goes to KROOT/lib/modules/KV/extra/siw.ko, where depmod (run here) makes
# modprobe --show-depends find it.  Nothing is installed on the host: the
# packages are fetched with `apt-get download` and unpacked next to KROOT.
#
# The source gets the fixes in tests/vm/siw-*.patch first, each a kernel
# bug that tollfree's tests hit, described in the patch's header (so far:
# a peer that dies mid-connect freed siw's listener, and the kernel
# crashed when the listener was destroyed).
#
# Runs once per kernel and set of patches; a later call finds
# KROOT/../siw.done holding the same patches' checksum and returns.
#
# Exit status: 0 with the module built (or already there), 1 when it could
# not be built: the last line of output says why, and the caller runs
# without siw.
set -euo pipefail

[ $# -eq 2 ] || {
	echo "usage: $0 KPKG KROOT" >&2
	exit 2
}
KPKG=$1
KROOT=$2
KV=${KPKG#linux-image-}
KV=${KV%-unsigned}
K=$(dirname "$KROOT")
DONE="$K/siw.done"
HERE=$(cd "$(dirname "$0")" && pwd)
SUM=$(cat "$HERE"/siw-*.patch 2>/dev/null | sha256sum | cut -d' ' -f1)
[ -f "$DONE" ] && [ "$(cat "$DONE")" = "$SUM" ] && exit 0
rm -f "$DONE"

fail() {
	echo "siw: $*"
	exit 1
}
command -v gcc-12 >/dev/null || fail "no gcc-12 (the compiler of Debian's 6.1 kernels)"
command -v make >/dev/null || fail "no make"
command -v patch >/dev/null || fail "no patch"

# The image's version names the source and header packages to match.
VER=$(apt-cache show "$KPKG" 2>/dev/null | awk '/^Version:/ {print $2; exit}')
[ -n "$VER" ] || fail "apt knows no version of $KPKG"
MAJ=$(echo "$VER" | cut -d. -f1-2) # 6.1
ABI=${KV%-amd64}                    # 6.1.0-57

W="$K/siw-build"
rm -rf "$W"
mkdir -p "$W/debs" "$W/root"
(cd "$W/debs" && apt-get -qq -o APT::Sandbox::User=root download \
	"linux-source-$MAJ=$VER" "linux-headers-$KV=$VER" \
	"linux-headers-$ABI-common=$VER" "linux-kbuild-$MAJ=$VER") >/dev/null 2>&1 ||
	fail "apt-get download of linux-source-$MAJ/linux-headers-$KV $VER failed"
for d in "$W"/debs/*.deb; do dpkg-deb -x "$d" "$W/root"; done
SRC="$W/root/usr/src"
# Only siw's folder is taken out of the source tarball.
tar -xJf "$SRC/linux-source-$MAJ.tar.xz" -C "$W" \
	"linux-source-$MAJ/drivers/infiniband/sw/siw" ||
	fail "no drivers/infiniband/sw/siw in linux-source-$MAJ"
# The headers' Makefile includes its -common twin by absolute path.
sed -i "s#/usr/src/#$SRC/#" "$SRC/linux-headers-$KV/Makefile"
M="$W/linux-source-$MAJ/drivers/infiniband/sw/siw"
PATCHED=""
for p in "$HERE"/siw-*.patch; do
	[ -f "$p" ] || continue
	patch -s -p1 -d "$W/linux-source-$MAJ" <"$p" >"$W/patch.log" 2>&1 || {
		tail -3 "$W/patch.log"
		fail "$(basename "$p") does not apply to linux-source-$MAJ $VER"
	}
	PATCHED="$PATCHED $(basename "$p")"
done
nice -n 10 make -s -C "$SRC/linux-headers-$KV" M="$M" CONFIG_RDMA_SIW=m \
	modules >"$W/make.log" 2>&1 || {
	tail -5 "$W/make.log"
	fail "make of siw.ko failed (log: $W/make.log)"
}
modinfo -F vermagic "$M/siw.ko" | grep -q "^$KV " ||
	fail "siw.ko has vermagic $(modinfo -F vermagic "$M/siw.ko"), not $KV"
mkdir -p "$KROOT/lib/modules/$KV/extra"
cp "$M/siw.ko" "$KROOT/lib/modules/$KV/extra/siw.ko"
depmod -b "$KROOT" "$KV"
rm -rf "$W"
echo "$SUM" >"$DONE"
echo "siw: built siw.ko for $KV from linux-source-$MAJ $VER," \
	"patched:${PATCHED:- none}"
