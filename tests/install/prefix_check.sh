#!/bin/sh
# SPDX-License-Identifier: MIT
# install_prefix: "cmake --install BUILD --prefix P" gives a usable P:
# tollfree.pc names P (not the prefix configured at build time), so
# pkg-config points at P's headers and library, and the installed tools
# find P's library without LD_LIBRARY_PATH (an $ORIGIN-relative RUNPATH).
# Usage: prefix_check.sh BUILD_DIR
set -eu
build=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
p=$dir/prefix
fail() { echo "install_prefix: FAIL: $*"; exit 1; }

cmake --install "$build" --prefix "$p" >"$dir/install.log" 2>&1 ||
	{ cat "$dir/install.log"; fail "cmake --install"; }
pc=$(find "$p" -name tollfree.pc)
[ -n "$pc" ] || fail "no tollfree.pc installed"
export PKG_CONFIG_PATH="${pc%/tollfree.pc}"
cflags=$(pkg-config --cflags tollfree)
libs=$(pkg-config --libs tollfree)
echo "pkg-config: $cflags | $libs"
[ "$(pkg-config --variable=prefix tollfree)" = "$p" ] ||
	fail "prefix is $(pkg-config --variable=prefix tollfree), not $p"
[ -f "$(pkg-config --variable=includedir tollfree)/tollfree/tollfree.h" ] ||
	fail "includedir has no tollfree/tollfree.h"
ls "$(pkg-config --variable=libdir tollfree)"/libtollfree.so >/dev/null ||
	fail "libdir has no libtollfree.so"
for tool in "tollfree-info -v" "tollfree-bench -h"; do
	env -u LD_LIBRARY_PATH "$p/bin/"$tool >"$dir/out" 2>&1 ||
		{ cat "$dir/out"; fail "$tool does not run"; }
	tool=${tool% -*}
	# It must be P's library, not one installed elsewhere.
	env -u LD_LIBRARY_PATH ldd "$p/bin/$tool" | grep -q "=> $p/" ||
		fail "$tool does not load the library from $p"
done
echo "install_prefix: PASS"
