#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench/peers/run.sh - tollfree next to its peers, on this host, in one go.
#
#   bench/peers/run.sh [RESULT_FILE]
#
# Runs, one after the other, each bounded by `timeout`:
#   - shm_pingpong (bench/peers/shm_pingpong.c): plain stores and busy
#     polling through a shared mapping, the floor for same-host latency;
#   - UCX ucx_perftest -t ucp_put_lat with UCX_TLS=sm,self and UCX_TLS=tcp;
#   - libfabric fi_pingpong over the shm (rdm) and tcp (msg) providers;
#   - sockperf ping-pong over TCP loopback;
#   - tollfree-bench lat (write and send) on the soft provider, shm and tcp;
#   - short sessions: ucx_session (bench/peers/ucx_session.c: endpoint to a
#     ucp_listener, ucp_mem_map of a fresh 4 KiB buffer, rkey exchange, one
#     1 KiB put + flush, endpoint close, unmap) with UCX_TLS=tcp, next to
#     tollfree-bench crr with the same work (K=1, S=1 KiB, mode
#     pool+mw/new) on the soft provider, tcp and shm;
#   - rxe: perftest (ib_write_lat, ib_read_lat, ib_send_lat) beside
#     tollfree-bench lat --provider verbs on Soft-RoCE in a qemu guest,
#     both ends in the guest (tests/vm/run.sh with TOLLFREE_VM_TESTS=none:
#     minutes under TCG, where only the ratios mean something; RXE=0
#     leaves it out), and in the same guest rdma_cm (cmtime, one
#     connection: set-up + teardown) beside tollfree-bench crr's connect +
#     close phases, and ucx_session with UCX_TLS=rc_verbs (rdmacm
#     connection manager) beside tollfree-bench crr pool+mw/new;
# and prints ONE table: what, transport, size, the median in microseconds
# (one-way latency, or time per session for kind "session"), and the ratio
# to the tollfree row of the same transport class, kind (put/write,
# message/send, session) and size.  The table is also written to
# RESULT_FILE when one is given.
#
# Packages ucx-utils, libucx-dev (to build ucx_session), libfabric-bin and
# sockperf are installed with apt-get when missing (root only; otherwise
# those rows are skipped).
#
# Environment: BUILD_DIR (default <repo>/build-peers, configured if new and
# always rebuilt), RXE (1: the qemu rxe rows, 0: none; the guest's own
# settings are tests/vm/run.sh's TOLLFREE_VM_*), ITERS (default 10000),
# PORT_BASE (default 20100; every port
# used is below 32768), RUN_TIMEOUT (seconds per run, default 120), FI_RUNS
# (fi_pingpong repetitions, default 5), SESSIONS (per session row, default
# 300).
#
# Numbers are measurements of this host at this moment; on a shared or
# loaded machine they move from run to run.  Nothing here judges them.
set -u

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out_file=${1:-}
build=${BUILD_DIR:-$repo/build-peers}
iters=${ITERS:-10000}
sessions=${SESSIONS:-300}
port=${PORT_BASE:-20100}
tmo=${RUN_TIMEOUT:-120}
work=$(mktemp -d /tmp/tf-peers.XXXXXX)
rows=$work/rows            # what|transport|kind|size|median_us|note
server_pid=

log() { printf '%s\n' "$*" >&2; }

# shellcheck disable=SC2317 # called through the trap
cleanup() {
	# Only the server this script started, by its pid.
	if [ -n "$server_pid" ]; then
		kill "$server_pid" 2>/dev/null
		wait "$server_pid" 2>/dev/null
	fi
	rm -rf "$work"
}
trap cleanup EXIT

if [ "$port" -lt 1024 ] || [ "$port" -gt 32700 ]; then
	log "PORT_BASE must be between 1024 and 32700"
	exit 2
fi

