#!/bin/bash
# SPDX-License-Identifier: MIT
# install-check.sh - tollfree as a user outside the tree gets it:
#
#  1. installed into a temporary prefix ("cmake --install --prefix P"):
#     the installed tools run without LD_LIBRARY_PATH, and a small program
#     (tests/install/app.c) builds and runs with pkg-config and with
#     find_package(tollfree);
#  2. as a Debian package built with CPack, installed with
#     "apt-get install ./tollfree_*.deb" (root only; removed again at the
#     end): the same checks against /usr.
#
# Usage: scripts/install-check.sh [BUILD_DIR]
# Without BUILD_DIR it configures and builds its own tree for /usr (the
# multiarch library directory a Debian package wants) in a temporary
# directory.  It ends with "install-check: N passed, N failed" and exits
# non-zero when anything failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
top=$PWD
work=$(mktemp -d /tmp/tollfree-install-check.XXXXXX)
passed=0 failed=0
deb_installed=0

cleanup() {
	if ((deb_installed)); then
		echo "=== removing the tollfree package"
		DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq tollfree \
			>/dev/null || echo "install-check: apt-get remove failed"
		# Its postrm (ldconfig) leaves a "config-files" record.
		dpkg --purge tollfree >/dev/null 2>&1
	fi
	rm -rf "$work"
}
trap cleanup EXIT

# check NAME COMMAND...: run a check, log its output, count it.
check() {
	local name=$1 log
	shift
	log=$work/log.$passed.$failed
	if "$@" >"$log" 2>&1; then
		echo "install-check: ok: $name"
		passed=$((passed + 1))
		return 0
	fi
	echo "install-check: FAIL: $name"
	sed 's/^/    /' "$log" | tail -40
	failed=$((failed + 1))
	return 1
}

# uses_lib_from BINARY DIR: the binary loads libtollfree from DIR
# (compared as real paths: /lib is /usr/lib on a merged-/usr system).
uses_lib_from() {
	local lib
	lib=$(env -u LD_LIBRARY_PATH ldd "$1" |
		sed -n 's/.*libtollfree\.so\.0 => \([^ ]*\) .*/\1/p')
	echo "$1 loads ${lib:-no libtollfree}"
	[ -n "$lib" ] &&
		[ "$(readlink -f "$(dirname "$lib")")" = "$(readlink -f "$2")" ]
}

# run_tools BINDIR LIBDIR: the installed tools run, on their own.
run_tools() {
	env -u LD_LIBRARY_PATH "$1/tollfree-info" -d &&
		env -u LD_LIBRARY_PATH "$1/tollfree-bench" -h >/dev/null &&
		uses_lib_from "$1/tollfree-info" "$2"
}

# pc PCPATH ARGS...: pkg-config on PCPATH only (empty: the system's).
pc() {
	local pcpath=$1
	shift
	if [ -n "$pcpath" ]; then
		PKG_CONFIG_PATH=$pcpath pkg-config "$@"
	else
		env -u PKG_CONFIG_PATH pkg-config "$@"
	fi
}

# pc_prefix_is PCPATH PREFIX: tollfree.pc names PREFIX.
pc_prefix_is() {
	local got
	got=$(pc "$1" --variable=prefix tollfree) || return 1
	echo "prefix=$got"
	[ "$got" = "$2" ]
}

# app_pkgconfig OUT LIBDIR PCPATH [RPATH]: build app.c with pkg-config
# and run it.
app_pkgconfig() {
	local out=$1 libdir=$2 pcpath=$3 rpath=${4:-} flags
	flags=$(pc "$pcpath" --cflags --libs tollfree) || return 1
	echo "cc app.c $flags"
	# shellcheck disable=SC2086 # word splitting of the flags is wanted
	cc -Wall -Werror -o "$out" "$top/tests/install/app.c" $flags \
		${rpath:+-Wl,-rpath,"$rpath"} &&
		env -u LD_LIBRARY_PATH "$out" &&
		uses_lib_from "$out" "$libdir"
}

