#!/bin/bash
# bench.sh - the main job: build, then benchmark tollfree on the default
# provider and print the comparison table.  Installs missing Debian
# packages (scripts/deps.sh bench) first.  Extra arguments go to
# `tollfree-bench crr` (see tollfree-bench(1)).
#
# Environment: BUILD_DIR (default build-bench).
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD
build=${BUILD_DIR:-$top/build-bench}

scripts/deps.sh bench
cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
bench=$build/tools/tollfree-bench

echo "== machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) CPUs, kernel $(uname -r)"
"$build/tools/tollfree-info" -d | sed 's/^/   /'
echo
if "$bench" crr --help >/dev/null 2>&1; then
	"$bench" crr "$@"
	echo
fi
# The same sessions under load: 3 client processes x 4 threads against one
# server thread, then two (listeners sharing the port), next to TCP.
if "$bench" load --help >/dev/null 2>&1; then
	for s in 1 2; do
		"$bench" load --clients 3 --threads 4 --server-threads "$s"
		echo
	done
fi
"$bench" reg
echo
BUILD_DIR=$build bench/peers/run.sh