# ------------------------------------------------------------ packages
need_pkgs=()
command -v ucx_perftest >/dev/null || need_pkgs+=(ucx-utils)
[ -f /usr/include/ucp/api/ucp.h ] || need_pkgs+=(libucx-dev)
command -v fi_pingpong >/dev/null || need_pkgs+=(libfabric-bin)
command -v sockperf >/dev/null || need_pkgs+=(sockperf)
if [ ${#need_pkgs[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ]; then
		log "installing ${need_pkgs[*]}"
		apt-get update -qq >/dev/null 2>&1
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			"${need_pkgs[@]}" >/dev/null 2>&1 ||
			log "apt-get install ${need_pkgs[*]} failed"
	else
		log "not root: cannot install ${need_pkgs[*]}; skipping them"
	fi
fi

# ------------------------------------------------------------ our binaries
bench=$build/tools/tollfree-bench
floor=$build/bench/shm_pingpong
ucx_sess=$build/bench/ucx_session
# Always (re)build: an incremental build is quick, and a stale binary
# would measure old code.  Configuring again is cheap and finds UCX
# headers installed since the last run (ucx_session is built only then).
log "building tollfree-bench, shm_pingpong and ucx_session in $build"
if ! { { [ -f "$build/CMakeCache.txt" ] ||
	cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release \
		-DBUILD_TESTING=OFF; } &&
	cmake -S "$repo" -B "$build" &&
	cmake --build "$build" -j"$(nproc)" \
		--target tollfree-bench shm_pingpong; } >"$work/build" 2>&1; then
	log "build failed (rows of missing binaries are skipped):"
	tail -3 "$work/build" >&2
fi
rm -f "$ucx_sess"
cmake --build "$build" --target ucx_session >"$work/build.ucx" 2>&1 ||
	log "ucx_session not built (no UCX headers?): its row is skipped"

# Pin servers and clients like tollfree-bench and shm_pingpong do: client
# on the first CPU this script may use, server on the second.  Without
# pinning, a busy host can put both spinning processes on one CPU.
allowed=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)
cpus=()
IFS=, read -ra ranges <<<"$allowed"
for r in "${ranges[@]}"; do
	lo=${r%-*} hi=${r#*-}
	for ((c = lo; c <= hi && ${#cpus[@]} < 2; c++)); do
		cpus+=("$c")
	done
done
if [ ${#cpus[@]} -ge 2 ]; then
	pin_cli=(taskset -c "${cpus[0]}")
	pin_srv=(taskset -c "${cpus[1]}")
else
	pin_cli=()
	pin_srv=()
fi

add_row() { # what transport kind size median note
	printf '%s|%s|%s|%s|%s|%s\n' "$1" "$2" "$3" "$4" "$5" "$6" >>"$rows"
}

next_port() { port=$((port + 1)); }

# Wait until something listens on TCP port $1 (at most 10 s).
wait_listen() {
	local i
	for i in $(seq 100); do
		if command -v ss >/dev/null; then
			ss -ltnH "sport = :$1" 2>/dev/null | grep -q . && return 0
		elif [ "$i" -ge 10 ]; then
			return 0
		fi
		sleep 0.1
	done
	return 1
}

stop_server() {
	if [ -n "$server_pid" ]; then
		kill "$server_pid" 2>/dev/null
		wait "$server_pid" 2>/dev/null
		server_pid=
	fi
}

# ------------------------------------------------------------ floor
log "shm_pingpong"
if [ ! -x "$floor" ]; then
	log "no $floor"
elif timeout "$tmo" "$floor" -n $((iters * 10)) -w "$iters" 64 1024 \
	>"$work/floor" 2>&1; then
	while read -r _ sz _ _ med _; do
		add_row "shm_pingpong (floor)" shm floor "${sz#size=}" \
			"${med#median_us=}" "stores+spin"
	done <"$work/floor"
else
	log "shm_pingpong failed: $(tail -1 "$work/floor")"
fi

# ------------------------------------------------------------ UCX
# ucx_perftest reports one-way latency for *_lat tests; the server serves
# one test and exits, so each size gets a fresh server.
ucx_run() { # tls label size
	local tls=$1 label=$2 sz=$3 med
	next_port
	UCX_TLS=$tls timeout "$tmo" "${pin_srv[@]}" ucx_perftest -p "$port" \
		>"$work/ucx.srv" 2>&1 &
	server_pid=$!
	wait_listen "$port" || { log "ucx server did not start"; stop_server; return; }
	if UCX_TLS=$tls timeout "$tmo" "${pin_cli[@]}" ucx_perftest 127.0.0.1 -p "$port" \
		-t ucp_put_lat -s "$sz" -n "$iters" -w $((iters / 10)) \
		>"$work/ucx.cli" 2>&1; then
		med=$(awk '/^Final:/ {print $3}' "$work/ucx.cli")
		[ -n "$med" ] && add_row "ucx_perftest ucp_put_lat" "$label" \
			put "$sz" "$med" "UCX_TLS=$tls, 50%ile"
	else
		log "ucx_perftest ($tls, $sz) failed: $(tail -1 "$work/ucx.cli")"
	fi
	wait "$server_pid" 2>/dev/null
	server_pid=
}
if command -v ucx_perftest >/dev/null; then
	for sz in 8 1024; do
		log "ucx_perftest sm,self $sz"
		ucx_run sm,self shm "$sz"
		log "ucx_perftest tcp $sz"
		ucx_run tcp tcp "$sz"
	done
fi

# ------------------------------------------------------------ libfabric
# fi_pingpong prints usec/xfer = elapsed / (2 * iterations): an average
# one-way time, with no percentiles, so one descheduled iteration on a
# busy host moves it a lot.  It therefore runs FI_RUNS times with
# ITERS/FI_RUNS iterations each, and the median of those averages is
# reported.  The shm provider offers only RDM endpoints; tcp is measured on
# its native MSG endpoints.  Not "sockets": that provider hangs here.
fi_runs=${FI_RUNS:-5}
fi_once() { # prov ep size -> prints the average, or nothing
	local prov=$1 ep=$2 sz=$3 n=$((iters / fi_runs > 0 ? iters / fi_runs : 1))
	next_port
	timeout "$tmo" "${pin_srv[@]}" fi_pingpong -p "$prov" -e "$ep" -I "$n" -S "$sz" \
		-B "$port" >"$work/fi.srv" 2>&1 &
	server_pid=$!
	if ! wait_listen "$port"; then
		log "fi_pingpong server did not start"
		stop_server
		return
	fi
	if timeout "$tmo" "${pin_cli[@]}" fi_pingpong -p "$prov" -e "$ep" -I "$n" \
		-S "$sz" -P "$port" 127.0.0.1 >"$work/fi.cli" 2>&1; then
		awk '$1 ~ /^[0-9]/ {v = $7} END {if (v != "") print v}' \
			"$work/fi.cli"
	else
		log "fi_pingpong ($prov, $sz) failed: $(tail -1 "$work/fi.cli")"
	fi
	wait "$server_pid" 2>/dev/null
	server_pid=
}
fi_run() { # prov ep size
	local prov=$1 ep=$2 sz=$3 med _r
	for _r in $(seq "$fi_runs"); do
		fi_once "$prov" "$ep" "$sz"
	done >"$work/fi.avgs"
	[ -s "$work/fi.avgs" ] || return
	med=$(sort -g "$work/fi.avgs" |
		awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}')
	add_row "fi_pingpong ($prov, $ep)" "$prov" msg "$sz" "$med" \
		"median of $(wc -l <"$work/fi.avgs") run averages"
}
if command -v fi_pingpong >/dev/null; then
	for sz in 8 1024; do
		log "fi_pingpong shm $sz"
		fi_run shm rdm "$sz"
		log "fi_pingpong tcp $sz"
		fi_run tcp msg "$sz"
	done
fi

# ------------------------------------------------------------ sockperf
# sockperf's smallest message is 14 bytes (its header), so 16 stands in
# for 8.  Its percentiles are one-way (RTT/2).
if command -v sockperf >/dev/null; then
	next_port
	timeout $((tmo * 2)) "${pin_srv[@]}" sockperf server --tcp -i 127.0.0.1 -p "$port" \
		>"$work/sp.srv" 2>&1 &
	server_pid=$!
	if wait_listen "$port"; then
		for sz in 16 1024; do
			log "sockperf tcp $sz"
			if timeout "$tmo" "${pin_cli[@]}" sockperf ping-pong --tcp -i 127.0.0.1 \
				-p "$port" -m "$sz" -t 3 >"$work/sp.cli" 2>&1; then
				med=$(awk '/percentile 50.000/ {print $NF}' \
					"$work/sp.cli")
				[ -n "$med" ] && add_row "sockperf ping-pong" tcp \
					msg "$sz" "$med" "TCP_NODELAY"
			else
				log "sockperf $sz failed: $(tail -1 "$work/sp.cli")"
			fi
		done
	else
		log "sockperf server did not start"
	fi
	stop_server
fi

# ------------------------------------------------------------ tollfree
# The CSV's 6th column is t_typical, the median.
for tp in shm tcp; do
	log "tollfree-bench lat $tp"
	if [ ! -x "$bench" ]; then
		log "no $bench"
	elif timeout "$tmo" "$bench" lat --provider soft --transport "$tp" \
		-t write,send -s 8,16,64,1024 -n "$iters" --csv \
		>"$work/tf.$tp" 2>&1; then
		while IFS=, read -r op sz _ _ _ med _; do
			case $op in
			write) kind=put ;;
			send) kind=msg ;;
			*) continue ;;
			esac
			add_row "tollfree-bench $op" "$tp" "$kind" "$sz" "$med" \
				"soft provider, median"
		done <"$work/tf.$tp"
	else
		log "tollfree-bench lat $tp failed: $(tail -3 "$work/tf.$tp")"
	fi
done

# ------------------------------------------------------------ sessions
# One short session each: UCX (put + flush after an rkey exchange) and
# tollfree (one 1 KiB WRITE through a per-session window, new connection).
# ucx_session pins itself like tollfree-bench does.
if [ -x "$ucx_sess" ]; then
	next_port
	log "ucx_session tcp"
	if UCX_TLS=tcp timeout "$tmo" "$ucx_sess" -n "$sessions" \
		-w $((sessions / 10)) -p "$port" >"$work/ucxs" 2>&1; then
		med=$(awk '{for (i = 1; i <= NF; i++) if ($i ~ /^median_us=/) {sub("median_us=", "", $i); print $i}}' "$work/ucxs")
		[ -n "$med" ] && add_row "ucx_session (put+flush)" tcp session \
			1024 "$med" "UCX_TLS=tcp, median per session"
	else
		log "ucx_session failed: $(grep -v 'mpool.c' "$work/ucxs" | tail -3)"
	fi
fi
# The CSV's 4th column is t_typical, the median per session.
for tp in tcp shm; do
	[ -x "$bench" ] || break
	log "tollfree-bench crr $tp"
	if timeout "$tmo" "$bench" crr --provider soft --transport "$tp" \
		-k 1 -s 1K -n "$sessions" --modes pool+mw/new --csv \
		>"$work/crr.$tp" 2>&1; then
		med=$(awk -F, '$1 == "pool+mw/new" {print $4}' "$work/crr.$tp")
		[ -n "$med" ] && add_row "tollfree-bench crr pool+mw/new" "$tp" \
			session 1024 "$med" "K=1 WRITE, median per session"
	else
		log "tollfree-bench crr $tp failed: $(tail -3 "$work/crr.$tp")"
	fi
done

# ------------------------------------------------------------ rxe (qemu)
# perftest and tollfree-bench lat on rxe0 in a qemu guest: the guest side
# is tests/vm/run.sh, which runs each tool TOLLFREE_VM_PEERS_REPS times and
# writes the best typical latency of each to peers.txt ("op bytes
# perftest_us tollfree_us ratio runs").  Kinds: write put, read get, send
# msg; the ratio column of the table compares with the tollfree row of the
# same kind and size on rxe.
if [ "${RXE:-1}" = 1 ] && [ -x "$repo/tests/vm/run.sh" ] &&
	[ -x "$bench" ]; then
	log "rxe: perftest beside tollfree-bench lat in a qemu guest"
	if TOLLFREE_VM_TESTS=none TOLLFREE_VM_TOPOS=loop \
		TOLLFREE_VM_WORK="$work/vm" \
		timeout $((tmo * 10)) "$repo/tests/vm/run.sh" "$build" \
		>"$work/vm.log" 2>&1 && [ -s "$work/vm/peers.txt" ]; then
		runs=$(awk 'NR == 1 {print $6}' "$work/vm/peers.txt")
		while read -r op sz perf tf _ _; do
			case $op in
			write) kind="put" ;;
			read) kind="get" ;;
			*) kind="msg" ;;
			esac
			add_row "perftest ib_${op}_lat" rxe "$kind" "$sz" "$perf" \
				"rxe0 in qemu (TCG), best of $runs runs"
			add_row "tollfree-bench $op" rxe "$kind" "$sz" "$tf" \
				"verbs provider, rxe0, best of $runs runs"
		done <"$work/vm/peers.txt"
		# sessions.txt: "what peer_us tollfree_us ratio runs" (absent when
		# the guest had no cmtime, ucx_session or crr result).
		[ -f "$work/vm/sessions.txt" ] &&
			while read -r what peer tf _ runs; do
				case $what in
				rdma_cm-setup+teardown)
					add_row "cmtime (rdma_cm) conn+close" rxe conn 0 \
						"$peer" "rxe0, cmtime -c 1, best of $runs runs"
					add_row "tollfree-bench crr conn+close" rxe conn 0 \
						"$tf" "pool+mw/new connect+close phases, best run"
					;;
				ucx-rc_verbs-session)
					add_row "ucx_session (put+flush)" rxe session 1024 \
						"$peer" "UCX_TLS=rc_verbs, rdmacm CM, best of $runs runs"
					add_row "tollfree-bench crr pool+mw/new" rxe session \
						1024 "$tf" "verbs provider, rxe0, K=1 WRITE, best run"
					;;
				esac
			done <"$work/vm/sessions.txt"
	else
		log "rxe rows skipped: $(grep -v '^$' "$work/vm.log" | tail -2)"
	fi
