#!/bin/sh
# SPDX-License-Identifier: MIT
# /init of the tollfree test guest (see tests/vm/run.sh).
#
# Loads Soft-RoCE (rdma_rxe), builds two topologies and runs every test
# binary listed in /tf/tests with TOLLFREE_PROVIDER=verbs in each:
#   loop  rxe0 on a dummy netdev; both sides of a test use rxe0
#   veth  rxe1 and rxe2 on the two ends of a veth pair, with policy routing
#         so that the traffic really crosses the veth "wire"
#   siw   siw0 (soft-iWARP: TCP, rdma_cm connections, no memory windows,
#         no atomics) on a dummy netdev of its own; both sides use siw0
# or, booted with tf_role=srv or tf_role=cli on the kernel command line,
# one of the two guests of the "two" topology (two kernels joined by a
# qemu socket netdev, rxe0 on each one's NIC; see run_two below).
# Output protocol on the console (parsed by run.sh), one record a line:
#   @@TEST <topo> <test> <rc> <seconds>   after a test, followed by its
#                                         output between @@OUT/@@END lines
#   @@MARK <uptime> <what>                progress marks
#   @@RUN <topo> <test>                   a test starts
#   @@DONE                                everything ran
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
# Debian's busybox-static runs its own applets before $PATH (and its "ip"
# has no veth support): iproute2 is called by its full path.
IP=/usr/sbin/ip

mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /tmp /run
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /tmp
up() { cut -d' ' -f1 /proc/uptime; }
mark() { echo "@@MARK $(up) $*"; }
finish() { mark "$1"; echo "@@DONE"; sync; poweroff -f; }
mark INIT_START "kernel=$(uname -r)"
# Every QP and CQ is a descriptor (uverbs), and conf_qp_many and
# conf_session_concurrent want thousands; the kernel starts init with
# 1024 (hard 4096).  Root may raise both up to fs.nr_open.  (siw's QP
# refusals that once followed were libsiw's page-144 key, fixed by the
# provider's plug CQ: tollfree-verbs(7).)
# shellcheck disable=SC3045 # busybox sh has it
ulimit -n 65536 || mark "NOFILE_LIMIT $(ulimit -n)"

# shellcheck disable=SC1091 # written by run.sh
. /tf/config # TEST_TIMEOUT, BENCH, PEERS*, WRAP, TOPOS, test settings

# Modules in dependency order (computed on the host by modprobe).
while read -r ko args; do
	[ -n "$ko" ] || continue
	# shellcheck disable=SC2086 # module parameters are separate words
	insmod "$ko" $args 2>&1 | grep -v 'File exists'
done </etc/modules.order
mark MODULES_LOADED

