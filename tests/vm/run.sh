#!/bin/bash
# SPDX-License-Identifier: MIT
#
# run.sh - run tollfree's conformance tests on real kernel RDMA inside a
# qemu guest running Debian 12's stock 6.1 kernel: Soft-RoCE (rdma_rxe)
# and soft-iWARP (siw).
#
# Usage: tests/vm/run.sh BUILD_DIR
#
# BUILD_DIR is a cmake build directory configured with the verbs provider.
# Every BUILD_DIR/tests/conf_* executable (plus verbs_smoke, session_ctl_unit
# and the pool_* and rcache_* tests) runs in the guest with
# TOLLFREE_PROVIDER=verbs in three topologies: one rxe device (loopback),
# two rxe devices across a veth pair, and one siw device (iWARP: rdma_cm
# connections, no memory windows, no atomics; the tests skip what it
# lacks and say which capability).  The examples run as one more test.
# A fourth topology, "two", runs a few session tests, the kv example and
# a short crr across two kernels (below).  A table counts passes, skips
# and failures per topology, and
# BUILD_DIR/tools/tollfree-bench "reg" runs too when it was built.  With
# perftest installed, ib_write_lat, ib_read_lat and ib_send_lat run beside
# "tollfree-bench lat --provider verbs" on rxe0 (8 B and 1 KiB, both ends
# in the guest), and a table gives tollfree's latency over perftest's.
# Beside them, on rxe0 too: rdma-core's cmtime with one connection a run
# (rdma_cm set-up and teardown step by step) against the connect and
# close phases of "tollfree-bench crr --provider verbs" (pool+mw/new,
# K=1, 1 KiB), and bench/peers/ucx_session (UCX rc_verbs, connected by
# UCX's rdmacm connection manager) against the same crr sessions; a
# second table gives both ratios.
#
# Topology "two" (in TOLLFREE_VM_TOPOS) boots two more guests at once,
# joined by a qemu socket netdev over UDP on the host's loopback (a virtio
# NIC each, 10.30.0.1 and 10.30.0.2), with rxe0 on each NIC: TOLLFREE_VM_TWO_TESTS run in the
# harness's peer mode (tf_test.h: side B in one kernel, side A in the
# other), then the kv example and a short "tollfree-bench crr
# --server/--connect", server in the first guest, client in the second.
# Their console logs are console-two-srv.log and console-two-cli.log.
# With siw.ko (below) the tests and the kv example then run again with
# siw0 in place of rxe0 on both NICs: topology "two-siw" in the tables
# (TOLLFREE_VM_TWO_SIW=0 leaves that pass out).
# When "two" is the only topology, the single guest is not booted.
#
# Debian's kernels have no siw.ko: tests/vm/siw-module.sh builds it from
# the kernel's linux-source package (once per kernel, cached); without it
# the siw topology is left out.
#
# Nothing is installed into /boot: the kernel package is fetched with
# `apt-get download`, unpacked and cached (once per machine) in
#   TOLLFREE_VM_CACHE   default ~/.cache/tollfree-vm
# The initramfs, the full console log and the summary go to
#   TOLLFREE_VM_WORK    default BUILD_DIR/vm
# Other knobs: TOLLFREE_VM_TEST_TIMEOUT (per test in the guest, s; 120),
# TOLLFREE_VM_TIMEOUT (whole guest, s; 900), TOLLFREE_VM_TESTS (space
# separated test names instead of all; "none": only the perftest
# comparison), TOLLFREE_VM_KPKG (kernel package),
# TOLLFREE_VM_MEM (2G), TOLLFREE_VM_SMP (2), TOLLFREE_VM_ENV (space
# separated VAR=value settings for the tests, e.g. TOLLFREE_LOG_LEVEL=debug),
# TOLLFREE_VM_WRAP (a command each test runs under, e.g.
# "strace -f -o /tmp/wrap.out"; its program is copied into the guest, and
# the last lines of /tmp/wrap.out join the test's output), TOLLFREE_VM_TOPOS
# ("loop veth siw two"), TOLLFREE_VM_PEERS (1: the perftest comparison; 0:
# none), TOLLFREE_VM_PEERS_REPS (runs of each tool, 5; the best counts:
# under TCG a round trip is about 20 us in one run and 40 us in the next,
# for perftest as for tollfree, and the best of more runs finds each
# tool's fast runs),
# TOLLFREE_VM_PEERS_ITERS (iterations a run, 1000),
# TOLLFREE_VM_PEERS_SESSIONS (crr and ucx_session sessions a run, 30;
# also the two-guest crr's), TOLLFREE_VM_TWO_TESTS (the tests of the "two"
# topology; default: conf_session_basic, _imm, _wait, _revoke and
# _order: the last is where iWARP's WRITE-then-CLOSE race shows),
# TOLLFREE_VM_TWO_SMP (vCPUs of each of its guests, 1),
# TOLLFREE_VM_TWO_SIW (1: the "two-siw" pass when siw.ko builds; 0: none).
# The perftest table is also written to TOLLFREE_VM_WORK/peers.txt and
# the session table to TOLLFREE_VM_WORK/sessions.txt (bench/peers/run.sh
# reads both).
#
# KVM is not used: the build machines' /dev/kvm is a PVM hypervisor that
# stock kernels cannot run under.  The guest runs under TCG, where timings
# only compare operations with each other.
#
# Exit status: 0 when every test passed or skipped, 1 when a test failed,
# 2 when the guest did not finish, 3 on a setup error.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
log() { echo "[vm $(date +%T)] $*"; }
die() {
	echo "vm: $*" >&2
	exit 3
}

