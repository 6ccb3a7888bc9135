#!/bin/bash
# deps.sh - install the Debian 12 packages the build, the tests and the
# benchmarks need, only those that are missing.  Run as root.
# Usage: scripts/deps.sh build|test|bench
set -euo pipefail

build_pkgs="build-essential cmake pkg-config libibverbs-dev librdmacm-dev
	    libssl-dev"
test_pkgs="$build_pkgs clang libclang-rt-14-dev clang-format iproute2
	   rdma-core ibverbs-providers qemu-system-x86 busybox-static cpio kmod
	   xz-utils perftest gcc-12 make patch"
bench_pkgs="$build_pkgs ucx-utils libfabric-bin sockperf perftest"

case "${1:-build}" in
build) want=$build_pkgs ;;
test) want=$test_pkgs ;;
bench) want=$bench_pkgs ;;
*) echo "usage: $0 build|test|bench" >&2; exit 2 ;;
esac

missing=()
for p in $want; do
	st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	[ "$st" = "install ok installed" ] || missing+=("$p")
done
((${#missing[@]})) || exit 0
if [ "$(id -u)" != 0 ]; then
	echo "deps.sh: missing packages: ${missing[*]} (run as root to install)" >&2
	exit 1
fi
echo "deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