# The GID table fills asynchronously after "rdma link add"; wait for the
# IPv4-mapped RoCE v2 entry that TOLLFREE_VERBS_GID_INDEX=auto picks.
wait_gid() {
	i=0
	while [ $i -lt 100 ]; do
		for g in "/sys/class/infiniband/$1"/ports/1/gids/*; do
			case "$(cat "$g" 2>/dev/null)" in
			0000:0000:0000:0000:0000:ffff:*) return 0 ;;
			esac
		done
		sleep 0.1
		i=$((i + 1))
	done
	echo "no IPv4 GID on $1"
	return 1
}

# --------------------------------------------------------- two kernels
# Two guests, each with rxe0 on its virtio NIC (eth0), joined by qemu's
# socket netdev: srv is 10.30.0.1, cli 10.30.0.2.  Nothing is shared but
# the wire.  In order, each step started on both guests:
#   the tests of /tf/two_tests in peer mode (tf_test.h): srv runs side B,
#   cli side A; test number i's channel is port 7300+i on srv;
#   the kv example: kv_server on srv, kv_client's three GETs on cli;
#   tollfree-bench crr --server on srv, --connect on cli.
# Then, with TWO_SIW=1, rxe0 makes way for siw0 on the same NIC (one
# device a netdev: rdma_cm picks a device by address) and the tests and
# the kv example run again as topology "two-siw" (iWARP across a wire).
# cli reports (@@TEST two ...; a pair's result is both sides' combined);
# srv prints its sides' output as @@TWOB lines for the log.
TWO_SRV=10.30.0.1
run_two() {
	role=$1
	me=$TWO_SRV
	[ "$role" = cli ] && me=10.30.0.2
	$IP link set lo up
	$IP link set eth0 up || finish TWO_NIC_FAILED
	$IP addr add "$me/24" dev eth0
	rdma link add rxe0 type rxe netdev eth0 || finish RXE_FAILED
	wait_gid rxe0 || finish GID_FAILED
	mark "NET_UP two $role $me"
	export TOLLFREE_PROVIDER=verbs TOLLFREE_VERBS_GID_INDEX=auto
	# Across two TCG kernels 200 revocation attempts take ~90 s, near
	# the harness watchdog; both sides read the same count.
	export TF_TEST_REVOKE_ATTEMPTS="${TF_TEST_REVOKE_ATTEMPTS:-50}"
	# Two single-vCPU TCG guests on a busy host stall for seconds: with
	# the default 4 s of transport retries, rxe's QPs sometimes ended in
	# "transport retry counter exceeded" (conf_session_revoke).
	export TOLLFREE_QP_TIMEOUT_MS="${TOLLFREE_QP_TIMEOUT_MS:-30000}"
	n=0
	two_pass two rxe0 7400
	# A short crr, server in srv, client in cli, with TCP doing the same
	# work over the same link beside it (the link's own cost under TCG):
	# tcp-crr-spin waits as pool+mw/new does (both sides busy-poll), and
	# blocking tcp-crr as the issue's target names it.
	t0=$(up)
	crr="--provider verbs --device rxe0 -k 1 -s 1K --modes pool+mw/new,tcp-crr,tcp-crr-spin"
	rc=1
	if [ ! -x /tf/bin/tollfree-bench ]; then
		echo "SKIP: tollfree-bench was not built" >/tmp/out
		rc=77
	elif [ "$role" = srv ]; then
		# shellcheck disable=SC2086 # crr is a list of options
		timeout "$TEST_TIMEOUT" /tf/bin/tollfree-bench crr $crr \
			-n "$SESS_N" --server $TWO_SRV:7401 >/tmp/out 2>&1
		rc=$?
	else
		i=0
		# shellcheck disable=SC2086
		until timeout "$TEST_TIMEOUT" /tf/bin/tollfree-bench crr $crr \
			-n "$SESS_N" --csv --connect $TWO_SRV:7401 >/tmp/out 2>&1; do
			rc=$?
			grep -q 'connecting to' /tmp/out || break
			i=$((i + 1))
			[ $i -lt 60 ] || break
			sleep 0.5
		done
		grep -q '^pool+mw/new,' /tmp/out && rc=0
		awk -F, '($1 == "pool+mw/new" || $1 ~ /^tcp-crr/) && NF >= 14 {
			print "@@TWOCRR " $1 " " $4 " " $10 " " $14 }' /tmp/out
	fi
	two_report crr_remote "$rc" "$t0"
	if [ "$TWO_SIW" = 1 ]; then
		rdma link del rxe0
		rdma link add siw0 type siw netdev eth0 || finish SIW_FAILED
		mark "NET_UP two-siw $role $me"
		# siw charges registrations to RLIMIT_MEMLOCK (see run_topo's
		# caller below).
		# shellcheck disable=SC3045 # busybox sh has it
		ulimit -l unlimited
		two_pass two-siw siw0 7402
	fi
	finish ALL_DONE
}
# two_pass TOPO DEV KV_PORT: the peer-mode tests and the kv example on DEV
# (n counts the tests across passes: each has a channel port of its own).
two_pass() {
	export TOLLFREE_DEVICE="$2"
	mark "TOPO $1 $2 $2"
	topo=$1
	# shellcheck disable=SC2013 # one test name a line, no blanks
	for t in $(cat /tf/two_tests); do
		n=$((n + 1))
		side=A
		[ "$role" = srv ] && side=B
		t0=$(up)
		# At info level: rdma_cm's events and a connection's failure
		# are logged there (a failure's tail then says why; info
		# lines do not fail a test).
		TOLLFREE_TEST_PEER_SIDE=$side \
			TOLLFREE_TEST_PEER_ADDR="$TWO_SRV:$((7300 + n))" \
			TOLLFREE_LOG_LEVEL=info \
			timeout "$TEST_TIMEOUT" "/tf/bin/$t" >/tmp/out 2>&1 </dev/null
		rc=$?
		two_report "$t" $rc "$t0"
	done
	# The kv example across the two kernels.
	kvp=$3
	t0=$(up)
	if [ ! -x /tf/bin/kv_server ]; then
		echo "SKIP: the examples were not built" >/tmp/out
		rc=77
	elif [ "$role" = srv ]; then
		timeout "$TEST_TIMEOUT" /tf/bin/kv_server -a $TWO_SRV -p "$kvp" \
			-n 4 -b 300000 alpha=one beta=two >/tmp/out 2>&1
		rc=$?
	else
		rc=0
		i=0
		: >/tmp/kv.err
		# Until the server listens (it may start later).  Every
		# attempt's errors are kept: one that failed after the server
		# counted its sessions (kv_server -n 4) explains the timeouts
		# of the GETs after it.
		until timeout 30 /tf/bin/kv_client $TWO_SRV "$kvp" alpha beta \
			>/tmp/kv.out 2>>/tmp/kv.err; do
			i=$((i + 1))
			[ $i -lt 60 ] || break
			sleep 0.5
		done
		{
			printf 'alpha=one\nbeta=two\n' | cmp - /tmp/kv.out ||
				rc=1
			big=$(head -c 300000 /dev/zero | tr '\0' 'x')
			timeout 30 /tf/bin/kv_client $TWO_SRV "$kvp" big \
				>/tmp/kv.out || rc=1
			echo "big=$big" | cmp - /tmp/kv.out || rc=1
			r=0
			timeout 30 /tf/bin/kv_client $TWO_SRV "$kvp" nosuch \
				>/tmp/kv.out || r=$?
			[ $r -eq 3 ] || { echo "nosuch: exit $r, want 3"; rc=1; }
			[ $i -eq 0 ] ||
				echo "alpha beta: $i failed attempts; their errors:"
			cat /tmp/kv.err
		} >/tmp/out 2>&1
	fi
	two_report kv_example $rc "$t0"
}
two_report() { # test rc t0
	if [ "$role" = cli ]; then
		echo "@@TEST $topo $1 $2 $(awk "BEGIN{print $(up)-$3}")"
		echo "@@OUT"
		cat /tmp/out
		echo "@@END"
	else
		echo "@@TWOB $topo $1 rc=$2"
		sed 's/^/@@TWOB | /' /tmp/out
	fi
}
ROLE=$(sed -n 's/.*tf_role=\([a-z]*\).*/\1/p' /proc/cmdline)
case $ROLE in
srv | cli) run_two "$ROLE" ;;
esac

