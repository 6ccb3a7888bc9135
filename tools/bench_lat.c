/* SPDX-License-Identifier: MIT */
/*
 * bench_lat.c - tollfree-bench lat: WRITE, READ and SEND latency between
 * two processes, with perftest's methodology so that the numbers can be
 * put next to ib_write_lat, ib_read_lat and ib_send_lat: one RC QP each,
 * WRITE and SEND latency as half of a ping-pong round trip, READ latency as
 * the full round trip of one READ, warm-up iterations excluded, and
 * perftest's columns (report_emit, sized layout).  The two processes
 * exchange QP addresses and keys over a socketpair.
 */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <tollfree/tollfree.h>

#include "bench.h"

enum lat_op {
	LAT_WRITE,
	LAT_READ,
	LAT_SEND,
	LAT_NOPS,
};

static const struct {
	const char *name;
	const char *title;
} lat_ops[LAT_NOPS] = {
	[LAT_WRITE] = {"write", "RDMA_Write latency (RTT/2)"},
	[LAT_READ] = {"read", "RDMA_Read latency (full RTT)"},
	[LAT_SEND] = {"send", "Send latency (RTT/2)"},
};

#define LAT_MAGIC 0x74666c61u /* "tfla" */
/* A software NIC's round trip fits in this spin: rxe's 1 KiB WRITE, SEND
 * and READ round trips take 40-90 us in the project's TCG guest.  A waiter
 * that yields inside a round trip finds the completion a system call late:
 * with 20 us here, tollfree's 1 KiB SEND was 1.17x ib_send_lat, with 200 us
 * 1.07x (the same boot). */
#define LAT_YIELD_GRACE_NS 200000ull
#define LAT_RECV_DEPTH	   64
#define LAT_WRID_SEND	   1
#define LAT_WRID_RECV	   2

/* What each side tells the other over the socketpair.  Both processes run
 * the same binary, but the fields are checked anyway. */
struct lat_hello {
	uint32_t magic;
	uint32_t addr_len;
	uint64_t buf_addr; /* start of the peer's buffer */
	uint64_t buf_len;
	uint64_t max_size;
	uint32_t rkey;
	uint32_t pad;
	uint8_t addr[TF_QP_ADDR_MAX];
};

struct lat_side {
	const struct bench_opts *o;
	int sock;
	bool client;
	tf_context_t *ctx;
	tf_pd_t *pd;
	tf_cq_t *cq;
	tf_qp_t *qp;
	tf_mr_t *mr;
	/* One buffer: [0, half) is the send side (source of WRITE and SEND,
	 * what the peer READs), [half, 2*half) the receive side (target of
	 * the peer's WRITE, of SENDs and of our READs). */
	uint8_t *buf;
	size_t buf_len, half;
	bool buf_tf; /* from tf_mem_alloc (else mmap) */
	uint64_t max_size;
	uint32_t max_inline;
	struct lat_hello peer;
	unsigned send_outstanding; /* signalled sends not yet completed */
	unsigned recv_posted;
	unsigned recv_done; /* receive completions not yet consumed */
	bool spin_yield;    /* one CPU, or a software NIC: let others run */
	bool auto_progress; /* TF_CAP_AUTO_PROGRESS: the device serves */
};

/* The whole of @buf over the socketpair, with lat's messages. */
static int lat_sock(int fd, void *buf, size_t len, bool wr)
{
	int ret = sock_full(fd, buf, len, wr, -1);

	if (ret == -EPIPE || ret == -ECONNRESET)
		fail("peer process went away");
	else if (ret)
		fail("socketpair %s: %s", wr ? "write" : "read",
		     tf_strerror(ret));
	return ret;
}

/* Both sides call this; it returns when both have reached it. */
static int lat_barrier(struct lat_side *s)
{
	uint8_t b = 'B';
	int ret;

	ret = lat_sock(s->sock, &b, 1, true);
	if (!ret)
		ret = lat_sock(s->sock, &b, 1, false);
	if (!ret && b != 'B') {
		fail("peer process is out of step");
		ret = -EPROTO;
	}
	return ret;
}

/* Reap completions, which also makes progress on the context (the tcp
 * transport executes a peer's WRITEs and READs into our memory there). */
