#!/bin/bash
# test.sh - the whole test suite, as CI runs it (.ci/run calls this).
#
#  1. installs missing Debian packages (scripts/deps.sh test);
#  2. release build with -Werror (gcc), every test through CTest: the unit
#     tests and the conformance suite on the soft provider (shm and tcp);
#  3. the same suite built with ASan+UBSan, then with TSan;
#  4. a clang -Werror build, a clang-format check, cppcheck and clang-tidy
#     (scripts/lint.sh), the libFuzzer targets (scripts/fuzz.sh),
#     valgrind memcheck on a subset (scripts/valgrind.sh) and the install
#     check (scripts/install-check.sh: a prefix and the .deb);
#  5. the verbs provider on real kernel Soft-RoCE: tests/vm/run.sh boots
#     Debian's kernel in qemu with rdma_rxe and runs the conformance suite
#     on one rxe device and on two rxe devices joined by a veth pair.
#
# Environment: TOLLFREE_TEST_QUICK=1 skips the sanitizer builds;
# TOLLFREE_TEST_NO_VM=1 skips the qemu stage (it then counts as skipped).
set -uo pipefail
cd "$(dirname "$0")/.."
top=$PWD
jobs=$(nproc)

scripts/deps.sh test || exit 1

passed=0 failed=0 skipped=0 not_tried=0
failures=()

# run_ctest NAME BUILD_DIR [ctest args]: run, and add its counts.
run_ctest() {
	local name=$1 dir=$2 log
	shift 2
	log=$dir/ctest.log
	echo "=== [$name] ctest"
	ctest --test-dir "$dir" -j"$jobs" --output-on-failure "$@" 2>&1 |
		tee "$log"
	local total fail skip
	total=$(sed -n 's/.*tests passed, [0-9]* tests* failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)
	fail=$(sed -n 's/.*tests passed, \([0-9]*\) tests* failed out of.*/\1/p' "$log" | tail -1)
	skip=$(grep -c '(Skipped)' "$log" || true)
	if [ -z "$total" ]; then
		echo "[$name] ctest produced no summary"
		failed=$((failed + 1))
		failures+=("$name: no ctest summary")
		return
	fi
	passed=$((passed + total - fail - skip))
	failed=$((failed + fail))
	skipped=$((skipped + skip))
	((fail == 0)) || failures+=("$name: $fail failed")
	# A test that passed with a part of it not tried (tf_test_partial_skip
	# and tf_test_partial_skip_host print "NAME: not tried[ (host)]: ")
	# counts as passed in CTest; list those parts and count them, so that
	# the tally says what was not tested.
	local nt re='^[^ ]+: not tried( \(host\))?: '
	nt=$(grep -cE "$re" "$dir/Testing/Temporary/LastTest.log" 2>/dev/null)
	if ((${nt:-0} > 0)); then
		echo "[$name] parts of tests not tried:"
		grep -E "$re" "$dir/Testing/Temporary/LastTest.log" | sort | uniq -c
	fi
	not_tried=$((not_tried + ${nt:-0}))
}

# build NAME DIR [cmake args]
build() {
	local name=$1 dir=$2
	shift 2
	echo "=== [$name] configure + build"
	if ! cmake -S "$top" -B "$dir" -DTOLLFREE_WERROR=ON "$@" >"$dir.cmake.log" 2>&1; then
		cat "$dir.cmake.log"
		failed=$((failed + 1)); failures+=("$name: configure")
		return 1
	fi
	if ! cmake --build "$dir" -j"$jobs" 2>&1 | tail -n 40; then
		failed=$((failed + 1)); failures+=("$name: build")
		return 1
	fi
	return 0
}

mkdir -p build-ci
# RelWithDebInfo keeps asserts out and symbols in, as users build.
if build release build-ci/release -DCMAKE_BUILD_TYPE=RelWithDebInfo; then
	run_ctest release build-ci/release
fi

if [ "${TOLLFREE_TEST_QUICK:-0}" != 1 ]; then
	# Sanitized code runs 5-15x slower: the long loops (100,000 sessions,
	# 10,000 revocation attempts, 200,000 CQ arm races) are sized down so
	# that they stay within the per-test timeout; the release run above
	# keeps the full counts.
	export TF_TEST_SESSIONS=3000 TF_TEST_REVOKE_ATTEMPTS=1000 \
		TF_TEST_CQ_ARM_ROUNDS=50000
	# The session layer's default 2 s limit on each handshake step is
	# sized for real runs; TSan's 5-15x, with two tests at once on two
	# cores, exceeded it now and then (a connect timing out after
	# thousands of sessions).  Tests that set their own timeout keep it.
	export TOLLFREE_SESSION_TIMEOUT_MS=10000
	if build asan build-ci/asan -DCMAKE_BUILD_TYPE=Debug -DTOLLFREE_ASAN=ON; then
		ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
			UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
			run_ctest asan build-ci/asan
	fi
	if build tsan build-ci/tsan -DCMAKE_BUILD_TYPE=Debug -DTOLLFREE_TSAN=ON; then
		TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$top/scripts/tsan.supp \
			run_ctest tsan build-ci/tsan
	fi
	unset TF_TEST_SESSIONS TF_TEST_REVOKE_ATTEMPTS TF_TEST_CQ_ARM_ROUNDS \
		TOLLFREE_SESSION_TIMEOUT_MS
fi

# clang must build warning-free too; its tests are not run again.
if CC=clang build clang build-ci/clang -DBUILD_TESTING=ON; then
	passed=$((passed + 1))
fi

echo "=== [format] clang-format --dry-run -Werror"
mapfile -t srcs < <(git ls-files '*.c' '*.h')
if clang-format --dry-run -Werror "${srcs[@]}" >build-ci/format.log 2>&1; then
	passed=$((passed + 1))
else
	head -n 40 build-ci/format.log
	failed=$((failed + 1)); failures+=("format: files not clang-formatted")
fi

# stage NAME CMD...: a script that exits non-zero on failure counts as one
# test.
stage() {
	local name=$1
	shift
	echo "=== [$name] $*"
	if "$@"; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1)); failures+=("$name: $* failed")
	fi
}

