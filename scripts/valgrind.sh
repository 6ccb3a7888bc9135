#!/bin/bash
# valgrind.sh - run a subset of the tests under valgrind memcheck.
#
# Usage: scripts/valgrind.sh BUILD_DIR [TEST...]
#   BUILD_DIR  a normal (non-sanitizer) build with its tests built, e.g.
#              the release build of scripts/test.sh
#   TEST       test executables to run (default: the list below)
#
# Every test (and any process it forks: valgrind follows fork) runs with
# --leak-check=full --errors-for-leak-kinds=definite
# --error-exitcode=100 (100 rather than 1, so that a memcheck error is told
# apart from the test's own failure): a memcheck error or a definite leak
# fails it, as does the test failing; exit 77 counts as a skip.  The last
# line is "valgrind: P passed, F failed, S skipped", one count per test
# (scripts/test.sh adds these to its tally).  Exit status: 1 if a test
# failed, 77 if every test skipped (nothing was checked), else 0.
# scripts/valgrind.supp holds the suppressions, each with its reason.
#
# The default list: tests valgrind can follow.  Left out: the shm
# conformance tests (peers write into our memory from another process and
# spin on shared flags, which memcheck's serialized threads make crawl),
# rcache_nouffd (it checks userfaultfd errnos; valgrind does not implement
# userfaultfd) and session_handshake (its 300 ms handshake deadlines are
# meant for native speed).  Session timeouts are raised for the same
# reason (TOLLFREE_SESSION_TIMEOUT_MS, unless set already).
set -uo pipefail

if [ $# -lt 1 ] || [ ! -d "$1/tests" ]; then
	echo "usage: $0 BUILD_DIR [TEST...]  (BUILD_DIR/tests must exist)" >&2
	exit 2
fi
bdir=$(cd "$1" && pwd)
shift
cd "$(dirname "$0")/.."
tests=("$@")
((${#tests[@]})) || tests=(core_config rcache_unit rcache_memlock rcache_soft
	pool_basic pool_mw soft_reg soft_tcp_frames session_config)

if ! command -v valgrind >/dev/null; then
	if [ "$(id -u)" != 0 ]; then
		echo "valgrind.sh: valgrind missing (apt-get install valgrind)" >&2
		exit 1
	fi
	echo "valgrind.sh: installing valgrind"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends valgrind >/dev/null || exit 1
fi

logdir=$bdir/valgrind
mkdir -p "$logdir"
passed=0 failed=0 skipped=0
results=()
for t in "${tests[@]}"; do
	exe=$bdir/tests/$t
	if [ ! -x "$exe" ]; then
		results+=("$t: FAILED (no executable $exe)")
		failed=$((failed + 1))
		continue
	fi
	echo "=== [valgrind] $t"
	rm -f "$logdir/$t".*.log
	TOLLFREE_SESSION_TIMEOUT_MS=${TOLLFREE_SESSION_TIMEOUT_MS:-30000} \
		timeout 900 valgrind --tool=memcheck \
		--error-exitcode=100 --leak-check=full \
		--errors-for-leak-kinds=definite --show-leak-kinds=definite \
		--suppressions=scripts/valgrind.supp \
		--num-callers=30 --log-file="$logdir/$t.%p.log" \
		"$exe" >"$logdir/$t.out" 2>&1
	rc=$?
	summary=$(grep -h 'ERROR SUMMARY' "$logdir/$t".*.log 2>/dev/null |
		  sed 's/^==[0-9]*== //' | head -1)
	case $rc in
	# Exit 0 without memcheck's summary means memcheck never looked at
	# the test: that is no pass.
	0) if [ -n "$summary" ]; then
		results+=("$t: ok ($summary)"); passed=$((passed + 1))
	   else
		results+=("$t: FAILED (exit 0 but no memcheck summary in $logdir/$t.*.log)")
		failed=$((failed + 1))
	   fi ;;
	77) results+=("$t: skipped ($(tail -n 1 "$logdir/$t.out"))")
	    skipped=$((skipped + 1)) ;;
	100) results+=("$t: MEMCHECK ERRORS (${summary}); see $logdir/$t.*.log")
	     failed=$((failed + 1))
	     grep -h -A 12 -E 'Invalid|uninitialised|definitely lost|Mismatched|overlap' \
		     "$logdir/$t".*.log | head -n 40 ;;
	124) results+=("$t: TIMED OUT under valgrind"); failed=$((failed + 1)) ;;
	*) results+=("$t: FAILED (exit $rc); see $logdir/$t.out")
	   failed=$((failed + 1))
	   tail -n 20 "$logdir/$t.out" ;;
	esac
done

echo
echo "=== [valgrind] summary"
printf '  %s\n' "${results[@]}"
echo "valgrind: $passed passed, $failed failed, $skipped skipped"
((failed == 0)) || exit 1
((passed > 0)) || exit 77
exit 0