static int lat_reap(struct lat_side *s)
{
	struct tf_wc wc[16];
	int n, i;

	n = tf_cq_poll(s->cq, 16, wc);
	if (n < 0) {
		fail("polling the CQ: %s", tf_strerror(n));
		return n;
	}
	for (i = 0; i < n; i++) {
		if (wc[i].status != TF_WC_SUCCESS) {
			fail("completion of wr_id %" PRIu64 " failed: %s "
			     "(vendor_err %u)",
			     wc[i].wr_id, tf_wc_status_str(wc[i].status),
			     wc[i].vendor_err);
			return -EIO;
		}
		if (wc[i].wr_id == LAT_WRID_RECV) {
			s->recv_posted--;
			s->recv_done++;
		} else {
			s->send_outstanding--;
		}
	}
	return n;
}

static int lat_post_recvs(struct lat_side *s)
{
	struct tf_sge sge = {
		.addr = (uintptr_t)(s->buf + s->half),
		.length = (uint32_t)s->max_size,
		.lkey = tf_mr_lkey(s->mr),
	};
	struct tf_recv_wr wr = {
		.wr_id = LAT_WRID_RECV,
		.sg_list = &sge,
		.num_sge = 1,
	};
	int ret;

	while (s->recv_posted < LAT_RECV_DEPTH) {
		ret = tf_post_recv(s->qp, &wr, NULL);
		if (ret) {
			fail("posting a receive: %s", tf_strerror(ret));
			return ret;
		}
		s->recv_posted++;
	}
	return 0;
}

/* Post one signalled WRITE, READ or SEND of @size bytes. */
static int lat_post(struct lat_side *s, enum tf_wr_opcode op, uint64_t size)
{
	struct tf_sge sge = {
		.addr = (uintptr_t)(op == TF_WR_RDMA_READ ? s->buf + s->half
							  : s->buf),
		.length = (uint32_t)size,
		.lkey = tf_mr_lkey(s->mr),
	};
	struct tf_send_wr wr = {
		.wr_id = LAT_WRID_SEND,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = op,
		.send_flags = TF_SEND_SIGNALED,
	};
	int ret;

	/* Small payloads go inline, as perftest does by default. */
	if (op != TF_WR_RDMA_READ && size <= s->max_inline)
		wr.send_flags |= TF_SEND_INLINE;
	if (op == TF_WR_RDMA_WRITE)
		wr.wr.rdma.remote_addr = s->peer.buf_addr + s->peer.buf_len / 2;
	else if (op == TF_WR_RDMA_READ)
		wr.wr.rdma.remote_addr = s->peer.buf_addr;
	wr.wr.rdma.rkey = s->peer.rkey;
	ret = tf_post_send(s->qp, &wr, NULL);
	if (ret) {
		fail("posting a %s: %s", op == TF_WR_SEND ? "SEND" : "RDMA op",
		     tf_strerror(ret));
		return ret;
	}
	s->send_outstanding++;
	return 0;
}

/* True when the peer process closed its end of the socketpair.  Nothing
 * but a barrier byte can be pending while a test runs, so a peek that
 * returns 0 bytes can only mean end of file. */
static bool peer_gone(struct lat_side *s)
{
	uint8_t b;

	if (recv(s->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT) != 0)
		return false;
	fail("peer process went away");
	return true;
}

/*
 * Wait until @done says so, reaping completions meanwhile.  @done sees the
 * side and @arg.  Busy-polls, except on a single CPU, where spinning would
 * only keep the peer from running.
 */
/*
 * Timestamps, as perftest takes them (get_cycles): the TSC on x86-64,
 * scaled by a calibration against CLOCK_MONOTONIC (lat_calibrate), or
 * CLOCK_MONOTONIC itself elsewhere or when the TSC does not advance.
 * Where clock_gettime is a system call (a qemu TCG guest has no clock
 * source the vDSO can read) a sample would otherwise hold one, and every
 * grace check below would be one.
 */
static bool lat_use_tsc;
static double lat_ns_per_tick = 1.0;
/* A wait looks for the peer's end and its deadline (system calls: recv,
 * and clock_gettime in a TCG guest) every this long, so that none falls
 * inside a round trip, as one every 1,024 polls could.  In lat_ticks, set
 * by lat_calibrate. */