# app_cmake DIR LIBDIR [PREFIX]: build tests/install with find_package.
app_cmake() {
	local dir=$1 libdir=$2 prefix=${3:-}
	cmake -S "$top/tests/install" -B "$dir" \
		${prefix:+-DCMAKE_PREFIX_PATH="$prefix"} &&
		cmake --build "$dir" &&
		env -u LD_LIBRARY_PATH "$dir/app" &&
		uses_lib_from "$dir/app" "$libdir"
}

# deb_depends_on DEB PKG: the package's Depends name PKG.
deb_depends_on() {
	dpkg-deb -f "$1" Depends | tee /dev/stderr | grep -q "$2"
}

# apt_install DIR FILE: install a local .deb as users do.
apt_install() {
	(cd "$1" && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "./$2")
}

build_tree() {
	cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DCMAKE_INSTALL_PREFIX=/usr -DBUILD_TESTING=OFF &&
		nice -n 10 cmake --build "$build" -j"$(nproc)"
}

# ------------------------------------------------------------- build
if [ $# -ge 1 ]; then
	build=$(cd "$1" && pwd) || exit 2
	echo "=== using the build in $build"
else
	build=$work/build
	echo "=== building in $build (prefix /usr)"
	if ! check "build" build_tree; then
		echo "install-check: $passed passed, $failed failed"
		exit 1
	fi
fi
libdir_rel=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:[A-Z]*=//p' "$build/CMakeCache.txt")
libdir_rel=${libdir_rel:-lib}

# ------------------------------------------------------ prefix install
prefix=$work/prefix
echo "=== cmake --install into $prefix"
if check "cmake --install --prefix" \
	cmake --install "$build" --prefix "$prefix"; then
	plib=$prefix/$libdir_rel
	check "prefix: tools run without LD_LIBRARY_PATH" \
		run_tools "$prefix/bin" "$plib"
	check "prefix: pkg-config names the prefix" \
		pc_prefix_is "$plib/pkgconfig" "$prefix"
	# Outside the system's directories a program needs an rpath (or
	# LD_LIBRARY_PATH) to find the library; pkg-config does not add one.
	check "prefix: app built with pkg-config runs" \
		app_pkgconfig "$work/app-pc" "$plib" "$plib/pkgconfig" "$plib"
	check "prefix: app built with find_package runs" \
		app_cmake "$work/app-cmake" "$plib" "$prefix"
fi

# ----------------------------------------------------------- .deb
echo "=== Debian package"
debdir=$work/deb
if check "cpack builds the .deb" \
	cpack --config "$build/CPackConfig.cmake" -G DEB -B "$debdir"; then
	deb=$(ls "$debdir"/tollfree_*.deb)
	echo "    $deb"
	dpkg-deb -I "$deb" | sed -n 's/^ *\(Depends\|Version\|Architecture\):/    \1:/p'
	check "the .deb depends on libssl3" deb_depends_on "$deb" libssl3
	if [ "$(id -u)" != 0 ]; then
		echo "install-check: not root: the .deb is not installed"
	elif dpkg-query -W -f='${Status}' tollfree 2>/dev/null |
		grep -q "install ok installed"; then
		echo "install-check: FAIL: a tollfree package is installed" \
			"already; remove it first (apt-get remove tollfree)"
		failed=$((failed + 1))
	elif check "apt-get install ./$(basename "$deb")" \
		apt_install "$debdir" "$(basename "$deb")"; then
		deb_installed=1
		dlib=$(dirname "$(dpkg -L tollfree | grep 'libtollfree\.so\.0$')")
		check "deb: tools run" run_tools /usr/bin "$dlib"
		check "deb: pkg-config names /usr" pc_prefix_is "" /usr
		check "deb: app built with pkg-config runs" \
			app_pkgconfig "$work/app-deb-pc" "$dlib" ""
		check "deb: app built with find_package runs" \
			app_cmake "$work/app-deb-cmake" "$dlib"
	fi
fi

echo "install-check: $passed passed, $failed failed"
((failed == 0))