# add_counts NAME LOG RC: add the "NAME: P passed, F failed, S skipped"
# line that a harness printed last in LOG to the tally, so that what it
# skipped counts as skipped and not as one passed stage.  A non-zero exit
# RC (other than 77, all skipped) with no failure in its counts is one
# failure more (the harness itself broke); so is a harness that exits 0
# without the line, since nothing says what it tested.
add_counts() {
	local name=$1 log=$2 rc=$3 line p=0 f=0 s=0
	line=$(grep -E "^$name: [0-9]+ passed, [0-9]+ failed" "$log" | tail -1)
	if [ -n "$line" ]; then
		p=$(sed -E "s/^$name: ([0-9]+) passed.*/\1/" <<<"$line")
		f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")
		s=$(sed -nE 's/.* ([0-9]+) skipped.*/\1/p' <<<"$line")
		s=${s:-0}
		passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
		((f == 0)) || failures+=("$name: $f failed")
	fi
	if [ -z "$line" ] && ((rc == 0)); then
		failed=$((failed + 1)); failures+=("$name: exit 0 without a summary line")
	elif ((rc != 0 && rc != 77)); then
		((f > 0)) || { failed=$((failed + 1)); failures+=("$name: exit $rc"); }
	elif ((rc == 77)) && [ -z "$line" ]; then
		skipped=$((skipped + 1))
	fi
}

# counted NAME CMD...: run a harness that prints its own counts.
counted() {
	local name=$1 rc
	shift
	echo "=== [$name] $*"
	"$@" 2>&1 | tee "build-ci/$name.log"
	rc=${PIPESTATUS[0]}
	add_counts "$name" "build-ci/$name.log" "$rc"
}

# cppcheck and clang-tidy with the checked-in configuration; libFuzzer
# targets for every parser of untrusted input (FUZZ_SECONDS each, 60 by
# default; one count per target); valgrind memcheck on a subset of the
# release build's tests (one count per test).
stage lint scripts/lint.sh
counted fuzz scripts/fuzz.sh
counted valgrind scripts/valgrind.sh build-ci/release
# The install a user makes: a prefix and the .deb (installed with apt and
# removed again), each used by a program built with pkg-config and with
# find_package, and the installed tools run without LD_LIBRARY_PATH.
counted install-check scripts/install-check.sh build-ci/release

if [ "${TOLLFREE_TEST_NO_VM:-0}" = 1 ]; then
	echo "=== [vm] skipped: TOLLFREE_TEST_NO_VM=1"
	skipped=$((skipped + 1))
elif [ -x tests/vm/run.sh ]; then
	# The harness ends with its own "vm: N passed, N failed, N skipped"
	# line.
	counted vm tests/vm/run.sh build-ci/release
else
	echo "=== [vm] tests/vm/run.sh missing"
	failed=$((failed + 1)); failures+=("vm: harness missing")
fi

echo
if ((${#failures[@]})); then
	echo "Failures:"
	printf '  %s\n' "${failures[@]}"
fi
echo "$passed passed, $failed failed, $skipped skipped," \
	"$not_tried parts of passed tests not tried"
((failed == 0 && ${#failures[@]} == 0))