[ $# -eq 1 ] || die "usage: $0 BUILD_DIR"
BUILD=$(cd "$1" && pwd) || die "no build directory $1"
CACHE=${TOLLFREE_VM_CACHE:-${HOME:-/root}/.cache/tollfree-vm}
W=${TOLLFREE_VM_WORK:-$BUILD/vm}
TEST_TIMEOUT=${TOLLFREE_VM_TEST_TIMEOUT:-120}
GUEST_TIMEOUT=${TOLLFREE_VM_TIMEOUT:-900}
MEM=${TOLLFREE_VM_MEM:-2G}
SMP=${TOLLFREE_VM_SMP:-2}
T_START=$(date +%s)
mkdir -p "$CACHE" "$W"

# ------------------------------------------------------------- packages
PKGS="qemu-system-x86 busybox-static cpio kmod rdma-core ibverbs-providers
      iproute2 xz-utils"
[ "${TOLLFREE_VM_PEERS:-1}" = 1 ] &&
	PKGS="$PKGS perftest rdmacm-utils libucx-dev"
MISSING=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
		MISSING="$MISSING $p"
done
if [ -n "$MISSING" ]; then
	log "installing:$MISSING"
	[ "$(id -u)" = 0 ] || die "need root to install$MISSING"
	apt-get update -qq
	# shellcheck disable=SC2086 # one word per package
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
		--no-install-recommends $MISSING >/dev/null
fi

# ------------------------------------------------------------- kernel
# The package name is remembered in the cache, so that later runs work
# without consulting apt (and keep using the kernel they were tested on).
KPKG=${TOLLFREE_VM_KPKG:-$(cat "$CACHE/kpkg" 2>/dev/null || true)}
if [ -z "$KPKG" ]; then
	KPKG=$(apt-cache search --names-only \
		'^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$' |
		awk '{print $1}' | sort -V | tail -1)
	[ -n "$KPKG" ] || die "no linux-image-6.1.0-*-amd64-unsigned in apt"
fi
KV=${KPKG#linux-image-}
KV=${KV%-unsigned}
K="$CACHE/$KPKG"
if [ ! -f "$K/done" ]; then
	log "fetching kernel package $KPKG (once per machine)"
	rm -rf "$K" "$CACHE/debs"
	mkdir -p "$CACHE/debs"
	(cd "$CACHE/debs" &&
		apt-get -qq -o APT::Sandbox::User=root download "$KPKG") ||
		die "apt-get download $KPKG failed"
	mkdir -p "$K"
	dpkg-deb -x "$CACHE"/debs/"${KPKG}"_*.deb "$K/root"
	rm -rf "$CACHE/debs"
	# dpkg-deb -x does not run depmod.
	depmod -b "$K/root" "$KV"
	grep -q '^CONFIG_PVH=y' "$K/root/boot/config-$KV" ||
		die "$KPKG has no PVH entry"
	# vmlinuz = real-mode setup + decompressor + xz payload.  Booting the
	# uncompressed vmlinux through its PVH entry saves seconds under TCG.
	# (pipefail off: head and xz stop early and their writers get SIGPIPE.)
	OFF=$(
		set +o pipefail
		LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$K/root/boot/vmlinuz-$KV" |
			head -1 | cut -d: -f1
	)
	(
		set +o pipefail
		tail -c +$((OFF + 1)) "$K/root/boot/vmlinuz-$KV" |
			xz -dc --single-stream >"$K/vmlinux"
	)
	[ -s "$K/vmlinux" ] || die "vmlinux extraction failed"
	echo "$KPKG" >"$CACHE/kpkg"
	touch "$K/done"
fi
KROOT="$K/root"

# ------------------------------------------------------------- topologies
TWO=0
ONE_TOPOS=""
for t in ${TOLLFREE_VM_TOPOS:-loop veth siw two}; do
	case $t in
	two) TWO=1 ;;
	loop | veth | siw) ONE_TOPOS="$ONE_TOPOS $t" ;;
	*) die "unknown topology $t (loop veth siw two)" ;;
	esac
done
[ -n "$ONE_TOPOS" ] || [ $TWO = 1 ] || die "no topology"
TWO_TESTS=""
if [ $TWO = 1 ]; then
	for t in ${TOLLFREE_VM_TWO_TESTS:-conf_session_basic conf_session_imm \
		conf_session_wait conf_session_revoke conf_session_order}; do
		if [ -x "$BUILD/tests/$t" ]; then
			TWO_TESTS="$TWO_TESTS $t"
		else
			log "two: no $BUILD/tests/$t"
		fi
	done
fi

# ------------------------------------------------------------- siw
# Debian's kernels have no siw.ko: siw-module.sh builds it (once per
# kernel, cached next to it).  Without it the siw topology is skipped.
SIW=0
SIW_WHY=""
TWO_SIW=0
if [ $TWO = 1 ]; then
	case ${TOLLFREE_VM_TWO_SIW:-1} in
	0) ;;
	1) TWO_SIW=1 ;;
	*) die "TOLLFREE_VM_TWO_SIW: 0 or 1, not '$TOLLFREE_VM_TWO_SIW'" ;;
	esac
fi
case " $ONE_TOPOS $([ $TWO_SIW = 1 ] && echo two-siw) " in
*" siw "* | *" two-siw "*)
	if SIW_WHY=$("$HERE/siw-module.sh" "$KPKG" "$KROOT" 2>&1 | tail -1); then
		SIW=1
		[ -n "$SIW_WHY" ] && log "$SIW_WHY"
	else
		log "no siw topology: $SIW_WHY"
		TWO_SIW=0
	fi
	;;