$IP link set lo up
$IP link add dummy0 type dummy
$IP link set dummy0 mtu 4200 # lets rxe use a 4096 MTU
$IP addr add 10.11.12.1/24 dev dummy0
$IP link set dummy0 up
rdma link add rxe0 type rxe netdev dummy0 || finish RXE_FAILED
wait_gid rxe0 || finish GID_FAILED

# Second topology: two devices on the two ends of a veth pair.  Locally
# generated packets for the peer address would go through lo; rules at
# preference 10/11 send them to tables 100/101 (the veth devices) before
# the local table is consulted, and accept_local lets the receiver take
# packets whose source is one of its own addresses.
$IP link add veth0 type veth peer name veth1
$IP link set veth0 mtu 4200
$IP link set veth1 mtu 4200
$IP addr add 10.20.0.1/24 dev veth0
$IP addr add 10.20.0.2/24 dev veth1
$IP link set veth0 up
$IP link set veth1 up
for k in all default veth0 veth1; do
	echo 1 >/proc/sys/net/ipv4/conf/$k/accept_local
	echo 0 >/proc/sys/net/ipv4/conf/$k/rp_filter
done
$IP rule add pref 10 iif lo to 10.20.0.2 lookup 100
$IP rule add pref 11 iif lo to 10.20.0.1 lookup 101
$IP route add 10.20.0.2 dev veth0 src 10.20.0.1 table 100
$IP route add 10.20.0.1 dev veth1 src 10.20.0.2 table 101
$IP rule add pref 20 lookup local
$IP rule del pref 0 lookup local
rdma link add rxe1 type rxe netdev veth0 || finish RXE_FAILED
rdma link add rxe2 type rxe netdev veth1 || finish RXE_FAILED
if ! wait_gid rxe1 || ! wait_gid rxe2; then finish GID_FAILED; fi

# siw on its own netdev: rdma_cm finds a device by the address it binds
# to, and an address of dummy0 would be rxe0's as well.
case " $TOPOS " in
*" siw "*)
	$IP link add dummy1 type dummy
	$IP addr add 10.11.13.1/24 dev dummy1
	$IP link set dummy1 up
	rdma link add siw0 type siw netdev dummy1 || finish SIW_FAILED
	;;
esac
mark NET_UP
rdma link show