#define LAT_CHECK_NS 50000000ull
static uint64_t lat_check_ticks = LAT_CHECK_NS;

static inline uint64_t lat_ticks(void)
{
#if defined(__x86_64__)
	if (lat_use_tsc)
		return __rdtsc();
#endif
	return now_ns();
}

static void lat_calibrate(void)
{
#if defined(__x86_64__)
	struct timespec ts = {.tv_nsec = 20 * 1000 * 1000};
	uint64_t n0 = now_ns(), c0 = __rdtsc(), n1, c1;

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
	c1 = __rdtsc();
	n1 = now_ns();
	if (c1 > c0 && n1 > n0) {
		lat_ns_per_tick = (double)(n1 - n0) / (double)(c1 - c0);
		lat_use_tsc = true;
		lat_check_ticks =
			(uint64_t)((double)LAT_CHECK_NS / lat_ns_per_tick);
	}
#endif
}

static double lat_elapsed_ns(uint64_t t0)
{
	return (double)(lat_ticks() - t0) * lat_ns_per_tick;
}

/* With a software NIC, how long (in lat_ticks) a waiter spins before it
 * yields between polls (0: from the first poll, on one CPU).  Set once in
 * cmd_lat. */
static uint64_t lat_yield_grace;

/* Yield the CPU now (at @t, in lat_ticks), if @s yields and its grace
 * from @t0 is over. */
static void lat_maybe_yield(const struct lat_side *s, uint64_t t0, uint64_t t)
{
	if (s->spin_yield && t - t0 >= lat_yield_grace)
		sched_yield();
}

static bool done_byte(struct lat_side *s, void *arg);

/* A wait for a byte on a device that places WRITEs by itself reaps send
 * completions only every this many spins (lat_throttle bounds them), as
 * ib_write_lat spins on the byte alone; otherwise reaping is also what
 * makes the progress that places the byte (tcp). */
#define LAT_BYTE_REAP_EVERY 64

static int lat_wait(struct lat_side *s, bool (*done)(struct lat_side *, void *),
		    void *arg)
{
	bool byte_only = s->auto_progress && done == done_byte;
	uint64_t start = lat_ticks(), next_check = start + lat_check_ticks;
	unsigned spins = 0;
	int ret;

	while (!done(s, arg)) {
		uint64_t t;

		if (!byte_only || spins++ % LAT_BYTE_REAP_EVERY == 0) {
			ret = lat_reap(s);
			if (ret < 0)
				return ret;
		}
		t = lat_ticks();
		lat_maybe_yield(s, start, t);
		if (t < next_check)
			continue;
		next_check = t + lat_check_ticks;
		if (peer_gone(s))
			return -EPIPE;
		if (lat_elapsed_ns(start) > (double)WAIT_TIMEOUT_NS) {
			fail("no progress from the peer for %llu s",
			     WAIT_TIMEOUT_NS / 1000000000ull);
			return -ETIMEDOUT;
		}
	}
	return 0;
}

struct byte_wait {
	const volatile uint8_t *p;
	uint8_t v;
};

static bool done_byte(struct lat_side *s, void *arg)
{
	struct byte_wait *w = arg;

	(void)s;
	/* The peer's WRITE is stored by another process (shm) or by our own
	 * progress (tcp); an acquire load orders the check before whatever
	 * follows. */
	return __atomic_load_n(w->p, __ATOMIC_ACQUIRE) == w->v;
}

static bool done_sends(struct lat_side *s, void *arg)
{
	(void)arg;
	return s->send_outstanding == 0;
}

static bool done_recv(struct lat_side *s, void *arg)
{
	(void)arg;
	return s->recv_done > 0;
}

/* Marker for iteration @i: never 0, so that a zeroed buffer never matches,
 * and different from the previous iteration's. */
static uint8_t lat_marker(unsigned i)
{
	return (uint8_t)(i % 255 + 1);
}

/* Keep at most this many signalled sends in flight: bounds the send queue
 * (256 by default) without waiting for every completion. */
#define LAT_MAX_OUTSTANDING 64

