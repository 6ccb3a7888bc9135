#!/bin/bash
# fuzz.sh - build the libFuzzer targets (fuzz/) with clang and run each one.
#
# Usage: scripts/fuzz.sh [--seed] [TARGET...]
#   TARGET   fuzz_wire, fuzz_soft_tcp_frame, fuzz_soft_addr, fuzz_config,
#            fuzz_verbs_addr, fuzz_session_accept, fuzz_stats (default: all;
#            fuzz_session_accept needs a private network namespace (root)
#            and is skipped where unshare(CLONE_NEWNET) is refused)
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
# input in $FUZZ_BUILD/crashes/ and counts the target as failed.  Minimize
# a crash with:  $FUZZ_BUILD/fuzz/<target> -minimize_crash=1 -runs=100000
# FILE and add it as fuzz/corpus/<target>/regress-<name>.
#
# The last line is "fuzz: P passed, F failed, S skipped", one count per
# target (scripts/test.sh adds these to its tally): a target that could not
# run is skipped, never passed.  Exit status: 1 if a target failed (or the
# build did), 77 if every target was skipped, else 0.
set -uo pipefail
cd "$(dirname "$0")/.."
top=$PWD
bdir=${FUZZ_BUILD:-build-fuzz}
secs=${FUZZ_SECONDS:-60}
all_targets=(fuzz_wire fuzz_soft_tcp_frame fuzz_soft_addr fuzz_config
	fuzz_verbs_addr fuzz_session_accept fuzz_stats)

# -max_len per target: the largest input that means something to it.
declare -A max_len=(
	[fuzz_wire]=8192           # a few messages of up to 4 KiB + header
	[fuzz_soft_tcp_frame]=2048 # a stream of headers with small payloads
	[fuzz_soft_addr]=272       # TF_QP_ADDR_MAX + 16 (too long is refused)
	[fuzz_config]=300          # longer than any value or name
	[fuzz_verbs_addr]=64       # VERBS_ADDR_LEN 40 (other lengths are refused)
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
passed=0 failed=0 skipped=0
summary=()
for t in "${targets[@]}"; do
	# Try the namespace itself rather than the uid: root in a container
	# without CAP_SYS_ADMIN cannot have one either, and the target would
	# die in its initializer, which is no finding about the library.
	if [ "$t" = fuzz_session_accept ] && ! unshare --net true 2>/dev/null; then
		summary+=("$t: SKIPPED (unshare(CLONE_NEWNET) refused: needs root)")
		skipped=$((skipped + 1))
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
		failed=$((failed + 1))
		continue
	fi
	if ((secs == 0)); then
		summary+=("$t: corpus replay ok")
		passed=$((passed + 1))
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
		failed=$((failed + 1))
	else
		summary+=("$t: $runs runs in ${took}s ($((runs / (took ? took : 1)))/s), $cov, corpus $(ls "$work" | wc -l) files")
		passed=$((passed + 1))
	fi
done

echo
echo "=== [fuzz] summary"
printf '  %s\n' "${summary[@]}"
((failed == 0)) || echo "fuzz: crash inputs kept in $bdir/crashes"
echo "fuzz: $passed passed, $failed failed, $skipped skipped"
((failed == 0)) || exit 1
((passed > 0)) || exit 77
exit 0