export TOLLFREE_PROVIDER=verbs
export TOLLFREE_VERBS_GID_INDEX=auto
# A listener drops a connection whose HELLO has not come within 500 ms
# (slow-client protection sized for real machines).  Under TCG on a busy
# host a client making its QPs on a cold rxe device can take longer, and
# conf_session_concurrent's 1,000 sessions then see ECONNRESET: give the
# emulated machine four times the time.
export TOLLFREE_SESSION_HELLO_TIMEOUT_MS="${TOLLFREE_SESSION_HELLO_TIMEOUT_MS:-2000}"

veth_packets() { $IP -s link show veth0 | awk 'NR==4{print $2}'; }

# run_one TEST: run it under the wrapper and the per-test limit, its
# output in /tmp/out; rc is its exit status.
run_one() {
	# shellcheck disable=SC2086 # WRAP is a command line
	timeout "$TEST_TIMEOUT" $WRAP "/tf/bin/$1" >/tmp/out 2>&1 </dev/null
	rc=$?
}

# run_topo NAME DEV_A DEV_B
run_topo() {
	topo=$1
	export TOLLFREE_DEVICE="$2" TOLLFREE_TEST_PEER_DEVICE="$3"
	mark "TOPO $topo $2 $3"
	# shellcheck disable=SC2013 # one test name a line, no blanks
	for t in $(cat /tf/tests); do
		t0=$(up)
		echo "@@RUN $topo $t"
		run_one "$t"
		# siw (6.1) now and then failed a connection under us (a
		# READ completed flushed or with a general error).  Two
		# causes were found and are handled: a responder's first
		# message that overtook the MPA reply (verbs_iw.c,
		# conf_first_send), and siw's listener freed by a connection
		# that closed before siw accepted it, whose memory other
		# connections then used (siw-listener-close.patch,
		# verbs_cm_hostile).  Neither has shown since; a failed test
		# still runs once more there, and both the first failure and
		# its output are reported (@@FLAKY), so that a third cause
		# shows without failing the stage.
		if [ "$topo" = siw ] && [ $rc != 0 ] && [ $rc != 77 ]; then
			echo "@@FLAKY $topo $t $rc"
			sed 's/^/@@FLAKYOUT /' /tmp/out | tail -n 12
			t0=$(up)
			run_one "$t"
		fi
		echo "@@TEST $topo $t $rc $(awk "BEGIN{print $(up)-$t0}")"
		echo "@@OUT"
		cat /tmp/out
		if [ -f /tmp/wrap.out ]; then
			grep -v -e "poll" -e clock_gettime /tmp/wrap.out | tail -n 100
			rm -f /tmp/wrap.out
		fi
		echo "@@END"
	done
}

for topo in $TOPOS; do
	P0=$(veth_packets)
	case $topo in
	loop) run_topo loop rxe0 rxe0 ;;
	veth) run_topo veth rxe1 rxe2 ;;
	siw)
		# siw charges registrations to RLIMIT_MEMLOCK even for root
		# (siw_reg_user_mr), rxe does not (CAP_IPC_LOCK); the
		# default 8 MiB cannot hold a node's pool.  Deployments raise
		# it (limits.conf), and so does this subshell.
		(
			# shellcheck disable=SC3045 # busybox sh has it
			ulimit -l unlimited
			# 200 QPs, not 1,000 (TCG time; its output says so):
			# each QP and its CQ take 3 mmap pages of siw's, more
			# than enough to reach page 144, where libsiw refused
			# any ring before the provider's plug CQ
			# (tollfree-verbs(7)).
			export TF_TEST_QPS=200
			run_topo siw siw0 siw0
		)
		;;
	esac
	# Proof that the two-device runs used the veth wire, not lo.
	echo "@@VETH $topo=$(($(veth_packets) - P0))"
done

# The GID index of @1's IPv4-mapped RoCE v2 entry (what
# TOLLFREE_VERBS_GID_INDEX=auto picks), for perftest's -x.
gid_index() {
	for g in "/sys/class/infiniband/$1"/ports/1/gids/*; do
		i=${g##*/}
		case "$(cat "$g" 2>/dev/null)" in
		0000:0000:0000:0000:0000:ffff:*)
			t=$(cat "/sys/class/infiniband/$1/ports/1/gid_attrs/types/$i" \
				2>/dev/null)
			[ "$t" = "RoCE v2" ] && echo "$i" && return 0
			;;
		esac
	done
	echo 0
}