static int lat_throttle(struct lat_side *s)
{
	int ret;

	while (s->send_outstanding >= LAT_MAX_OUTSTANDING) {
		ret = lat_reap(s);
		if (ret < 0)
			return ret;
	}
	return 0;
}

/*
 * WRITE ping-pong.  The client stamps the last byte of its payload, WRITEs
 * it into the server's receive half and spins on the last byte of its own
 * receive half until the server's answering WRITE carries the same marker.
 * One round trip is two one-way latencies.
 */
static int lat_write(struct lat_side *s, uint64_t size, unsigned total,
		     unsigned warm, double *samples)
{
	struct byte_wait w = {.p = s->buf + s->half + size - 1};
	unsigned i;
	int ret;

	for (i = 0; i < total; i++) {
		uint64_t t0 = 0;

		w.v = lat_marker(i);
		ret = lat_throttle(s);
		if (ret)
			return ret;
		if (s->client) {
			s->buf[size - 1] = w.v;
			t0 = lat_ticks();
			ret = lat_post(s, TF_WR_RDMA_WRITE, size);
			if (!ret)
				ret = lat_wait(s, done_byte, &w);
			if (ret)
				return ret;
			if (i >= warm)
				samples[i - warm] = lat_elapsed_ns(t0) / 2;
		} else {
			ret = lat_wait(s, done_byte, &w);
			if (ret)
				return ret;
			s->buf[size - 1] = w.v;
			ret = lat_post(s, TF_WR_RDMA_WRITE, size);
			if (ret)
				return ret;
		}
	}
	return lat_wait(s, done_sends, NULL);
}

/* SEND ping-pong: the same shape as lat_write, with receive completions
 * instead of a polled byte. */
static int lat_send(struct lat_side *s, uint64_t size, unsigned total,
		    unsigned warm, double *samples)
{
	unsigned i;
	int ret;

	for (i = 0; i < total; i++) {
		uint64_t t0 = 0;

		ret = lat_throttle(s);
		if (ret)
			return ret;
		if (s->client) {
			t0 = lat_ticks();
			ret = lat_post(s, TF_WR_SEND, size);
			if (ret)
				return ret;
		}
		ret = lat_wait(s, done_recv, NULL);
		if (ret)
			return ret;
		if (s->client && i >= warm)
			samples[i - warm] = lat_elapsed_ns(t0) / 2;
		s->recv_done--;
		/* The server answers first and replenishes after, the
		 * client after taking the time: neither repost is part of
		 * the round trip (LAT_RECV_DEPTH receives stay posted). */
		if (!s->client) {
			ret = lat_post(s, TF_WR_SEND, size);
			if (ret)
				return ret;
		}
		ret = lat_post_recvs(s);
		if (ret)
			return ret;
	}
	return lat_wait(s, done_sends, NULL);
}

/*
 * READ: the client READs the server's send half and waits for the
 * completion; one sample is the full round trip.  The server only makes
 * progress (the tcp transport serves the READ there) until the client says
 * it is done.  Where the device serves READs by itself
 * (TF_CAP_AUTO_PROGRESS: a NIC) the server sleeps in the socket instead,
 * as ib_read_lat's does: a spinning server would only take CPU from a
 * software NIC's kernel threads.
 */
static int lat_read(struct lat_side *s, uint64_t size, unsigned total,
		    unsigned warm, double *samples)
{
	unsigned i, spins = 0;
	ssize_t n;
	uint8_t b;
	int ret;

	if (s->client) {
		for (i = 0; i < total; i++) {
			uint64_t t0 = lat_ticks();

			ret = lat_post(s, TF_WR_RDMA_READ, size);
			if (!ret)
				ret = lat_wait(s, done_sends, NULL);
			if (ret)
				return ret;
			if (i >= warm)
				samples[i - warm] = lat_elapsed_ns(t0);
		}
		b = 'D';
		return lat_sock(s->sock, &b, 1, true);
	}
	if (s->auto_progress) {
		ret = lat_sock(s->sock, &b, 1, false);
		if (ret)
			return ret;
		return b == 'D' ? 0 : -EPROTO;
	}
	for (;;) {
		ret = tf_context_progress(s->ctx);
		if (ret < 0) {
			fail("progress: %s", tf_strerror(ret));
			return ret;
		}
		if (s->spin_yield)
			sched_yield();
		/* A syscall per spin would slow the served READs down;
		 * look at the socket now and then. */
		if (++spins % WAIT_CHECK_EVERY)
			continue;
		n = recv(s->sock, &b, 1, MSG_DONTWAIT);
		if (n == 1)
			return b == 'D' ? 0 : -EPROTO;
		if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK &&
			       errno != EINTR)) {
			fail("peer process went away");
			return -EPIPE;
		}
	}
}