fi

# ------------------------------------------------------------ table
# Ratio: this row's latency divided by tollfree's for the same transport
# class (shm, tcp or rxe), kind (put: RDMA WRITE; get: RDMA READ; msg and
# the floor: SEND; conn: connection set-up + teardown; session: one short
# session) and size; above 1 means slower than tollfree.
{
	echo "# tollfree peers: $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -r)"
	echo "# cpu: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo), nproc $(nproc), iterations $iters"
	echo "# median in microseconds: one-way latency, or per session (kind session); ratio = row / tollfree row of the same class, kind and size"
	awk -F'|' '
	{
		what[NR] = $1; tp[NR] = $2; kind[NR] = $3; size[NR] = $4
		med[NR] = $5; note[NR] = $6
		if ($1 ~ /^tollfree-bench/)
			ref[$2 "|" $3 "|" $4] = $5
	}
	END {
		printf "%-30s %-9s %-8s %6s %12s %10s  %s\n", "what",
		       "transport", "kind", "size", "median_us", "ratio_tf",
		       "note"
		for (i = 1; i <= NR; i++) {
			k = (kind[i] == "floor" ? "msg" : kind[i])
			cls = (tp[i] == "tcp" || tp[i] == "rxe" ? tp[i] : "shm")
			r = ref[cls "|" k "|" size[i]]
			ratio = (r > 0 ? sprintf("%.2f", med[i] / r) : "-")
			printf "%-30s %-9s %-8s %6s %12.3f %10s  %s\n",
			       what[i], tp[i], kind[i], size[i], med[i], ratio,
			       note[i]
		}
	}' "$rows"
} >"$work/table"

cat "$work/table"
if [ -n "$out_file" ]; then
	cp "$work/table" "$out_file" || { log "cannot write $out_file"; exit 1; }
fi
[ -s "$rows" ] || { log "no run produced a result"; exit 1; }
exit 0