# perftest beside tollfree-bench lat on rxe0, both ends in this guest:
# ib_{write,read,send}_lat and tollfree-bench lat --provider verbs at the
# same sizes, PEERS_REPS times each.  One record per run:
#   @@PEER <tool> <op> <size> <t_typical_us> <rep>
# (nothing for a run whose table is missing: perftest may exit 0 without
# one, so its output is what counts, not its status).
run_peers() {
	gidx=$(gid_index rxe0)
	port=18515
	echo "@@PEERS_BEGIN gid=$gidx reps=$PEERS_REPS iters=$PEERS_ITERS"
	rep=1
	while [ "$rep" -le "$PEERS_REPS" ]; do
		for op in write read send; do
			for sz in 8 1024; do
				port=$((port + 1))
				args="-d rxe0 -x $gidx -s $sz -n $PEERS_ITERS -F -p $port"
				# shellcheck disable=SC2086 # args are words
				timeout 60 "/tf/bin/ib_${op}_lat" $args \
					>/tmp/perf.srv 2>&1 &
				srv=$!
				# The client retries until the server listens.
				i=0
				while [ $i -lt 50 ]; do
					# shellcheck disable=SC2086
					timeout 60 "/tf/bin/ib_${op}_lat" $args \
						127.0.0.1 >/tmp/perf.cli 2>&1 &&
						break
					grep -q "Couldn't connect" /tmp/perf.cli ||
						break
					sleep 0.2
					i=$((i + 1))
				done
				wait "$srv"
				v=$(awk -v s="$sz" '$1 == s && NF >= 7 {print $5}' \
					/tmp/perf.cli | tail -1)
				if [ -n "$v" ]; then
					echo "@@PEER perftest $op $sz $v $rep"
				else
					echo "@@PEERFAIL perftest $op $sz rep $rep:" \
						"$(tail -3 /tmp/perf.cli | tr '\n' ' ')"
				fi
			done
		done
		TOLLFREE_DEVICE=rxe0 timeout 120 /tf/bin/tollfree-bench lat \
			--provider verbs --device rxe0 -t write,read,send \
			-s 8,1024 -n "$PEERS_ITERS" --csv >/tmp/tf.csv 2>&1
		awk -F, -v r="$rep" '$1 ~ /^(write|read|send)$/ {
			print "@@PEER tollfree " $1 " " $2 " " $6 " " r }' \
			/tmp/tf.csv
		grep -q '^write,' /tmp/tf.csv ||
			echo "@@PEERFAIL tollfree rep $rep: $(tail -3 /tmp/tf.csv |
				tr '\n' ' ')"
		rep=$((rep + 1))
	done
	echo "@@PEERS_END"
}