esac

# ------------------------------------------------------------- initramfs
TESTS=${TOLLFREE_VM_TESTS:-}
if [ -z "$TESTS" ]; then
	# The conformance suite, and the unit tests that must hold on rxe as
	# on the soft provider: pool, registration cache, and the control QP
	# of kept session connections (session_ctl_unit, the internal half of
	# conf_session_ctl); verbs_cm_hostile: strangers on the rdma_cm port
	# (iWARP; it skips on rxe).
	for f in "$BUILD"/tests/conf_* "$BUILD"/tests/verbs_smoke \
		"$BUILD"/tests/verbs_cm_hostile "$BUILD"/tests/session_ctl_unit \
		"$BUILD"/tests/pool_* "$BUILD"/tests/rcache_*; do
		[ -f "$f" ] && [ -x "$f" ] && TESTS="$TESTS $(basename "$f")"
	done
	# The examples run as one more test (kv_example: see below).
	[ -x "$BUILD/examples/kv_server" ] && TESTS="$TESTS kv_example"
fi
# "none": no tests, only the perftest comparison (bench/peers/run.sh).
[ "$TESTS" = none ] && TESTS=""
[ -n "$TESTS" ] || [ "${TOLLFREE_VM_TESTS:-}" = none ] ||
	die "no test executables in $BUILD/tests"
