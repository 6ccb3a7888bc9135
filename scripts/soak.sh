#!/bin/bash
# soak.sh - the session soak test (tests/soak_sessions.c) for a longer time.
#
# Usage: scripts/soak.sh [SECONDS [CLIENTS [THREADS]]]
#   SECONDS  duration of the measured run (default 600)
#   CLIENTS  client processes (default 3), THREADS  sessions at a time in
#            each (default 4)
# Environment: TOLLFREE_SOFT_TRANSPORT=shm|tcp|both (default both: one run
# per transport), BUILD_DIR (default build-soak, configured and built
# here if missing), and any TOLLFREE_* variable for the library.
#
# It prints, per transport, sessions per second, failures, and the
# server's resource deltas (fds, threads, pinned bytes, RSS); it fails if
# any session failed or is unaccounted for, if either side logged a
# warning or error, or if a resource did not come back (the rule is the
# test's own, tests/soak_sessions.c, whatever the duration).
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
clients=${2:-3}
threads=${3:-4}
build=${BUILD_DIR:-build-soak}
transports=${TOLLFREE_SOFT_TRANSPORT:-both}
[ "$transports" = both ] && transports="shm tcp"

if [ ! -x "$build/tests/soak_sessions" ]; then
	cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
		cmake --build "$build" -j"$(nproc)" --target soak_sessions \
			>/dev/null || exit 1
fi

rc=0
for tp in $transports; do
	echo "=== soak: soft $tp, ${secs} s, $clients clients x $threads"
	TOLLFREE_PROVIDER=soft TOLLFREE_SOFT_TRANSPORT=$tp \
		"$build/tests/soak_sessions" "$secs" "$clients" "$threads" ||
		rc=1
done
exit $rc