static int lat_setup(struct lat_side *s)
{
	struct lat_hello me;
	tf_cq_params_t cqp = {.field_mask = TF_CQ_PARAM_DEPTH, .depth = 1024};
	tf_qp_params_t qpp;
	tf_caps_t caps;
	size_t len;
	int ret;

	ret = bench_opts_open_ctx(s->o, &s->ctx);
	if (ret)
		return ret;
	ret = tf_context_query_caps(s->ctx, &caps);
	if (ret) {
		fail("querying capabilities: %s", tf_strerror(ret));
		return ret;
	}
	if (caps.max_msg_size && s->max_size > caps.max_msg_size) {
		fail("size %" PRIu64 " exceeds the provider's largest "
		     "message (%u bytes)",
		     s->max_size, caps.max_msg_size);
		return -EINVAL;
	}
	ret = tf_pd_create(s->ctx, &s->pd);
	if (ret) {
		fail("creating a PD: %s", tf_strerror(ret));
		return ret;
	}
	ret = tf_cq_create(s->ctx, &cqp, &s->cq);
	if (ret) {
		fail("creating a CQ: %s", tf_strerror(ret));
		return ret;
	}
	memset(&qpp, 0, sizeof(qpp));
	qpp.send_cq = s->cq;
	qpp.recv_cq = s->cq;
	ret = tf_qp_create(s->pd, &qpp, &s->qp);
	if (ret) {
		fail("creating a QP: %s", tf_strerror(ret));
		return ret;
	}
	/* The QP's default inline limit; it is only a hint for perftest's
	 * inline choice, a smaller provider limit fails at post time. */
	s->max_inline = caps.max_inline_data < 256 ? caps.max_inline_data : 256;
	s->auto_progress = caps.flags & TF_CAP_AUTO_PROGRESS;

	/* Halves are page aligned so that the two sides never share a
	 * cache line or a page. */
	s->half = (s->max_size + 4095) & ~(size_t)4095;
	s->buf_len = 2 * s->half;
	ret = tf_mem_alloc(s->ctx, s->buf_len, (void **)&s->buf);
	if (ret == 0) {
		s->buf_tf = true;
	} else if (ret == -EOPNOTSUPP) {
		void *p = mmap(NULL, s->buf_len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (p == MAP_FAILED) {
			fail("mmap of %zu bytes: %m", s->buf_len);
			return -ENOMEM;
		}
		s->buf = p;
	} else {
		fail("tf_mem_alloc of %zu bytes: %s", s->buf_len,
		     tf_strerror(ret));
		return ret;
	}
	memset(s->buf, 0, s->buf_len);
	ret = tf_mr_reg(s->pd, s->buf, s->buf_len,
			TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE |
				TF_ACCESS_REMOTE_READ,
			&s->mr);
	if (ret) {
		fail("registering %zu bytes: %s", s->buf_len, tf_strerror(ret));
		return ret;
	}

	memset(&me, 0, sizeof(me));
	me.magic = LAT_MAGIC;
	me.buf_addr = (uintptr_t)s->buf;
	me.buf_len = s->buf_len;
	me.max_size = s->max_size;
	me.rkey = tf_mr_rkey(s->mr);
	len = sizeof(me.addr);
	ret = tf_qp_get_addr(s->qp, me.addr, &len);
	if (ret) {
		fail("getting the QP address: %s", tf_strerror(ret));
		return ret;
	}
	me.addr_len = (uint32_t)len;
	ret = lat_sock(s->sock, &me, sizeof(me), true);
	if (!ret)
		ret = lat_sock(s->sock, &s->peer, sizeof(s->peer), false);
	if (ret)
		return ret;
	if (s->peer.magic != LAT_MAGIC || !s->peer.addr_len ||
	    s->peer.addr_len > sizeof(s->peer.addr) ||
	    s->peer.buf_len != s->buf_len || s->peer.max_size != s->max_size) {
		fail("malformed hello from the peer process");
		return -EPROTO;
	}
	ret = tf_qp_connect(s->qp, s->peer.addr, s->peer.addr_len);
	if (ret) {
		fail("connecting the QP: %s", tf_strerror(ret));
		return ret;
	}
	/* Receives are posted before the barrier, so the peer's first SEND
	 * never finds an empty receive queue. */
	ret = lat_post_recvs(s);
	if (ret)
		return ret;
	return lat_barrier(s);
}

static void lat_teardown(struct lat_side *s)
{
	int ret;

	ret = tf_qp_destroy(s->qp);
	if (ret)
		fail("destroying the QP: %s", tf_strerror(ret));
	ret = tf_mr_dereg(s->mr);
	if (ret)
		fail("deregistering: %s", tf_strerror(ret));
	if (s->buf && s->buf_tf)
		tf_mem_free(s->ctx, s->buf, s->buf_len);
	else if (s->buf)
		munmap(s->buf, s->buf_len);
	ret = tf_cq_destroy(s->cq);
	if (ret)
		fail("destroying the CQ: %s", tf_strerror(ret));
	ret = tf_pd_destroy(s->pd);
	if (ret)
		fail("destroying the PD: %s", tf_strerror(ret));
	tf_context_close(s->ctx);
}
static int lat_run(const struct bench_opts *o, int sock, bool client, int cpu,
		   bool spin_yield, const char *pin_note)
{
	static int (*const run[LAT_NOPS])(struct lat_side *, uint64_t, unsigned,
					  unsigned, double *) = {
		[LAT_WRITE] = lat_write,
		[LAT_READ] = lat_read,
		[LAT_SEND] = lat_send,
	};
	struct lat_side s;
	struct report r;
	double *samples = NULL;
	unsigned warm = o->warmup_set
				? o->warmup
				: (o->iters / 10 < 100 ? o->iters / 10 : 100);
	unsigned op, k;
	int ret;

	memset(&s, 0, sizeof(s));
	memset(&r, 0, sizeof(r));
	s.o = o;
	s.sock = sock;
	s.client = client;
	s.spin_yield = spin_yield;
	for (k = 0; k < o->nsizes; k++)
		if (o->sizes[k] > s.max_size)
			s.max_size = o->sizes[k];
	pin_to(cpu);
	r.bench = "lat";
	samples = calloc(o->iters, sizeof(*samples));
	if (!samples) {
		fail("out of memory");
		return -ENOMEM;
	}
	ret = lat_setup(&s);
	if (ret)
		goto out;
	if (client) {
		char extra[160];

		snprintf(extra, sizeof(extra), "%s  buffers: %s  warm-up: %u",
			 pin_note, s.buf_tf ? "tf_mem_alloc" : "mmap", warm);
		report_header(&r, s.ctx, o->cm.transport, extra,
			      o->cm.csv ? OUT_CSV : OUT_TEXT);
		fflush(stdout);
	}
	for (op = 0; op < LAT_NOPS; op++) {
		if (!(o->tests & (1u << op)))
			continue;
		for (k = 0; k < o->nsizes; k++) {
			struct bench_row row = {
				.op = lat_ops[op].name,
				.title = lat_ops[op].title,
				.size = o->sizes[k],
				.iters = o->iters,
			};

			/* Both sides start each test with a zeroed receive
			 * half: no marker left from an earlier test can end
			 * a wait early. */
			memset(s.buf + s.half, 0, s.half);
			ret = lat_barrier(&s);
			if (!ret)
				ret = run[op](&s, o->sizes[k], warm + o->iters,
					      warm, samples);
			if (ret)
				goto out;
			if (!client)
				continue;
			stats_compute(samples, o->iters, &row.st);
			ret = report_add(&r, &row);
			if (ret) {
				fail("out of memory");
				goto out;
			}
		}
	}
	ret = lat_barrier(&s);
	if (ret || !client)
		goto out;
	report_emit(&r, o->cm.csv ? OUT_CSV : OUT_TEXT, stdout);
	if (o->cm.json && report_write_json(&r, o->cm.json))
		ret = -EIO;
out:
	/* A failing side closes its end first, so that the other one stops
	 * waiting for it at once. */
	if (ret)
		close(sock);
	if (s.ctx)
		lat_teardown(&s);
	free(samples);
	free(r.rows);
	return ret;
}

static void usage_lat(FILE *f)
{
	fprintf(f,
		"usage: %s lat [-t write|read|send[,...]] [-s SIZES] "
		"[-n ITERS] [-w WARMUP]\n"
		"          [--transport shm|tcp|auto] [--provider P] "
		"[--device D] [--csv] [--json FILE]\n"
		"  defaults: all three tests, sizes 8,1K,64K, 1000 "
		"iterations, warm-up min(n/10,100)\n",
		prog);
}

static int parse_tests(const char *arg, unsigned *tests)
{
	if (!bench_name_mask(arg, 64, &lat_ops[0].name, sizeof(lat_ops[0]),
			     LAT_NOPS, false, tests))
		return 0;
	fail("bad test '%s' (want write, read or send)", arg);
	return -1;
}

/* Whether the device is a software NIC of the kernel (rxe, siw). */
static bool soft_nic(const struct bench_common *cm)
{
	return cm->provider && !strcmp(cm->provider, "verbs") && cm->device &&
	       (!strncmp(cm->device, "rxe", 3) ||
		!strncmp(cm->device, "siw", 3));
}

int cmd_lat(int argc, char **argv)
{
	struct bench_opts o = {
		.iters = 1000,
		.sizes = {8, 1024, 65536},
		.nsizes = 3,
	};
	int sv[2], cpu_a, cpu_b, status, ret;
	char pin_note[64];
	bool spin_yield;
	pid_t pid;

	if (bench_parse_sized(argc, argv, &o, parse_tests, usage_lat))
		return 2;
	if (!o.tests)
		o.tests = (1u << LAT_NOPS) - 1;
	lat_calibrate();
	pick_cpus(&cpu_a, &cpu_b);
	/* Two busy-polling processes on one CPU would each spin away the
	 * other's time slice; then they yield instead. */
	spin_yield = cpu_b < 0;
	if (spin_yield) {
		cpu_a = -1;
		snprintf(pin_note, sizeof(pin_note),
			 "(one CPU: not pinned, yielding)");
	} else if (soft_nic(&o.cm)) {
		/* rxe and siw are kernel work (softirqs, kernel threads) on
		 * these CPUs: with each CPU held by a spinner it runs only
		 * when the scheduler preempts one, at its tick, and a round
		 * trip takes milliseconds.  Not pinned, and yielding once a
		 * wait has spun LAT_YIELD_GRACE_NS, the spinners leave it
		 * room; a round trip that the NIC finishes within the grace
		 * pays no system call. */
		spin_yield = true;
		lat_yield_grace = (uint64_t)((double)LAT_YIELD_GRACE_NS /
					     lat_ns_per_tick);
		cpu_a = cpu_b = -1;
		snprintf(pin_note, sizeof(pin_note),
			 "(%s: software NIC, not pinned, yielding)",
			 o.cm.device);
	} else {
		snprintf(pin_note, sizeof(pin_note),
			 "(client cpu %d, server cpu %d)", cpu_a, cpu_b);
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		fail("socketpair: %m");
		return 1;
	}
	/* Contexts are opened after the fork: objects do not survive one. */
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		fail("fork: %m");
		return 1;
	}
	if (pid == 0) {
		prog = "tollfree-bench (server)";
		close(sv[0]);
		ret = lat_run(&o, sv[1], false, cpu_b, spin_yield, pin_note);
		fflush(NULL);
		_exit(ret ? 1 : 0);
	}
	close(sv[1]);
	ret = lat_run(&o, sv[0], true, cpu_a, spin_yield, pin_note);
	if (ret)
		kill(pid, SIGTERM);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		if (!ret)
			fail("server process failed");
		ret = -1;
	}
	return ret ? 1 : 0;
}