EXAMPLES=""
for f in "$BUILD"/examples/*; do
	[ -f "$f" ] && [ -x "$f" ] && EXAMPLES="$EXAMPLES $f"
done
BENCH=0
[ -x "$BUILD/tools/tollfree-bench" ] && BENCH=1
# perftest beside tollfree-bench lat (needs both).
PEERS=${TOLLFREE_VM_PEERS:-1}
[ -n "$ONE_TOPOS" ] || PEERS=0 # the comparisons run in the single guest
PERFTEST=""
if [ "$PEERS" = 1 ]; then
	for t in ib_write_lat ib_read_lat ib_send_lat; do
		f=$(command -v "$t" || true)
		[ -n "$f" ] && PERFTEST="$PERFTEST $f"
	done
	if [ $BENCH = 0 ] || [ "$(echo "$PERFTEST" | wc -w)" != 3 ]; then
		log "no perftest comparison: needs perftest and tollfree-bench"
		PEERS=0
		PERFTEST=""
	fi
fi
# The session comparison's peers: cmtime (rdmacm-utils) and ucx_session,
# built here against the host's UCX (the guest has no compiler; host and
# guest share Debian 12's libucx0) unless the build tree has it.
CMTIME=""
UCXS=""
UCX_MODS=""
if [ "$PEERS" = 1 ]; then
	CMTIME=$(command -v cmtime || true)
	[ -n "$CMTIME" ] || log "no cmtime (rdmacm-utils): no rdma_cm row"
	if [ -x "$BUILD/bench/ucx_session" ]; then
		UCXS=$BUILD/bench/ucx_session
	elif [ -f /usr/include/ucp/api/ucp.h ] &&
		cc -O2 -o "$W/ucx_session" "$HERE/../../bench/peers/ucx_session.c" \
			-lucp -lucs 2>"$W/ucx_session.build"; then
		UCXS=$W/ucx_session
	else
		log "no ucx_session (libucx-dev?): no UCX row"
	fi
	# UCX dlopen()s its transports from <libdir>/ucx: verbs and rdma_cm.
	for f in /usr/lib/x86_64-linux-gnu/ucx/libuct_ib.so* \
		/usr/lib/x86_64-linux-gnu/ucx/libuct_rdmacm.so*; do
		[ -n "$UCXS" ] && [ -e "$f" ] && UCX_MODS="$UCX_MODS $f"
	done
fi

SESS_N=${TOLLFREE_VM_PEERS_SESSIONS:-30}
case $SESS_N in
'' | *[!0-9]* | 0*) die "TOLLFREE_VM_PEERS_SESSIONS: a count from 1, not '$SESS_N'" ;;
esac

R="$W/initramfs"
rm -rf "$R"
mkdir -p "$R"/{usr/bin,usr/sbin,usr/lib/x86_64-linux-gnu,usr/lib64,etc} \
	"$R"/{proc,sys,dev,tmp,run,root,tf/bin}
ln -s usr/bin "$R/bin"
ln -s usr/sbin "$R/sbin"
ln -s usr/lib "$R/lib"
ln -s usr/lib64 "$R/lib64"
cp /usr/bin/busybox "$R/usr/bin/busybox"
# "busybox --list" includes busybox itself: do not link it onto itself.
for a in $(/usr/bin/busybox --list); do
	[ "$a" = busybox ] || ln -sf busybox "$R/usr/bin/$a"
done

# Kernel modules: rxe, the uverbs interface and the netdevs, in the
# dependency order modprobe computes (the guest has no modprobe logic).
# rxe asks the crypto API for "crc32" at run time, which no symbol
# dependency reveals: without the crc32 modules "rdma link add" fails
# with ENOENT.
: >"$R/etc/modules.order"
# rdma_ucm is rdma_cm's user interface (/dev/infiniband/rdma_cm), which
# iWARP connections (siw) and perftest's -R need.
MODS="crc32_generic crc32_pclmul rdma_rxe ib_uverbs rdma_ucm dummy veth"
[ $SIW = 1 ] && MODS="$MODS crc32c_generic siw"
[ $TWO = 1 ] && MODS="$MODS virtio_pci virtio_net"
for m in $MODS; do
	modprobe -d "$KROOT" -S "$KV" --show-depends "$m" |
		while read -r cmd ko args; do
			[ "$cmd" = insmod ] || continue
			rel=${ko#"$KROOT"}
			mkdir -p "$R$(dirname "$rel")"
			cp -n "$ko" "$R$rel"
			grep -q "^$rel" "$R/etc/modules.order" ||
				echo "$rel $args" >>"$R/etc/modules.order"
		done
done

# User space: tools, tests, and every shared library they load, including
# libtollfree.so from the build tree and the rxe verbs provider, which
# libibverbs dlopen()s.  glibc dlopen()s libgcc_s for thread cancellation.
PROV=""
mkdir -p "$R/usr/lib/x86_64-linux-gnu/libibverbs" "$R/etc/libibverbs.d"
DRIVERS=rxe
[ $SIW = 1 ] && DRIVERS="rxe siw"
for d in $DRIVERS; do
	f=""
	for g in /usr/lib/x86_64-linux-gnu/libibverbs/lib"$d"-rdmav*.so; do
		[ -f "$g" ] && f=$g
	done
	[ -n "$f" ] || die "$d provider library not found (ibverbs-providers)"
	cp "$f" "$R$f"
	cp "/etc/libibverbs.d/$d.driver" "$R/etc/libibverbs.d/"
	PROV="$PROV $f"
done
BINS="/usr/sbin/ip /usr/bin/rdma"
WRAP=${TOLLFREE_VM_WRAP:-}
if [ -n "$WRAP" ]; then
	WPROG=$(command -v "${WRAP%% *}") || die "no program for $WRAP"
	BINS="$BINS $WPROG"
fi
for b in $BINS; do cp "$b" "$R$b"; done
for t in $TESTS $TWO_TESTS; do
	[ "$t" = kv_example ] || cp -f "$BUILD/tests/$t" "$R/tf/bin/"
done
for e in $EXAMPLES; do cp "$e" "$R/tf/bin/"; done
if [ -n "$EXAMPLES" ]; then
	# kv_test.sh starts kv_server on TOLLFREE_DEVICE and kv_client on
	# TOLLFREE_TEST_PEER_DEVICE, so the example crosses the veth too.
	cp "$HERE/../../examples/kv_test.sh" "$R/tf/bin/kv_test.sh"
	printf '#!/bin/sh\nexec /tf/bin/kv_test.sh /tf/bin/kv_server /tf/bin/kv_client\n' \
		>"$R/tf/bin/kv_example"
	chmod +x "$R/tf/bin/kv_test.sh" "$R/tf/bin/kv_example"
fi
[ $BENCH = 1 ] && cp "$BUILD/tools/tollfree-bench" "$R/tf/bin/"
for f in $PERFTEST $CMTIME $UCXS; do cp "$f" "$R/tf/bin/"; done
# shellcheck disable=SC2086 # PROV and UCX_MODS are lists
for f in $BINS "$R"/tf/bin/* $PROV $UCX_MODS \
	/lib/x86_64-linux-gnu/libgcc_s.so.1; do
	case "$f" in *.so*) echo "$f" ;; esac
	ldd "$f" 2>/dev/null |
		awk '/=>/ && $3 ~ /^\//{print $3} /^[ \t]*\//{print $1}' ||
		true # scripts (kv_example) are not dynamic executables
done | sort -u | while read -r lib; do
	case "$lib" in
	"$BUILD"/*) dst=/usr/lib/x86_64-linux-gnu/$(basename "$lib") ;;
	/lib*) dst=/usr$lib ;;
	*) dst=$lib ;;
	esac
	mkdir -p "$R$(dirname "$dst")"
	cp -L "$lib" "$R$dst"
done
{ echo "$TESTS" | tr ' ' '\n' | grep . || true; } >"$R/tf/tests"
{ echo "$TWO_TESTS" | tr ' ' '\n' | grep . || true; } >"$R/tf/two_tests"
{
	printf 'TEST_TIMEOUT=%q\nBENCH=%q\n' "$TEST_TIMEOUT" "$BENCH"
	printf 'PEERS=%q\nPEERS_REPS=%q\nPEERS_ITERS=%q\n' "$PEERS" \
		"${TOLLFREE_VM_PEERS_REPS:-5}" "${TOLLFREE_VM_PEERS_ITERS:-1000}"
	printf 'SESS_N=%q\nTWO_SIW=%q\n' "$SESS_N" "$TWO_SIW"
	TOPOS=""
	for t in $ONE_TOPOS; do
		[ "$t" = siw ] && [ $SIW = 0 ] && continue
		TOPOS="$TOPOS $t"
	done
	printf 'WRAP=%q\nTOPOS=%q\n' "$WRAP" "$TOPOS"
} >"$R/tf/config"
for v in ${TOLLFREE_VM_ENV:-}; do
	printf 'export %q\n' "$v" >>"$R/tf/config"
done
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$R/etc/passwd"
printf 'root:x:0:\n' >"$R/etc/group"
printf '127.0.0.1 localhost\n' >"$R/etc/hosts"
install -m 755 "$HERE/guest-init.sh" "$R/init"
(cd "$R" && find . -print0 | cpio --null -o -H newc --quiet) >"$W/initramfs.cpio"
log "kernel $KV, initramfs $(du -h "$W/initramfs.cpio" | cut -f1)," \
	"tests:$TESTS"

# ------------------------------------------------------------- boot
LOG="$W/console.log"
LOGS=""
# oops=panic with panic=-1 and -no-reboot: a guest kernel oops ends
# qemu at once (its trace in the console log) instead of leaving a
# half-dead guest to run into the timeout.
APPEND="console=ttyS0 rdinit=/init panic=-1 oops=panic quiet loglevel=3"
APPEND="$APPEND mitigations=off"
rm -f "$LOG" "$W"/console-two-*.log
if [ -n "$ONE_TOPOS" ]; then
	log "booting the guest (TCG); full console log: $LOG"
	T_BOOT=$(date +%s)
	set +e
	timeout "$GUEST_TIMEOUT" qemu-system-x86_64 -accel tcg -cpu max \
		-m "$MEM" -smp "$SMP" -nographic -no-reboot -nic none \
		-kernel "$K/vmlinux" -initrd "$W/initramfs.cpio" \
		-append "$APPEND" </dev/null 2>&1 | sed -u 's/\r$//' >"$LOG"
	QRC=${PIPESTATUS[0]}
	set -e
	log "guest ran $(($(date +%s) - T_BOOT)) s (qemu rc $QRC)"
	LOGS=$LOG
fi

# Two kernels: a qemu socket netdev over UDP, each guest sending its frames
# to the other's port on 127.0.0.1 (two free ports above 20000).  Not the
# TCP form (listen=/connect=): qemu does not set TCP_NODELAY on that
# stream, so a frame sent while the one before is unacknowledged waits for
# the host's delayed ACK, up to 40 ms.  It made a one-exchange tcp-crr
# between the guests take 44 ms and hid every wire cost behind it.
if [ $TWO = 1 ]; then
	TWO_SMP=${TOLLFREE_VM_TWO_SMP:-1}
	case $TWO_SMP in
	[1-9]) ;;
	*) die "TOLLFREE_VM_TWO_SMP: 1 to 9 vCPUs, not '$TWO_SMP'" ;;
	esac
	NPORT=""
	for try in $(seq 50); do
		p=$((20000 + (RANDOM % 20000)))
		if ! ss -Htuan "( sport = :$p or dport = :$p or \
			sport = :$((p + 1)) or dport = :$((p + 1)) )" \
			2>/dev/null | grep -q .; then
			NPORT=$p
			break
		fi
		: "$try"
	done
	[ -n "$NPORT" ] || die "no free ports for the socket netdev"
	two_qemu() { # role netdev-option mac
		timeout "$GUEST_TIMEOUT" qemu-system-x86_64 -accel tcg \
			-cpu max -m "$MEM" -smp "$TWO_SMP" -nographic \
			-no-reboot -netdev "socket,id=n1,$2" \
			-device "virtio-net-pci,netdev=n1,mac=$3" \
			-kernel "$K/vmlinux" -initrd "$W/initramfs.cpio" \
			-append "$APPEND tf_role=$1" </dev/null 2>&1 |
			sed -u 's/\r$//' >"$W/console-two-$1.log"
	}
	log "two: booting two guests (TCG, socket netdev over UDP ports" \
		"$NPORT and $((NPORT + 1)));" \
		"console logs: $W/console-two-{srv,cli}.log"
	T_BOOT=$(date +%s)
	two_qemu srv "udp=127.0.0.1:$((NPORT + 1)),localaddr=127.0.0.1:$NPORT" \
		52:54:00:30:00:01 &
	SRV_PID=$!
	set +e
	two_qemu cli "udp=127.0.0.1:$NPORT,localaddr=127.0.0.1:$((NPORT + 1))" \
		52:54:00:30:00:02
	wait "$SRV_PID"
	set -e
	log "two: guests ran $(($(date +%s) - T_BOOT)) s"
	LOGS="$LOGS $W/console-two-cli.log"
fi

# ------------------------------------------------------------- results
# One line per test: PASS/FAIL/SKIP, the skip reason or the failure's
# last lines, then a table.  Test output is in the console log.
rm -f "$W/summary.txt" "$W/summary.txt.observe" "$W/summary.txt.fail" \
	"$W/summary.txt.flaky" "$W/devices.txt"
: >"$W/summary.txt" # stays empty when no test ran (TOLLFREE_VM_TESTS=none)
# shellcheck disable=SC2086 # LOGS: the console logs, one word each
awk -v out="$W/summary.txt" -v devs="$W/devices.txt" '
# What made a test (or part of one) skip, without its figures: the
# capability of "provider X lacks WHAT (caps 0x..)", else the reason with
# numbers as N, so that one cause counts once per device.
function cause(r) {
	if (match(r, /lacks .*\(caps 0x[0-9a-f]+\)/)) {
		r = substr(r, RSTART + 6)
		sub(/ *\(caps 0x[0-9a-f]+\).*$/, "", r)
		return "missing capability: " r
	}
	o = ""
	while (match(r, /0x[0-9a-f]+|[0-9]+/)) {
		# Figures are N; digits in a name (MW_TYPE2) stay.
		p = substr(r, 1, RSTART - 1)
		if (RSTART > 1 && substr(r, RSTART - 1, 1) ~ /[A-Za-z_-]/)
			o = o p substr(r, RSTART, RLENGTH)
		else
			o = o p "N"
		r = substr(r, RSTART + RLENGTH)
	}
	return o r
}
function count_cause(kind, r) {
	k = topo SUBSEP kind SUBSEP cause(r)
	if (!(k in ncause)) corder[++nc] = k
	ncause[k]++
}
function flush_test() {
	if (name == "") return
	if (rc == 0) res = "PASS"
	else if (rc == 77) res = "SKIP"
	else if (rc == 124 || rc == 143) res = "FAIL(timeout)"
	else res = "FAIL(rc=" rc ")"
	if (!(topo in seen)) { seen[topo] = 1; order[++ntopo] = topo }
	if (res == "PASS") npass[topo]++
	else if (res == "SKIP") nskip[topo]++
	else nfail[topo]++
	line = sprintf("%-7s %-24s %-14s %6.1fs", topo, name, res, secs)
	if (res == "SKIP") {
		line = line "  " reason
		count_cause("skip", reason)
	}
	print line
	print line > out
	if (res != "PASS" && res != "SKIP") {
		# Again at the end of the output, where a CI log tail
		# shows it.
		print line > (out ".fail")
		for (i = (nl > 12 ? nl - 11 : 1); i <= nl; i++) {
			print "        | " buf[i]
			print "        | " buf[i] > (out ".fail")
		}
	}
	name = ""
}
/^@@FLAKY / { print "        " $2 " " $3 ": failed (rc=" $4 ") and ran again" > (out ".flaky"); next }
/^@@FLAKYOUT / { sub(/^@@FLAKYOUT /, ""); print "        | " $0 > (out ".flaky"); next }
/^@@TEST / { flush_test(); topo = $2; name = $3; rc = $4; secs = $5
	reason = ""; nl = 0; next }
/^@@OUT$/ { inout = 1; next }
/^@@END$/ { inout = 0; flush_test(); next }
inout {
	buf[++nl] = $0
	if (match($0, /SKIP: /) && reason == "")
		reason = substr($0, RSTART + 6)
	if (/observe:/) print "        " $0 > (out ".observe")
	# Parts of a test not run for a missing capability (both sides of
	# a pair may say so: each line counts once per test).
	if (/: not tried: / && !((topo, name, $0) in nt_seen)) {
		nt_seen[topo, name, $0] = 1
		ntried[topo]++
		r = $0
		sub(/.*: not tried: /, "", r)
		count_cause("not-tried", r)
	}
	next
}
/^@@MARK .* TOPO / { dev[$4] = ($5 == $6 ? $5 : $5 " -> " $6); next }
/^@@VETH / { print "packets on veth0 during " $2; next }
END {
	if (!ntopo) exit
	printf "%-8s %-14s %5s %5s %5s %10s\n", "topo", "devices", "pass",
	       "skip", "fail", "not-tried" > devs
	for (i = 1; i <= ntopo; i++) {
		t = order[i]
		printf "%-8s %-14s %5d %5d %5d %10d\n", t, dev[t], npass[t],
		       nskip[t], nfail[t], ntried[t] > devs
	}
	if (!nc) exit
	printf "\n%-8s %-9s %5s  %s\n", "topo", "kind", "count", "cause" > devs
	split("skip not-tried", kinds, " ")
	for (j = 1; j <= ntopo; j++)
		for (q = 1; q <= 2; q++)
			for (i = 1; i <= nc; i++) {
				split(corder[i], f, SUBSEP)
				if (f[1] != order[j] || f[2] != kinds[q])
					continue
				printf "%-8s %-9s %5d  %s\n", f[1], f[2],
				       ncause[corder[i]], f[3] > devs
			}
}
' $LOGS
touch "$LOG" # absent when only "two" ran: the rows below are then empty
sed -n '/^@@BENCH_BEGIN/,/^@@BENCH_END/p' "$LOG" >"$W/bench.txt"
if [ -s "$W/bench.txt" ]; then
	echo "--- tollfree-bench reg in the guest (TCG: compare rows with" \
		"each other only, not with hardware) ---"
	grep -v '^@@' "$W/bench.txt"
	grep '^@@BENCH_END' "$W/bench.txt" | sed 's/^@@/bench: /'
elif [ $BENCH = 0 ]; then
	echo "(tollfree-bench not built: no registration benchmark)"
fi
# perftest and tollfree-bench lat on rxe0: each tool's best (lowest)
# typical latency over the runs, and tollfree's over perftest's.  The
# best, not the median: a guest whose vCPU threads the host deschedules
# (a loaded host, TCG) gives whole runs of milliseconds per round trip,
# to either tool, and that says nothing about either.
rm -f "$W/peers.txt"
grep '^@@PEERFAIL' "$LOG" | sed 's/^@@PEERFAIL/peers: failed:/' || true
if grep -q '^@@PEER ' "$LOG"; then
	awk '/^@@PEER / {
		k = $2 SUBSEP $3 SUBSEP $4
		if (!(k in v) || $5 + 0 < v[k] + 0) v[k] = $5
		n[k]++
	}
	END {
		split("write read send", ops, " ")
		split("8 1024", sizes, " ")
		for (o = 1; o <= 3; o++)
			for (z = 1; z <= 2; z++) {
				op = ops[o]; sz = sizes[z]
				if (!((("perftest", op, sz) in v) && \
				      (("tollfree", op, sz) in v)))
					continue
				p = v["perftest", op, sz]
				t = v["tollfree", op, sz]
				printf "%-6s %6d %12.2f %12.2f %7.2f %5d\n", op, sz,
				       p, t, (p > 0 ? t / p : 0),
				       n["tollfree", op, sz]
			}
	}' "$LOG" >"$W/peers.txt"
	echo "--- tollfree-bench lat over perftest on rxe0, same guest ($(
		sed -n 's/^@@PEERS_BEGIN //p' "$LOG" | head -1); the best of" \
		"the runs' typical latency; TCG: only the ratios mean" \
		"something) ---"
	printf '%-6s %6s %12s %12s %7s %5s\n' op bytes perftest_us \
		tollfree_us ratio runs
	cat "$W/peers.txt"
elif [ "$PEERS" = 1 ]; then
	echo "peers: no perftest/tollfree-bench results (see $LOG)"
fi
# Short sessions on rxe0: the best run of each (cmtime: the run with the
# least set-up + teardown; crr: the least connect + close, and the least
# median session; ucx_session: the least median session).  Rows:
#   rdma_cm-setup+teardown  cmtime's create id .. connect, disconnect +
#                           destroy, against crr's connect + close phases
#                           (ratio: tollfree over rdma_cm);
#   rdma_cm-without-bind    the same less cmtime's bind step: with one
#                           connection a process, librdmacm opens the
#                           device and allocates its PD there (first use),
#                           which tollfree's long-lived node does not
#                           repeat per session;
#   ucx-rc_verbs-session    ucx_session's median session against crr's
#                           (ratio: UCX over tollfree);
#   new-over-tcp-crr[-spin] crr's least median TCP session (a new
#                           connection, one exchange, close) against its
#                           least median pool+mw/new session, same guest;
#   stock-connect-over-cold crr's least median connect phase with
#                           TOLLFREE_SESSION_STOCK=0 against the least
#                           with the stock.
# Also written to sessions.txt: "what peer_us tollfree_us ratio runs"
# (the first three rows: bench/peers/run.sh reads them).
rm -f "$W/sessions.txt"
grep '^@@SESSFAIL' "$LOG" | sed 's/^@@SESSFAIL/sessions: failed:/' || true
if grep -q '^@@SESS ' "$LOG"; then
	awk -v out="$W/sessions.txt" '
	/^@@SESS cmtime / {
		r = $5
		if ($3 ~ /^(disconnect|destroy)$/) down[r] += $4
		else up[r] += $4
		if ($3 == "bind_addr") bind[r] = $4
		step[$3] = 1; sv[$3, r] = $4; cm[r] = 1
	}
	/^@@SESS crr / {
		if (ncrr == 0 || $3 + 0 < stock_conn) stock_conn = $3 + 0
		c = $3 + $4
		if (ncrr == 0 || c < best_cc) {
			best_cc = c; best_conn = $3; best_close = $4
		}
		if (ncrr == 0 || $5 + 0 < best_tf) best_tf = $5
		ncrr++
	}
	/^@@SESS ucx / {
		if (nucx == 0 || $3 + 0 < best_ucx) best_ucx = $3
		nucx++
	}
	/^@@SESS tcp / {
		if (!(($3) in best_tcp) || $4 + 0 < best_tcp[$3])
			best_tcp[$3] = $4 + 0
		ntcp[$3]++
	}
	/^@@SESS cold / {
		if (ncold == 0 || $3 + 0 < cold_conn) cold_conn = $3 + 0
		ncold++
	}
	END {
		for (r in cm) {
			t = up[r] + down[r]
			ncm++
			if (ncm == 1 || t < best_cm) { best_cm = t; best_r = r }
		}
		if (ncm) {
			line = "rdma_cm steps (cmtime -c 1, best run, us):"
			split("create_id bind_addr resolve_addr resolve_route " \
			      "create_qp connect disconnect destroy", o, " ")
			for (i = 1; i <= 8; i++)
				if ((o[i], best_r) in sv)
					line = line " " o[i] "=" sv[o[i], best_r]
			print line
			print "tollfree crr pool+mw/new phases (best run, us):" \
			      " connect=" best_conn " close=" best_close
		}
		printf "%-26s %12s %12s %7s %5s  %s\n", "what", "peer_us",
		       "tollfree_us", "ratio", "runs", "ratio is"
		if (ncm && ncrr) {
			printf "%-26s %12.1f %12.1f %7.2f %5d  %s\n",
			       "rdma_cm-setup+teardown", best_cm, best_cc,
			       best_cc / best_cm, ncm,
			       "tollfree connect+close over rdma_cm setup+teardown (target <= 0.5)"
			printf "%-26s %12.1f %12.1f %7.2f %5d\n",
			       "rdma_cm-setup+teardown", best_cm, best_cc,
			       best_cc / best_cm, ncm > out
			nb = best_cm - bind[best_r]
			printf "%-26s %12.1f %12.1f %7.2f %5d  %s\n",
			       "rdma_cm-without-bind", nb, best_cc,
			       best_cc / nb, ncm,
			       "the same, less bind addr (librdmacm opens the device there)"
			printf "%-26s %12.1f %12.1f %7.2f %5d\n",
			       "rdma_cm-without-bind", nb, best_cc,
			       best_cc / nb, ncm > out
		}
		if (nucx && ncrr) {
			printf "%-26s %12.1f %12.1f %7.2f %5d  %s\n",
			       "ucx-rc_verbs-session", best_ucx, best_tf,
			       best_ucx / best_tf, nucx,
			       "UCX rc_verbs session over tollfree pool+mw/new (target >= 3)"
			printf "%-26s %12.1f %12.1f %7.2f %5d\n",
			       "ucx-rc_verbs-session", best_ucx, best_tf,
			       best_ucx / best_tf, nucx > out
		}
		# Issue 12 on rxe: a new connection per session against TCP
		# doing the same in the same guest, and the connect phase
		# with the connection stock against the cold path.
		split("tcp-crr tcp-crr-spin", tm, " ")
		for (i = 1; i <= 2; i++)
			if (ncrr && (tm[i] in best_tcp))
				printf "%-26s %12.1f %12.1f %7.2f %5d  %s\n",
				       "new-over-" tm[i], best_tcp[tm[i]],
				       best_tf, best_tf / best_tcp[tm[i]],
				       ntcp[tm[i]],
				       "pool+mw/new session over " tm[i] \
				       " (target <= 1.0)"
		if (ncrr && ncold)
			printf "%-26s %12.1f %12.1f %7.2f %5d  %s\n",
			       "stock-connect-over-cold", cold_conn,
			       stock_conn, stock_conn / cold_conn, ncold,
			       "connect phase, stock over TOLLFREE_SESSION_STOCK=0 (target <= 0.3)"
	}' "$LOG" >"$W/sessions.report"
	echo "--- short sessions on rxe0, same guest ($(
		sed -n 's/^@@SESS_BEGIN //p' "$LOG" | head -1); crr: tollfree-bench" \
		"crr --provider verbs -k 1 -s 1K --modes" \
		"pool+mw/new,tcp-crr,tcp-crr-spin, and pool+mw/new with" \
		"TOLLFREE_SESSION_STOCK=0; the best run of each; TCG: only the" \
		"ratios mean something) ---"
	cat "$W/sessions.report"
elif [ "$PEERS" = 1 ]; then
	echo "sessions: no cmtime/ucx_session/crr results (see $LOG)"
fi
if [ $TWO = 1 ]; then
	CLI_LOG=$W/console-two-cli.log
	if grep -q '^@@TWOCRR ' "$CLI_LOG"; then
		echo "--- two kernels (rxe0 in each, qemu UDP socket netdev):" \
			"tollfree-bench crr --provider verbs -k 1 -s 1K --modes" \
			"pool+mw/new,tcp-crr,tcp-crr-spin, server in one guest," \
			"client in the other; medians in us (TCG) ---"
		awk '/^@@TWOCRR / {
			if (!n++)
				printf "%-12s %12s %12s %12s\n", "mode",
					"session_us", "connect_us", "close_us"
			printf "%-12s %12s %12s %12s\n", $2, $3, $4, $5
			t[$2] = $3 }
		END { if (t["pool+mw/new"] && t["tcp-crr-spin"])
			printf "pool+mw/new over tcp-crr-spin (both spin): %.2f\n",
				t["pool+mw/new"] / t["tcp-crr-spin"]
		if (t["pool+mw/new"] && t["tcp-crr"])
			printf "pool+mw/new over tcp-crr (TCP blocks): %.2f\n",
				t["pool+mw/new"] / t["tcp-crr"] }' "$CLI_LOG"
	fi
	grep -q ' FAIL' "$W/summary.txt" &&
		echo "two: side B's output (the srv guest) is in" \
			"$W/console-two-srv.log (@@TWOB lines)"
fi
if [ -s "$W/summary.txt.observe" ]; then
	echo "--- device behaviour observed by the tests ---"
	sort -u "$W/summary.txt.observe"
fi

if [ -s "$W/devices.txt" ]; then
	echo "--- per device: tests passed, skipped, failed; parts of" \
		"passing tests not tried; then what caused the skips ---"
	cat "$W/devices.txt"
fi
if [ -s "$W/summary.txt.flaky" ]; then
	echo "--- tests that failed on siw and were run once more (the table counts" \
		"the second run); the first run's last lines ---"
	cat "$W/summary.txt.flaky"
fi
if [ -s "$W/summary.txt.fail" ]; then
	echo "--- failed tests and their last lines (whole output: $W/console*.log) ---"
	cat "$W/summary.txt.fail"
fi
NPASS=$(grep -c ' PASS ' "$W/summary.txt" || true)
NSKIP=$(grep -c ' SKIP ' "$W/summary.txt" || true)
NFAIL=$(grep -c ' FAIL' "$W/summary.txt" || true)
echo "summary: $NPASS passed, $NSKIP skipped, $NFAIL failed;" \
	"total $(($(date +%s) - T_START)) s"
# The closing line that scripts/test.sh adds to its own count.
echo "vm: $NPASS passed, $NFAIL failed, $NSKIP skipped"
DONE_LOGS=$LOGS
[ $TWO = 1 ] && DONE_LOGS="$DONE_LOGS $W/console-two-srv.log"
for l in $DONE_LOGS; do
	if ! grep -q '^@@DONE' "$l"; then
		echo "FAIL: the guest did not finish (console log: $l)"
		# Which test ran, and the kernel's report from its first line
		# (an oops or BUG names the call chain; the last lines alone
		# do not).
		grep '^@@MARK\|^@@RUN' "$l" | tail -2
		o=$(grep -n -m1 -e 'BUG:' -e 'Oops' -e 'general protection' \
			-e 'corruption' -e 'kernel BUG' "$l" | cut -d: -f1)
		if [ -n "$o" ]; then
			echo "the guest kernel crashed:"
			tail -n "+$o" "$l" | grep -v '^@@' | head -60
		else
			grep -v '^@@' "$l" | tail -15
		fi
		exit 2
	fi
	if grep -q '@@MARK .*\(RXE\|GID\|SIW\|TWO_NIC\)_FAILED' "$l"; then
		echo "FAIL: rxe, siw or NIC setup failed in the guest ($l)"
		exit 2
	fi
done
[ "$NFAIL" = 0 ] || exit 1
exit 0