# Short sessions on rxe0, both ends in this guest, PEERS_REPS runs each:
#   cmtime -c 1 (rdma-core: one rdma_cm connection, set up and torn down
#   step by step), ucx_session (bench/peers/ucx_session.c: UCX rc_verbs,
#   connected through UCX's rdmacm connection manager) and
#   tollfree-bench crr --provider verbs -k 1 -s 1K --modes
#   pool+mw/new,tcp-crr,tcp-crr-spin (median connect and close phases,
#   and the median session), and pool+mw/new again with
#   TOLLFREE_SESSION_STOCK=0 (the cold path: no connection stock).
# One record per result:
#   @@SESS cmtime <step> <us> <rep>      (cmtime's "us / conn" column)
#   @@SESS crr <connect_us> <close_us> <session_us> <rep>
#   @@SESS tcp <mode> <session_us> <rep>
#   @@SESS cold <connect_us> <close_us> <session_us> <rep>
#   @@SESS ucx <median_session_us> <rep>
#   @@SESSFAIL <tool> rep <rep>: <last lines of its output>
run_sessions() {
	addr=10.11.12.1 # dummy0's, rxe0's netdev
	port=7470
	ucx_ok=1
	echo "@@SESS_BEGIN reps=$PEERS_REPS sessions=$SESS_N"
	rep=1
	while [ "$rep" -le "$PEERS_REPS" ]; do
		if [ -x /tf/bin/cmtime ]; then
			port=$((port + 1))
			# cmtime's server (6.1's rdma-core 44) serves until it is
			# killed; the client is retried while the server is not
			# listening yet (it prints "event: ..." and exits 0).
			timeout 120 /tf/bin/cmtime -b "$addr" -p "$port" \
				>/tmp/cmt.srv 2>&1 &
			srv=$!
			sleep 0.5
			i=0
			while [ $i -lt 10 ]; do
				timeout 60 /tf/bin/cmtime -s "$addr" -b "$addr" \
					-c 1 -p "$port" >/tmp/cmt.cli 2>&1
				grep -q -e '^event:' -e 'ERROR' -e failure \
					/tmp/cmt.cli || break
				sleep 0.5
				i=$((i + 1))
			done
			kill "$srv" 2>/dev/null
			wait "$srv" 2>/dev/null
			if grep -q '^connect *:' /tmp/cmt.cli &&
				[ $i -lt 10 ]; then
				awk -F: -v r="$rep" 'NF == 2 && $1 ~ /^[a-z ]+$/ {
					n = split($2, v, " ")
					if (n != 4) next
					s = $1; sub(/ +$/, "", s); gsub(/ /, "_", s)
					print "@@SESS cmtime " s " " v[4] " " r
				}' /tmp/cmt.cli
			else
				echo "@@SESSFAIL cmtime rep $rep: $(tail -4 /tmp/cmt.cli |
					tr '\n' ' ')"
			fi
		fi
		TOLLFREE_DEVICE=rxe0 timeout 300 /tf/bin/tollfree-bench crr \
			--provider verbs --device rxe0 -k 1 -s 1K \
			--modes pool+mw/new,tcp-crr,tcp-crr-spin -n "$SESS_N" \
			--csv >/tmp/crr.csv 2>&1
		# mode,sessions,t_min,t_typical,...,connect(10),...,close(14)
		awk -F, -v r="$rep" '$1 == "pool+mw/new" && NF >= 14 {
			print "@@SESS crr " $10 " " $14 " " $4 " " r }
			$1 ~ /^tcp-crr(-spin)?$/ && NF >= 14 {
			print "@@SESS tcp " $1 " " $4 " " r }' /tmp/crr.csv
		grep -q '^pool+mw/new,' /tmp/crr.csv ||
			echo "@@SESSFAIL crr rep $rep: $(tail -3 /tmp/crr.csv |
				tr '\n' ' ')"
		# The cold path: no connection stock on either side, so each
		# connect creates its QPs and CQs and moves them to INIT.
		TOLLFREE_SESSION_STOCK=0 TOLLFREE_DEVICE=rxe0 timeout 300 \
			/tf/bin/tollfree-bench crr --provider verbs --device rxe0 \
			-k 1 -s 1K --modes pool+mw/new -n "$SESS_N" --csv \
			>/tmp/crr.csv 2>&1
		awk -F, -v r="$rep" '$1 == "pool+mw/new" && NF >= 14 {
			print "@@SESS cold " $10 " " $14 " " $4 " " r }' /tmp/crr.csv
		grep -q '^pool+mw/new,' /tmp/crr.csv ||
			echo "@@SESSFAIL crr-cold rep $rep: $(tail -3 /tmp/crr.csv |
				tr '\n' ' ')"
		# A UCX failure is the same every run: said once.
		if [ -x /tf/bin/ucx_session ] && [ $ucx_ok = 1 ]; then
			port=$((port + 1))
			UCX_TLS=rc_verbs UCX_NET_DEVICES=rxe0:1 \
				UCX_SOCKADDR_TLS_PRIORITY=rdmacm \
				timeout 300 /tf/bin/ucx_session -n "$SESS_N" \
				-w $((SESS_N / 10 + 1)) -p "$port" -a "$addr" \
				>/tmp/ucx.out 2>&1
			v=$(sed -n 's/.* median_us=\([0-9.]*\).*/\1/p' /tmp/ucx.out)
			if [ -n "$v" ]; then
				echo "@@SESS ucx $v $rep"
			else
				ucx_ok=0
				echo "@@SESSFAIL ucx rep $rep: $(grep -v '^$' \
					/tmp/ucx.out | tail -6 | tr '\n' ' ')"
			fi
		fi
		rep=$((rep + 1))
	done
	echo "@@SESS_END"
}

if [ "$PEERS" = 1 ]; then
	mark "PEERS perftest"
	run_peers
	mark "PEERS sessions"
	run_sessions
fi

if [ "$BENCH" = 1 ]; then
	mark "BENCH reg"
	echo "@@BENCH_BEGIN"
	# Few iterations: under TCG the rows only compare operations with
	# each other, and the guest run should stay short.
	TOLLFREE_DEVICE=rxe0 timeout 300 /tf/bin/tollfree-bench reg -n 100 -w 5 2>&1
	echo "@@BENCH_END rc=$?"
fi
dmesg | grep -iE 'rxe|rdma|infiniband' | tail -20
finish ALL_DONE
