#!/bin/bash
# fuzz.sh - build the libFuzzer targets (fuzz/) with clang and run each one.
#
# Usage: scripts/fuzz.sh [--seed] [TARGET...]
#   TARGET   fuzz_wire, fuzz_soft_tcp_frame, fuzz_soft_addr, fuzz_config,
#            fuzz_session_accept, fuzz_stats (default: all; fuzz_session_accept needs
#            root for its private network namespace and is skipped
#            without it)
#   --seed   regenerate the seed corpus fuzz/corpus/*/seed-* with the
#            library's own encoders (fuzz/gen_corpus.c), then exit
# Environment:
#   FUZZ_SECONDS  run time per target (default 60; 0: only replay the
#                 checked-in corpus, which includes the regress-* inputs)
#   FUZZ_BUILD    build directory (default build-fuzz)
#
# Each target first replays its checked-in corpus fuzz/corpus/<target>
# (seeds and regress-* inputs of crashes found before), then fuzzes for
# FUZZ_SECONDS.  New inputs go to $FUZZ_BUILD/corpus/<target>, never into
# the source tree.  A crash, leak, sanitizer report or timeout leaves its
# input in $FUZZ_BUILD/crashes/ and makes the script exit 1.  Minimize a
# crash with:  $FUZZ_BUILD/fuzz/<target> -minimize_crash=1 -runs=100000 FILE
# and add it as fuzz/corpus/<target>/regress-<name>.
set -uo pipefail
cd "$(dirname "$0")/.."
top=$PWD
bdir=${FUZZ_BUILD:-build-fuzz}
secs=${FUZZ_SECONDS:-60}
all_targets=(fuzz_wire fuzz_soft_tcp_frame fuzz_soft_addr fuzz_config
	fuzz_session_accept fuzz_stats)

# -max_len per target: the largest input that means something to it.
declare -A max_len=(
	[fuzz_wire]=8192           # a few messages of up to 4 KiB + header
	[fuzz_soft_tcp_frame]=2048 # a stream of headers with small payloads
	[fuzz_soft_addr]=272       # TF_QP_ADDR_MAX + 16 (too long is refused)
	[fuzz_config]=300          # longer than any value or name
	[fuzz_session_accept]=2048 # HELLO + OPEN with a blob and private data
	[fuzz_stats]=4096          # a dump of a few records of a few counters
)

seed=0
targets=()
for a in "$@"; do
	case $a in
	--seed) seed=1 ;;
	fuzz_*) [ -n "${max_len[$a]:-}" ] || { echo "fuzz.sh: unknown target $a" >&2; exit 2; }
		targets+=("$a") ;;
	*) echo "usage: $0 [--seed] [TARGET...]" >&2; exit 2 ;;
	esac
done
((${#targets[@]})) || targets=("${all_targets[@]}")

# Packages: the build's (deps.sh) plus clang and its libFuzzer runtime.
scripts/deps.sh build || exit 1
missing=()
for p in clang libclang-rt-14-dev; do
	st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	[ "$st" = "install ok installed" ] || missing+=("$p")
done
if ((${#missing[@]})); then
	if [ "$(id -u)" != 0 ]; then
		echo "fuzz.sh: missing packages: ${missing[*]} (run as root)" >&2
		exit 1
	fi
	echo "fuzz.sh: installing ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends "${missing[@]}" >/dev/null ||
		exit 1
fi

echo "=== [fuzz] configure + build ($bdir, clang, ASan+UBSan+libFuzzer)"
mkdir -p "$bdir"
if ! CC=clang cmake -S "$top" -B "$bdir" -DTOLLFREE_FUZZ=ON \
	-DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DTOLLFREE_WERROR=ON >"$bdir/cmake.log" 2>&1; then
	cat "$bdir/cmake.log"
	echo "fuzz.sh: configure failed"
	exit 1
fi
if ! cmake --build "$bdir" -j"$(nproc)" --target fuzz >"$bdir/build.log" 2>&1; then
	tail -n 40 "$bdir/build.log"
	echo "fuzz.sh: build failed"
	exit 1
fi

if ((seed)); then
	rm -f fuzz/corpus/*/seed-*
	"$bdir/fuzz/fuzz_gen_corpus" fuzz/corpus || exit 1
	echo "fuzz.sh: seed corpus written to fuzz/corpus"
	exit 0
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$bdir/crashes"
failed=0
summary=()
for t in "${targets[@]}"; do
	if [ "$t" = fuzz_session_accept ] && [ "$(id -u)" != 0 ]; then
		summary+=("$t: skipped (needs root for unshare(CLONE_NEWNET))")
		continue
	fi
	exe=$bdir/fuzz/$t
	seeds=fuzz/corpus/$t
	work=$bdir/corpus/$t
	log=$bdir/$t.log
	mkdir -p "$work"
	common=(-max_len="${max_len[$t]}" -timeout=10 -rss_limit_mb=2048
		-artifact_prefix="$bdir/crashes/$t-" -print_final_stats=1)

	echo "=== [fuzz] $t: replay $(ls "$seeds" | wc -l) checked-in inputs"
	if ! "$exe" "${common[@]}" -runs=0 "$seeds" >"$log.replay" 2>&1; then
		tail -n 30 "$log.replay"
		summary+=("$t: FAILED on the checked-in corpus (see $log.replay)")
		failed=1
		continue
	fi
	if ((secs == 0)); then
		summary+=("$t: corpus replay ok")
		continue
	fi
	echo "=== [fuzz] $t: fuzzing for ${secs}s"
	# The first directory receives new inputs; the seeds are only read.
	"$exe" "${common[@]}" -max_total_time="$secs" "$work" "$seeds" \
		>"$log" 2>&1
	rc=$?
	runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
	took=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\2/p' "$log" | tail -1)
	cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
	if ((rc != 0)) || [ -z "$runs" ]; then
		grep -E 'ERROR|runtime error|invariant failed|SUMMARY|Test unit written' "$log" | head -n 10
		art=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
		summary+=("$t: CRASH (exit $rc) after ${runs:-?} runs; input ${art:-see $log}")
		failed=1
	else
		summary+=("$t: $runs runs in ${took}s ($((runs / (took ? took : 1)))/s), $cov, corpus $(ls "$work" | wc -l) files")
	fi
done

echo
echo "=== [fuzz] summary"
printf '  %s\n' "${summary[@]}"
if ((failed)); then
	echo "fuzz: FAILED (crash inputs kept in $bdir/crashes)"
	exit 1
fi
echo "fuzz: ok"
