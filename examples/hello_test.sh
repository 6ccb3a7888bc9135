#!/bin/sh
# SPDX-License-Identifier: MIT
# Run hello_server on an ephemeral port and hello_client against it on
# 127.0.0.1, and check what both print.
# Usage: hello_test.sh HELLO_SERVER HELLO_CLIENT
set -eu
srv=$1 cli=$2
dir=$(mktemp -d)
pid=
trap '[ -z "$pid" ] || kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
# The files exist before the server does: the loop below may read them
# before the background shell has opened them (sed then fails, and set -e
# ends the test; seen once under TSan).
: >"$dir/srv.out"
: >"$dir/srv.err"
"$srv" >"$dir/srv.out" 2>"$dir/srv.err" &
pid=$!
port=
for _ in $(seq 200); do
	port=$(sed -n 's/^listening on port \([0-9]*\)$/\1/p' "$dir/srv.out")
	[ -n "$port" ] && break
	kill -0 $pid 2>/dev/null || break
	sleep 0.05
done
[ -n "$port" ] || { echo "hello example: server did not listen"; cat "$dir/srv.err"; exit 1; }
"$cli" 127.0.0.1 "$port" >"$dir/cli.out"
echo "wrote: hello, tollfree" | cmp - "$dir/cli.out"
rc=0
wait $pid || rc=$?
pid=
[ $rc -eq 0 ] || { echo "hello example: server exit $rc"; cat "$dir/srv.err"; exit 1; }
printf 'listening on port %s\nreceived: hello, tollfree\n' "$port" | cmp - "$dir/srv.out"
cat "$dir/srv.out" "$dir/cli.out"
echo "hello example: PASS"
