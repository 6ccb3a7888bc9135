#!/bin/sh
# SPDX-License-Identifier: MIT
# Run kv_server and kv_client: three GETs (one large value, one unknown
# key) and check the answers; then kv_server -t 2 (two threads on one
# port) against several kv_client processes at once.
# Usage: kv_test.sh KV_SERVER KV_CLIENT
set -eu
srv=$1 cli=$2
# The client may use another device than the server (two rxe devices in
# the qemu guest); on the soft provider both variables are usually unset.
if [ -n "${TOLLFREE_TEST_PEER_DEVICE:-}" ]; then
	export TOLLFREE_DEVICE="${TOLLFREE_DEVICE:-}"
	cli_dev=$TOLLFREE_TEST_PEER_DEVICE
else
	cli_dev=${TOLLFREE_DEVICE:-}
fi
cli() { TOLLFREE_DEVICE=$cli_dev "$@"; }
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
big=$(head -c 300000 /dev/zero | tr '\0' 'x')
"$srv" -n 4 -P "$dir/port" -b 300000 alpha=one beta=two >"$dir/srv.out" 2>&1 &
pid=$!
for i in $(seq 100); do [ -s "$dir/port" ] && break; sleep 0.05; done
port=$(cat "$dir/port")
cli "$cli" 127.0.0.1 "$port" alpha beta >"$dir/out"
printf 'alpha=one\nbeta=two\n' | cmp - "$dir/out"
cli "$cli" 127.0.0.1 "$port" big >"$dir/out"
echo "big=$big" | cmp - "$dir/out"
rc=0
cli "$cli" 127.0.0.1 "$port" nosuch >"$dir/out" || rc=$?
# Not an && list: set -e does not stop on a failure left of &&.
[ $rc -eq 3 ] || { echo "kv example: unknown key gave exit $rc, want 3"; exit 1; }
grep -q '^nosuch: not found$' "$dir/out"
wait $pid || { echo "kv example: kv_server failed (exit $?)"; \
	cat "$dir/srv.out"; exit 1; }

# Several threads serve one port (-t 2: two listeners sharing it through
# TF_LISTENER_REUSEPORT), while several client processes GET at once.
# Which thread serves which client is the kernel's choice: the spread is
# printed, not checked.
nc=6
rm -f "$dir/port"
# A client sends its HELLO once it has made its QPs; six of them starting
# at once under a sanitizer may take longer than the default 500 ms.
TOLLFREE_SESSION_HELLO_TIMEOUT_MS=${TOLLFREE_SESSION_HELLO_TIMEOUT_MS:-5000} \
	"$srv" -t 2 -n $((nc * 3)) -P "$dir/port" -b 300000 alpha=one \
	beta=two >"$dir/srv.out" 2>&1 &
pid=$!
for i in $(seq 100); do [ -s "$dir/port" ] && break; sleep 0.05; done
port=$(cat "$dir/port")
cpids=
for c in $(seq $nc); do
	cli "$cli" 127.0.0.1 "$port" alpha big beta >"$dir/out.$c" \
		2>"$dir/err.$c" &
	cpids="$cpids $!"
done
for p in $cpids; do
	wait "$p" || { echo "kv example: a concurrent client failed"; \
		grep -hv '^big=' "$dir"/out.* "$dir"/err.* "$dir/srv.out"; \
		exit 1; }
done
for c in $(seq $nc); do
	printf 'alpha=one\nbig=%s\nbeta=two\n' "$big" | cmp - "$dir/out.$c"
done
wait $pid || { echo "kv example: kv_server -t 2 failed"; \
	cat "$dir/srv.out"; exit 1; }
grep '^kv_server: thread' "$dir/srv.out"
echo "kv example: PASS"
