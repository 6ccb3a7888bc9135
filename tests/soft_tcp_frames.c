/* SPDX-License-Identifier: MIT */
/*
 * soft_tcp_frames - the soft provider's tcp framing under attack.
 *
 * Unit: the pure header parser (soft_tcp_parse_hdr) against valid,
 * truncated, oversized, wrong-version, inconsistent and random frames.
 *
 * End to end: a QP on a tcp context is connected to a "phantom" QP that
 * is never connected itself; this test impersonates the phantom with a raw
 * socket (HELLO, then bytes of its choosing).  A valid WRITE through the
 * raw socket must work (so that the framing used here is right); every bad
 * stream must close the connection, move that QP to error with a log
 * line, and leave the process and another QP pair of the same context
 * working.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tf_test.h"
#include "soft_int.h"

#define MAX_MSG (1u << 20)

/* ------------------------------------------------------- send interposer */

/*
 * The library is linked statically into this test, so this sendmsg is the
 * one its transport calls.  It passes every call through, unless a case
 * gates the victim's socket (the one whose peer is the raw socket, local
 * port gate_port): the case then decides what each call takes, to place a
 * partial send or an EAGAIN at an exact point, which a real socket gives
 * only by chance (when its peer reads at that very moment).  What a gated
 * call takes is swallowed: it never reaches the raw socket, so such a
 * case reads nothing from it.
 */
enum gate_mode {
	GATE_OFF,
	GATE_BLOCK, /* EAGAIN */
	GATE_STEP,  /* take gate_budget bytes, then one EAGAIN, then SWALLOW */
	GATE_SWALLOW, /* take everything */
};
static int gate_mode;
static uint16_t gate_port;
static size_t gate_budget;

static bool gated(int fd)
{
	struct sockaddr_in sin = {0};
	socklen_t sl = sizeof(sin);

	return getpeername(fd, (struct sockaddr *)&sin, &sl) == 0 &&
	       sin.sin_family == AF_INET && ntohs(sin.sin_port) == gate_port;
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	size_t len = 0;

	if (gate_mode == GATE_OFF || !gated(fd))
		return syscall(SYS_sendmsg, fd, msg, flags);
	for (size_t i = 0; i < msg->msg_iovlen; i++)
		len += msg->msg_iov[i].iov_len;
	switch (gate_mode) {
	case GATE_STEP:
		if (gate_budget) {
			if (len > gate_budget)
				len = gate_budget;
			gate_budget -= len;
			return (ssize_t)len;
		}
		gate_mode = GATE_SWALLOW;
		break;
	case GATE_SWALLOW:
		return (ssize_t)len;
	default:
		break;
	}
	errno = EAGAIN;
	return -1;
}

/*
 * The same for epoll_wait: a case may run a function right after the poll
 * of one epoll set (poll_hook_fd, once), that is, in the middle of a
 * progress pass, after the pass took its snapshot of the sockets.
 */
static int poll_hook_fd = -1;
static void (*poll_hook)(void);

int epoll_wait(int epfd, struct epoll_event *ev, int maxevents, int timeout)
{
	int n = (int)syscall(SYS_epoll_pwait, epfd, ev, maxevents, timeout,
			     NULL, (size_t)8);

	if (epfd == poll_hook_fd && poll_hook) {
		void (*fn)(void) = poll_hook;
		int err = errno;

		poll_hook = NULL;
		poll_hook_fd = -1;
		fn();
		errno = err;
	}
	return n;
}

/* ---------------------------------------------------------------- unit */

static int parse(const void *buf, size_t len, struct soft_tcp_hdr *h)
{
	return soft_tcp_parse_hdr(buf, len, MAX_MSG, h);
}

static size_t enc(uint8_t *buf, const struct soft_tcp_hdr *h)
{
	int n = soft_tcp_encode_hdr(h, buf);

	CHECK(n >= SOFT_TCP_HDR_COMMON && n <= SOFT_TCP_HDR_MAX);
	return (size_t)n;
}

/* A representative valid header of every opcode. */
static struct soft_tcp_hdr sample(unsigned op)
{
	struct soft_tcp_hdr h = {.opcode = (uint8_t)op, .psn = 77};

	switch (op) {
	case SOFT_TCP_OP_HELLO:
		h.psn = 0;
		h.dst_qpn = 0x1234;
		h.src_qpn = 0x5678;
		h.dst_nonce = 0x0102030405060708ull;
		h.src_nonce = 0x1112131415161718ull;
		break;
	case SOFT_TCP_OP_SEND:
		h.size = 100;
		break;
	case SOFT_TCP_OP_SEND_IMM:
		h.size = 100;
		h.imm = 0xdeadbeef;
		break;
	case SOFT_TCP_OP_SEND_INV:
		h.size = 1;
		h.inv_rkey = 0xabcdef01;
		break;
	case SOFT_TCP_OP_WRITE:
	case SOFT_TCP_OP_WRITE_IMM:
		h.size = 4096;
		h.raddr = 0x7fff00001000ull;
		h.rkey = 0x99887766;
		if (op == SOFT_TCP_OP_WRITE_IMM)
			h.imm = 42;
		break;
	case SOFT_TCP_OP_READ_REQ:
		h.raddr = 0x7fff00002000ull;
		h.rkey = 0x11223344;
		h.length = 65536;
		break;
	case SOFT_TCP_OP_FETCH_ADD:
	case SOFT_TCP_OP_CMP_SWAP:
		h.raddr = 0x7fff00003000ull;
		h.rkey = 0x55667788;
		h.compare_add = 0xfedcba9876543210ull;
		if (op == SOFT_TCP_OP_CMP_SWAP)
			h.swap = 0x0123456789abcdefull;
		break;
	case SOFT_TCP_OP_ACK:
		h.status = SOFT_TCP_ST_RNR;
		break;
	case SOFT_TCP_OP_READ_RESP:
		h.size = 65536;
		break;
	case SOFT_TCP_OP_ATOMIC_RESP:
		h.orig = 0x4242424242424242ull;
		break;
	}
	return h;
}

static void expect_err(const uint8_t *buf, size_t len, int err,
		       const char *what)
{
	struct soft_tcp_hdr h;
	int r = parse(buf, len, &h);

	if (r != err)
		tf_test_fail(__FILE__, __LINE__, "%s: parse = %d, expected %d",
			     what, r, err);
}

static void unit_tests(void)
{
	uint8_t buf[256], b2[SOFT_TCP_HDR_MAX];
	struct soft_tcp_hdr h, d;
	unsigned op;
	size_t n, i;

	for (op = SOFT_TCP_OP_HELLO; op <= SOFT_TCP_OP_ATOMIC_RESP; op++) {
		h = sample(op);
		n = enc(buf, &h);
		/* Round trip. */
		CHECK(parse(buf, n, &d) == (int)n);
		CHECK(d.opcode == op && d.hdr_size == n && d.size == h.size &&
		      d.psn == h.psn && d.status == h.status &&
		      d.dst_qpn == h.dst_qpn && d.src_qpn == h.src_qpn &&
		      d.dst_nonce == h.dst_nonce &&
		      d.src_nonce == h.src_nonce && d.imm == h.imm &&
		      d.inv_rkey == h.inv_rkey && d.raddr == h.raddr &&
		      d.rkey == h.rkey && d.length == h.length &&
		      d.compare_add == h.compare_add && d.swap == h.swap &&
		      d.orig == h.orig);
		/* Network byte order on the wire. */
		CHECK(buf[0] == SOFT_TCP_VERSION && buf[1] == op);
		CHECK(buf[4] == 0 && buf[5] == n);
		CHECK(buf[12] == 0 && buf[15] == (h.psn & 0xff));
		/* Every truncation asks for more bytes, never succeeds. */
		for (i = 0; i < n; i++)
			CHECK(parse(buf, i, &d) == 0);
		/* Trailing bytes (the payload) are not the parser's. */
		CHECK(parse(buf, sizeof(buf), &d) == (int)n);

		/* Wrong version. */
		buf[0] = 2;
		expect_err(buf, n, -TF_EVERSION, "version 2");
		buf[0] = 0;
		expect_err(buf, 1, -TF_EVERSION, "version 0, 1 byte");
		buf[0] = SOFT_TCP_VERSION;
		/* hdr_size other than the opcode's, both ways. */
		buf[5] = (uint8_t)(n + 8);
		expect_err(buf, sizeof(buf), -TF_EWIRE, "hdr_size too big");
		buf[5] = (uint8_t)(n - 8);
		expect_err(buf, sizeof(buf), -TF_EWIRE, "hdr_size too small");
		buf[4] = 0x80;
		buf[5] = (uint8_t)n;
		expect_err(buf, sizeof(buf), -TF_EWIRE, "hdr_size huge");
		buf[4] = 0;
		/* Unknown flags, nonzero reserved byte. */
		buf[3] = 1;
		expect_err(buf, n, -TF_EWIRE, "flags");
		buf[3] = 0;
		buf[7] = 1;
		expect_err(buf, n, -TF_EWIRE, "reserved");
		buf[7] = 0;
		CHECK(parse(buf, n, &d) == (int)n);

		/* Oversized payload, or any payload where none belongs. */
		d = h;
		d.size = MAX_MSG + 1;
		n = enc(buf, &d);
		expect_err(buf, n, -TF_EWIRE, "size > max_msg");
		d.size = UINT32_MAX;
		n = enc(buf, &d);
		expect_err(buf, n, -TF_EWIRE, "size 4G");
		if (h.size == 0) {
			d.size = 8;
			n = enc(buf, &d);
			expect_err(buf, n, -TF_EWIRE, "payload on no-data op");
		}
		/* A status where only ACK carries one. */
		if (op != SOFT_TCP_OP_ACK) {
			d = h;
			d.status = SOFT_TCP_ST_REM_ACCESS;
			n = enc(buf, &d);
			expect_err(buf, n, -TF_EWIRE, "status on non-ACK");
		}
	}

	/* Unknown opcodes. */
	h = sample(SOFT_TCP_OP_ACK);
	n = enc(buf, &h);
	buf[1] = 0;
	expect_err(buf, n, -TF_EWIRE, "opcode 0");
	expect_err(buf, 2, -TF_EWIRE, "opcode 0, 2 bytes");
	buf[1] = SOFT_TCP_OP_ATOMIC_RESP + 1;
	expect_err(buf, n, -TF_EWIRE, "opcode 13");
	buf[1] = 0xff;
	expect_err(buf, n, -TF_EWIRE, "opcode 255");
	CHECK(soft_tcp_encode_hdr(&(struct soft_tcp_hdr){.opcode = 0}, b2) ==
	      -EINVAL);

	/* Per-opcode field rules. */
	h = sample(SOFT_TCP_OP_ACK);
	h.status = SOFT_TCP_ST_REM_OP + 1;
	n = enc(buf, &h);
	expect_err(buf, n, -TF_EWIRE, "ACK status unknown");
	h = sample(SOFT_TCP_OP_HELLO);
	h.psn = 1;
	n = enc(buf, &h);
	expect_err(buf, n, -TF_EWIRE, "HELLO with psn");
	h = sample(SOFT_TCP_OP_SEND);
	h.imm = 5;
	n = enc(buf, &h);
	expect_err(buf, n, -TF_EWIRE, "SEND with imm");
	h = sample(SOFT_TCP_OP_SEND_IMM);
	h.inv_rkey = 5;
	n = enc(buf, &h);
	expect_err(buf, n, -TF_EWIRE, "SEND_IMM with inv key");
	h = sample(SOFT_TCP_OP_WRITE);
	h.imm = 5;
	n = enc(buf, &h);
	expect_err(buf, n, -TF_EWIRE, "WRITE with imm");
	/* A wrapping range is well-formed: the target's access check
	 * refuses it with a NAK (see raw_write_works). */
	h = sample(SOFT_TCP_OP_WRITE);
	h.raddr = UINT64_MAX - 10;
	n = enc(buf, &h);
	CHECK(parse(buf, n, &d) == (int)n && d.raddr == h.raddr);
	h = sample(SOFT_TCP_OP_READ_REQ);
	h.length = MAX_MSG + 1;
	n = enc(buf, &h);
	expect_err(buf, n, -TF_EWIRE, "READ longer than max_msg");
	h = sample(SOFT_TCP_OP_READ_REQ);
	h.raddr = UINT64_MAX - 10;
	n = enc(buf, &h);
	CHECK(parse(buf, n, &d) == (int)n && d.raddr == h.raddr);
	h = sample(SOFT_TCP_OP_FETCH_ADD);
	h.swap = 1;
	n = enc(buf, &h);
	expect_err(buf, n, -TF_EWIRE, "FETCH_ADD with swap");
	h = sample(SOFT_TCP_OP_CMP_SWAP);
	n = enc(buf, &h);
	buf[31] = 1; /* the pad word after the rkey */
	expect_err(buf, n, -TF_EWIRE, "atomic pad");

	/* Random garbage: never a crash, and whatever is accepted is a
	 * header that re-encodes to exactly the bytes it came from (so no
	 * field is ignored). */
	srand(12345);
	for (unsigned iter = 0; iter < 200000; iter++) {
		size_t len = (size_t)rand() % (SOFT_TCP_HDR_MAX + 8);
		int r;

		for (i = 0; i < len; i++)
			buf[i] = (uint8_t)rand();
		/* Bias towards plausible headers so that the deeper
		 * checks are reached too. */
		if (len >= 6 && (iter & 1)) {
			buf[0] = SOFT_TCP_VERSION;
			buf[1] = (uint8_t)(1 + rand() % 12);
			buf[2] = buf[3] = 0;
			buf[4] = 0;
			if (iter & 2)
				buf[5] = (uint8_t)(16 + 8 * (rand() % 5));
			if (len > 7 && (iter & 4))
				buf[6] = buf[7] = 0;
			if (len > 11 && (iter & 8))
				buf[8] = buf[9] = 0;
		}
		r = parse(buf, len, &d);
		CHECK(r <= (int)len);
		if (r > 0) {
			CHECK(soft_tcp_encode_hdr(&d, b2) == r);
			CHECK(!memcmp(buf, b2, (size_t)r));
		}
	}

	/* The connection rule names exactly one connector per pair. */
	CHECK(soft_tcp_is_connector(1, 5, 2, 3) &&
	      !soft_tcp_is_connector(2, 3, 1, 5));
	CHECK(soft_tcp_is_connector(7, 3, 7, 5) &&
	      !soft_tcp_is_connector(7, 5, 7, 3));
}

/* ---------------------------------------------------------------- e2e */

static tf_context_t *ctx;
static tf_pd_t *pd;
static tf_cq_t *cq;
static int n_tcp_logs;

static void log_fn(tf_log_level_t level, const char *subsys, const char *msg,
		   void *arg)
{
	(void)arg;
	printf("  log %s [%s] %s\n", level == TF_LOG_ERROR ? "error" : "warn",
	       subsys, msg);
	if (level <= TF_LOG_WARN && subsys && !strcmp(subsys, "soft-tcp"))
		n_tcp_logs++;
}

/* Transport timeout of the QPs made by mk_qp. */
static uint32_t qp_timeout_ms = 3000;

static tf_qp_t *mk_qp(void)
{
	tf_qp_params_t p = {.field_mask = TF_QP_PARAM_TIMEOUT,
			    .send_cq = cq,
			    .recv_cq = cq,
			    .timeout_ms = qp_timeout_ms};
	tf_qp_t *qp;

	CHECK_OK(tf_qp_create(pd, &p, &qp));
	return qp;
}

static void blob(tf_qp_t *qp, uint8_t *b, size_t *len)
{
	*len = TF_QP_ADDR_MAX;
	CHECK_OK(tf_qp_get_addr(qp, b, len));
}

static uint64_t now_ms(void)
{
	return tf__now_ns() / 1000000;
}

/* Poll the CQ (which makes progress) for one completion of @qp. */
static struct tf_wc wait_wc(tf_qp_t *qp)
{
	uint64_t end = now_ms() + 5000;
	struct tf_wc wc;

	while (now_ms() < end) {
		int n = tf_cq_poll(cq, 1, &wc);

		CHECK(n >= 0);
		if (n == 1) {
			CHECK(wc.qp == qp);
			return wc;
		}
	}
	tf_test_fail(__FILE__, __LINE__, "no completion within 5 s");
}

/* The good pair: a WRITE from a to b's memory must still work. */
static tf_qp_t *good_a, *good_b;
static tf_mr_t *good_mr;
static uint8_t good_src[64], good_dst[64];
static tf_mr_t *src_mr;

static void good_pair_works(unsigned round)
{
	struct tf_sge sge = {(uintptr_t)good_src, sizeof(good_src),
			     tf_mr_lkey(src_mr)};
	struct tf_send_wr wr = {.wr_id = round,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = TF_WR_RDMA_WRITE,
				.send_flags = TF_SEND_SIGNALED};
	struct tf_wc wc;

	memset(good_src, (int)(round + 1), sizeof(good_src));
	wr.wr.rdma.remote_addr = (uintptr_t)good_dst;
	wr.wr.rdma.rkey = tf_mr_rkey(good_mr);
	CHECK_OK(tf_post_send(good_a, &wr, NULL));
	wc = wait_wc(good_a);
	CHECK(wc.status == TF_WC_SUCCESS && wc.wr_id == round);
	CHECK(!memcmp(good_src, good_dst, sizeof(good_dst)));
	CHECK(tf_qp_state(good_a) == TF_QPS_RTS);
	CHECK(tf_qp_state(good_b) == TF_QPS_RTS);
}

struct victim {
	tf_qp_t *v, *phantom;
	int fd;
	uint64_t nonce;
	uint32_t vqpn, pqpn;
	uint16_t port;
};

/* Create a victim QP that accepts, connected to a phantom that never
 * connects, and a raw socket to the victim's listener.  With @late, the
 * victim's tf_qp_connect is left to the caller (victim_late_connect), so
 * that the HELLO can arrive first. */
static void victim_open2(struct victim *vi, bool late)
{
	struct soft_qp *sx, *sy, *sv;
	struct soft_peer_addr me = {0};
	struct sockaddr_in sin = {.sin_family = AF_INET};
	uint8_t b[TF_QP_ADDR_MAX];
	tf_qp_t *x = mk_qp(), *y = mk_qp();
	size_t len;

	sx = soft_qp_of(x);
	sy = soft_qp_of(y);
	vi->nonce = sx->ctx->nonce;
	/* The victim must be the accepting side of the pair. */
	if (soft_tcp_is_connector(vi->nonce, tf_qp_num(x), vi->nonce,
				  tf_qp_num(y))) {
		vi->phantom = x;
		vi->v = y;
	} else {
		vi->phantom = y;
		vi->v = x;
	}
	(void)sy;
	vi->vqpn = tf_qp_num(vi->v);
	vi->pqpn = tf_qp_num(vi->phantom);
	blob(vi->phantom, b, &len);
	if (!late)
		CHECK_OK(tf_qp_connect(vi->v, b, len));
	else
		CHECK_OK(tf_qp_get_addr(vi->v, b, &len)); /* listener up */
	sv = soft_qp_of(vi->v);
	CHECK_OK(soft_tcp_transport.qp_addr(sv, &me));
	CHECK(me.family == 4);
	vi->port = me.port;

	vi->fd = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(vi->fd >= 0);
	sin.sin_port = htons(me.port);
	memcpy(&sin.sin_addr, me.ip, 4);
	CHECK(connect(vi->fd, (struct sockaddr *)&sin, sizeof(sin)) == 0);
}

static void victim_open(struct victim *vi)
{
	victim_open2(vi, false);
}

static void victim_late_connect(struct victim *vi)
{
	uint8_t b[TF_QP_ADDR_MAX];
	size_t len;

	blob(vi->phantom, b, &len);
	CHECK_OK(tf_qp_connect(vi->v, b, len));
}

static void victim_close(struct victim *vi)
{
	if (vi->fd >= 0)
		close(vi->fd);
	CHECK_OK(tf_qp_destroy(vi->v));
	CHECK_OK(tf_qp_destroy(vi->phantom));
	/* Let progress reap the sockets. */
	for (int i = 0; i < 50; i++)
		tf_context_progress(ctx);
}

static void raw_send(int fd, const void *buf, size_t len)
{
	CHECK(send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len);
}

static void send_hello(struct victim *vi, uint64_t dst_nonce)
{
	struct soft_tcp_hdr h = {.opcode = SOFT_TCP_OP_HELLO,
				 .dst_qpn = vi->vqpn,
				 .src_qpn = vi->pqpn,
				 .dst_nonce = dst_nonce,
				 .src_nonce = vi->nonce};
	uint8_t b[SOFT_TCP_HDR_MAX];

	raw_send(vi->fd, b, enc(b, &h));
}

/* Progress until the raw socket sees the end of the stream (EOF or
 * reset); bytes the victim sends before (ACKs, NAKs) are skipped. */
static bool raw_closed(int fd, unsigned ms)
{
	uint64_t end = now_ms() + ms;
	uint8_t b[4096];

	while (now_ms() < end) {
		ssize_t n;

		tf_context_progress(ctx);
		n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN))
			return true;
	}
	return false;
}

static bool wait_state(tf_qp_t *qp, enum tf_qp_state st, unsigned ms)
{
	uint64_t end = now_ms() + ms;

	while (now_ms() < end) {
		tf_context_progress(ctx);
		if (tf_qp_state(qp) == st)
			return true;
	}
	return tf_qp_state(qp) == st;
}

/* Read one frame header from the raw socket (progressing meanwhile). */
static void raw_read_hdr(int fd, struct soft_tcp_hdr *h)
{
	uint8_t b[SOFT_TCP_HDR_MAX];
	size_t got = 0;
	uint64_t end = now_ms() + 5000;
	int r = 0;

	while (now_ms() < end) {
		ssize_t n;

		tf_context_progress(ctx);
		n = recv(fd, b + got, 1, MSG_DONTWAIT);
		if (n == 1) {
			got++;
			r = soft_tcp_parse_hdr(b, got, MAX_MSG, h);
			CHECK(r >= 0);
			if (r > 0)
				return;
		} else {
			CHECK(n < 0 && errno == EAGAIN);
		}
	}
	tf_test_fail(__FILE__, __LINE__, "no frame from the victim");
}

/* The positive control: a well-formed WRITE through the raw socket lands
 * and is ACKed, and the victim stays up. */
static void raw_write_works(void)
{
	static uint8_t target[128];
	struct victim vi;
	struct soft_tcp_hdr h = {.opcode = SOFT_TCP_OP_WRITE,
				 .psn = 0,
				 .size = 16,
				 .raddr = (uintptr_t)(target + 8)};
	uint8_t b[SOFT_TCP_HDR_MAX + 16];
	tf_mr_t *mr;
	size_t n;

	CHECK_OK(tf_mr_reg(pd, target, sizeof(target),
			   TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE,
			   &mr));
	h.rkey = tf_mr_rkey(mr);

	/* The connector may be faster than the local tf_qp_connect: its
	 * HELLO and a WRITE behind it wait, then are served. */
	victim_open2(&vi, true);
	send_hello(&vi, vi.nonce);
	n = enc(b, &h);
	memset(b + n, 0x6b, 16);
	raw_send(vi.fd, b, n + 16);
	for (int i = 0; i < 200; i++)
		tf_context_progress(ctx);
	CHECK(target[8] == 0);
	victim_late_connect(&vi);
	raw_read_hdr(vi.fd, &h);
	CHECK(h.opcode == SOFT_TCP_OP_ACK && h.status == SOFT_TCP_ST_OK &&
	      h.psn == 0);
	CHECK(target[7] == 0 && target[8] == 0x6b && target[23] == 0x6b &&
	      target[24] == 0);
	victim_close(&vi);
	memset(target, 0, sizeof(target));

	h = (struct soft_tcp_hdr){.opcode = SOFT_TCP_OP_WRITE,
				  .psn = 0,
				  .size = 16,
				  .raddr = (uintptr_t)(target + 8),
				  .rkey = tf_mr_rkey(mr)};
	victim_open(&vi);
	send_hello(&vi, vi.nonce);
	n = enc(b, &h);
	memset(b + n, 0x5a, 16);
	raw_send(vi.fd, b, n + 16);
	raw_read_hdr(vi.fd, &h);
	CHECK(h.opcode == SOFT_TCP_OP_ACK && h.status == SOFT_TCP_ST_OK &&
	      h.psn == 0);
	CHECK(target[7] == 0 && target[8] == 0x5a && target[23] == 0x5a &&
	      target[24] == 0);
	CHECK(tf_qp_state(vi.v) == TF_QPS_RTS);

	/* A WRITE that ends past the region, then (on a new victim) one
	 * whose range wraps around 2^64: well-formed, so each gets a NAK
	 * (remote access), then the victim goes to error and closes;
	 * nothing is written. */
	for (int k = 0; k < 2; k++) {
		uint32_t psn = k ? 0 : 1;

		if (k) {
			victim_open(&vi);
			send_hello(&vi, vi.nonce);
		}
		h = (struct soft_tcp_hdr){
			.opcode = SOFT_TCP_OP_WRITE,
			.psn = psn,
			.size = 16,
			.raddr = k ? UINT64_MAX - 7 : (uintptr_t)(target + 120),
			.rkey = tf_mr_rkey(mr)};
		n = enc(b, &h);
		memset(b + n, 0x77, 16);
		raw_send(vi.fd, b, n + 16);
		raw_read_hdr(vi.fd, &h);
		CHECK(h.opcode == SOFT_TCP_OP_ACK &&
		      h.status == SOFT_TCP_ST_REM_ACCESS && h.psn == psn);
		CHECK(target[120] == 0 && target[0] == 0);
		CHECK(wait_state(vi.v, TF_QPS_ERR, 3000));
		CHECK(raw_closed(vi.fd, 3000));
		victim_close(&vi);
	}
	CHECK_OK(tf_mr_dereg(mr));
}

enum bad_kind {
	BAD_VERSION,
	BAD_OPCODE,
	BAD_OVERSIZED,
	BAD_HDR_SIZE,
	BAD_TRUNCATED_EOF,
	BAD_GARBAGE,
	BAD_UNSOLICITED_ACK,
	BAD_PSN,
	BAD_SECOND_HELLO,
	BAD_SHORT_PAYLOAD_EOF,
	BAD_N
};

static const char *const bad_name[] = {
	"wrong version",       "unknown opcode",   "oversized frame",
	"hdr_size mismatch",   "truncated + EOF",  "garbage",
	"unsolicited ACK",     "out-of-order psn", "second HELLO",
	"short payload + EOF",
};

static void bad_stream(enum bad_kind kind)
{
	struct victim vi;
	struct soft_tcp_hdr h = {0};
	uint8_t b[256];
	size_t n = 0;
	int logs0 = n_tcp_logs;
	struct tf_recv_wr rwr = {.wr_id = 0xbad};
	struct tf_wc wc;

	printf("case: %s\n", bad_name[kind]);
	victim_open(&vi);
	/* A posted receive must come back flushed when the QP dies. */
	CHECK_OK(tf_post_recv(vi.v, &rwr, NULL));
	send_hello(&vi, vi.nonce);

	switch (kind) {
	case BAD_VERSION:
		h = sample(SOFT_TCP_OP_WRITE);
		h.size = 0;
		n = enc(b, &h);
		b[0] = 9;
		break;
	case BAD_OPCODE:
		h = sample(SOFT_TCP_OP_ACK);
		n = enc(b, &h);
		b[1] = 200;
		break;
	case BAD_OVERSIZED:
		h = sample(SOFT_TCP_OP_WRITE);
		h.psn = 0;
		h.size = 0xfffffff0u;
		n = enc(b, &h);
		break;
	case BAD_HDR_SIZE:
		h = sample(SOFT_TCP_OP_SEND);
		h.psn = 0;
		h.size = 0;
		n = enc(b, &h);
		b[5] = 40;
		memset(b + n, 0, 40 - n);
		n = 40;
		break;
	case BAD_TRUNCATED_EOF:
		h = sample(SOFT_TCP_OP_WRITE);
		n = enc(b, &h) - 5;
		break;
	case BAD_GARBAGE:
		for (n = 0; n < 200; n++)
			b[n] = (uint8_t)(n * 37 + 11);
		break;
	case BAD_UNSOLICITED_ACK:
		h = (struct soft_tcp_hdr){.opcode = SOFT_TCP_OP_ACK, .psn = 5};
		n = enc(b, &h);
		break;
	case BAD_PSN:
		h = (struct soft_tcp_hdr){.opcode = SOFT_TCP_OP_SEND, .psn = 7};
		n = enc(b, &h);
		break;
	case BAD_SECOND_HELLO:
		h = (struct soft_tcp_hdr){.opcode = SOFT_TCP_OP_HELLO,
					  .dst_qpn = vi.vqpn,
					  .src_qpn = vi.pqpn,
					  .dst_nonce = vi.nonce,
					  .src_nonce = vi.nonce};
		n = enc(b, &h);
		break;
	case BAD_SHORT_PAYLOAD_EOF:
		/* A SEND that announces 100 bytes and brings 10. */
		h = (struct soft_tcp_hdr){.opcode = SOFT_TCP_OP_SEND,
					  .size = 100};
		n = enc(b, &h);
		memset(b + n, 1, 10);
		n += 10;
		break;
	default:
		break;
	}
	raw_send(vi.fd, b, n);
	if (kind == BAD_TRUNCATED_EOF || kind == BAD_SHORT_PAYLOAD_EOF)
		shutdown(vi.fd, SHUT_WR);

	if (!wait_state(vi.v, TF_QPS_ERR, 3000))
		tf_test_fail(__FILE__, __LINE__, "%s: victim not in error",
			     bad_name[kind]);
	if (!raw_closed(vi.fd, 3000))
		tf_test_fail(__FILE__, __LINE__, "%s: connection not closed",
			     bad_name[kind]);
	/* The flushed receive. */
	wc = wait_wc(vi.v);
	CHECK(wc.wr_id == 0xbad && wc.status == TF_WC_WR_FLUSH_ERR);
	/* Protocol violations are logged (a plain EOF is not an error:
	 * peers close connections). */
	if (kind != BAD_TRUNCATED_EOF && kind != BAD_SHORT_PAYLOAD_EOF &&
	    n_tcp_logs == logs0)
		tf_test_fail(__FILE__, __LINE__, "%s: nothing logged",
			     bad_name[kind]);
	victim_close(&vi);
	good_pair_works(kind);
}

/* A HELLO for the wrong context: the socket is closed, and the QP it
 * named is not harmed (it was not attached). */
static void bad_hello(void)
{
	struct victim vi;
	int logs0 = n_tcp_logs;

	printf("case: HELLO with a wrong nonce\n");
	victim_open(&vi);
	send_hello(&vi, vi.nonce ^ 1);
	CHECK(raw_closed(vi.fd, 3000));
	CHECK(n_tcp_logs > logs0);
	CHECK(tf_qp_state(vi.v) == TF_QPS_RTS);
	victim_close(&vi);

	printf("case: first frame not a HELLO\n");
	logs0 = n_tcp_logs;
	victim_open(&vi);
	{
		struct soft_tcp_hdr h = sample(SOFT_TCP_OP_ACK);
		uint8_t b[SOFT_TCP_HDR_MAX];

		raw_send(vi.fd, b, enc(b, &h));
	}
	CHECK(raw_closed(vi.fd, 3000));
	CHECK(n_tcp_logs > logs0);
	CHECK(tf_qp_state(vi.v) == TF_QPS_RTS);
	victim_close(&vi);
}

/* A peer that stops reading: the victim's WRITEs fill the socket, post
 * never blocks, and after the QP's timeout (3 s here) the first WRITE
 * fails with RETRY_EXC and the rest are flushed. */
static void stalled_peer(void)
{
	enum { N = 24, SZ = 1 << 20 };
	struct victim vi;
	uint8_t *src = malloc(SZ);
	struct tf_sge sge;
	tf_mr_t *mr;
	uint64_t t0;
	int i;

	printf("case: peer stops reading\n");
	CHECK(src);
	memset(src, 0x33, SZ);
	CHECK_OK(tf_mr_reg(pd, src, SZ, TF_ACCESS_LOCAL_WRITE, &mr));
	victim_open(&vi);
	send_hello(&vi, vi.nonce);
	sge = (struct tf_sge){(uintptr_t)src, SZ, tf_mr_lkey(mr)};
	t0 = now_ms();
	for (i = 0; i < N; i++) {
		struct tf_send_wr wr = {.wr_id = 1000 + (uint64_t)i,
					.sg_list = &sge,
					.num_sge = 1,
					.opcode = TF_WR_RDMA_WRITE,
					.send_flags = TF_SEND_SIGNALED};

		wr.wr.rdma.remote_addr = 0x10000;
		wr.wr.rdma.rkey = 0x1234;
		CHECK_OK(tf_post_send(vi.v, &wr, NULL));
		tf_context_progress(ctx);
	}
	/* Posting 24 MiB to a peer that reads nothing did not block. */
	CHECK(now_ms() - t0 < 2000);
	for (i = 0; i < N; i++) {
		struct tf_wc wc = wait_wc(vi.v);

		CHECK(wc.wr_id == 1000 + (uint64_t)i);
		CHECK(wc.status ==
		      (i ? TF_WC_WR_FLUSH_ERR : TF_WC_RETRY_EXC_ERR));
	}
	CHECK(tf_qp_state(vi.v) == TF_QPS_ERR);
	victim_close(&vi);
	CHECK_OK(tf_mr_dereg(mr));
	free(src);
}

/* A counting allocator for the library's own memory (tf_set_allocator):
 * live bytes, exact whatever the libc or a sanitizer does. */
static _Atomic long lib_live;

static void *cnt_malloc(size_t n)
{
	size_t *p = malloc(n + 16);

	if (!p)
		return NULL;
	*p = n;
	lib_live += (long)n;
	return (char *)p + 16;
}

static void *cnt_calloc(size_t k, size_t n)
{
	void *p;

	if (n && k > (SIZE_MAX - 16) / n)
		return NULL;
	p = cnt_malloc(k * n);
	if (p)
		memset(p, 0, k * n);
	return p;
}

static void cnt_free(void *q)
{
	size_t *p;

	if (!q)
		return;
	p = (size_t *)((char *)q - 16);
	lib_live -= (long)*p;
	free(p);
}

static void *cnt_realloc(void *q, size_t n)
{
	size_t *p = q ? (size_t *)((char *)q - 16) : NULL;
	size_t old = p ? *p : 0;

	p = realloc(p, n + 16);
	if (!p)
		return NULL;
	*p = n;
	lib_live += (long)n - (long)old;
	return (char *)p + 16;
}

/*
 * A peer that asks for 64 MiB of READs without reading the answers: the
 * target stops serving once its send queue holds a bounded amount (its
 * memory does not grow by the whole 64 MiB), and serves the rest, in
 * order, once the peer reads.
 *
 * Two measures, neither of which depends on the libc or a sanitizer (no
 * RSS, no mallinfo): the bytes the transport holds queued for the
 * connection (soft_tcp_tx_queued, the counter its bound is kept on), which
 * must reach the bound (the socket cannot take 64 MiB: else the throttle
 * was not exercised) and stay within it, one response past it at most; and
 * the library's whole heap through the counting allocator, which must not
 * grow by much more than that queue (a copy held anywhere else, unbounded,
 * would show there).
 */
static void read_flood(void)
{
	enum { N = 64, SZ = 1 << 20 };
	/* The queue's bound: the throttle is checked before each request,
	 * so one response (header and payload) may be queued past it. */
	const long qmax = SOFT_TCP_TX_OWNED_MAX + SZ + SOFT_TCP_HDR_MAX;
	uint8_t *region = malloc(SZ), *rx = malloc(SZ + SOFT_TCP_HDR_MAX);
	struct soft_tcp_hdr h;
	struct victim vi;
	uint8_t b[SOFT_TCP_HDR_MAX];
	long heap0, heap_peak = 0, q_peak = 0;
	uint64_t t_flood;
	tf_mr_t *mr;
	int i;

	printf("case: READ flood without reading the responses\n");
	CHECK(region && rx);
	for (i = 0; i < SZ; i++)
		region[i] = (uint8_t)(i * 13);
	CHECK_OK(tf_mr_reg(pd, region, SZ,
			   TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_READ, &mr));
	victim_open(&vi);
	send_hello(&vi, vi.nonce);
	heap0 = lib_live;
	t_flood = now_ms();
	for (i = 0; i < N; i++) {
		h = (struct soft_tcp_hdr){.opcode = SOFT_TCP_OP_READ_REQ,
					  .psn = (uint32_t)i,
					  .raddr = (uintptr_t)region,
					  .rkey = tf_mr_rkey(mr),
					  .length = SZ};
		raw_send(vi.fd, b, enc(b, &h));
	}
	/* Longer than the victim's transport timeout (3 s): a responder
	 * whose peer does not read must not fail for that.  And until the
	 * queue passed its bound, which it must, since the socket cannot
	 * take the rest: a starved machine (a sanitizer, parallel tests)
	 * may need longer than 3 s to copy that much, and stopping early
	 * would judge the bound before the responder got there. */
	for (uint64_t t0 = now_ms(), t;
	     (t = now_ms()) - t0 < 3500 ||
	     (q_peak <= (long)SOFT_TCP_TX_OWNED_MAX &&
	      t - t0 < (uint64_t)tf_test_timeout_ms() * 3);) {
		long q, g;

		tf_context_progress(ctx);
		q = (long)soft_tcp_tx_queued(soft_qp_of(vi.v));
		g = lib_live - heap0;
		if (q > q_peak)
			q_peak = q;
		if (g > heap_peak)
			heap_peak = g;
	}
	printf("  while the peer does not read: %ld KiB queued at most (bound "
	       "%ld KiB), library heap growth %ld KiB, in %llu ms\n",
	       q_peak / 1024, qmax / 1024, heap_peak / 1024,
	       (unsigned long long)(now_ms() - t_flood));
	CHECK(tf_qp_state(vi.v) == TF_QPS_RTS);
	/* Unbounded, the target would queue 64 MiB of copies, less what the
	 * socket took. */
	CHECKF(q_peak > (long)SOFT_TCP_TX_OWNED_MAX && q_peak <= qmax,
	       "%ld bytes queued at most; the bound is %u, and one "
	       "response more",
	       q_peak, SOFT_TCP_TX_OWNED_MAX);
	/* Besides the queue, the transport may grow the connection's
	 * receive buffer up to a header and TOLLFREE_SOFT_MAX_MSG; nothing
	 * else of it grows with the peer's requests.  The count is exact
	 * whatever the allocator, so this holds under the sanitizers too. */
	CHECKF(heap_peak <=
		       qmax + (long)(ctx->cfg.soft_max_msg + SOFT_TCP_HDR_MAX),
	       "library heap grew by %ld bytes, the queue by %ld at most",
	       heap_peak, q_peak);
	/* Now read everything: N responses, in order, with the data. */
	for (i = 0; i < N; i++) {
		size_t got = 0;
		uint64_t end = now_ms() + 10000;

		raw_read_hdr(vi.fd, &h);
		CHECK(h.opcode == SOFT_TCP_OP_READ_RESP &&
		      h.psn == (uint32_t)i && h.size == SZ);
		while (got < SZ && now_ms() < end) {
			ssize_t n =
				recv(vi.fd, rx + got, SZ - got, MSG_DONTWAIT);

			if (n > 0)
				got += (size_t)n;
			else
				tf_context_progress(ctx);
		}
		if (got != SZ || memcmp(rx, region, SZ)) {
			size_t k = 0;

			while (k < got && rx[k] == region[k])
				k++;
			tf_test_fail(__FILE__, __LINE__,
				     "READ %d: %zu of %d bytes, first "
				     "difference at %zu",
				     i, got, SZ, k);
		}
	}
	CHECK(tf_qp_state(vi.v) == TF_QPS_RTS);
	victim_close(&vi);
	CHECK_OK(tf_mr_dereg(mr));
	free(region);
	free(rx);
}

/*
 * A responder throttled by its send queue resumes once the queue drained,
 * whichever flush drained it.  The queue also drains at the end of a pass,
 * where the ACK of the WRITEs served in that pass is flushed together with
 * the queued READ data; a throttled connection reads nothing from its
 * socket, so if that flush does not resume it, no later event does: every
 * request still to come waits forever, and the peer's QP times out.
 *
 * The sends are placed with the interposer: 16 READs of 1 MiB fill the
 * queue past its bound (the socket takes nothing) and two WRITEs behind
 * them wait; then the next flush takes one response and no more, which
 * leaves the connection throttled but under the bound, so it serves the
 * WRITEs; the flush of their ACK then takes all the rest.  A WRITE sent
 * after that must be served.
 */
static void throttle_resumes(void)
{
	enum { N = 16, SZ = 1 << 20 };
	static uint8_t target[64];
	uint8_t *region = calloc(1, SZ), b[SOFT_TCP_HDR_MAX + 16];
	struct sockaddr_in sin = {0};
	socklen_t sl = sizeof(sin);
	struct soft_tcp_hdr h;
	struct victim vi;
	tf_mr_t *mr, *tmr;
	uint64_t end;
	size_t n;
	int i;

	printf("case: a throttled responder resumes once its queue drained\n");
	CHECK(region);
	memset(target, 0, sizeof(target));
	CHECK_OK(tf_mr_reg(pd, region, SZ,
			   TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_READ, &mr));
	CHECK_OK(tf_mr_reg(pd, target, sizeof(target),
			   TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE,
			   &tmr));
	victim_open(&vi);
	CHECK(getsockname(vi.fd, (struct sockaddr *)&sin, &sl) == 0);
	gate_port = ntohs(sin.sin_port);
	gate_mode = GATE_BLOCK;
	send_hello(&vi, vi.nonce);
	for (i = 0; i < N; i++) {
		h = (struct soft_tcp_hdr){.opcode = SOFT_TCP_OP_READ_REQ,
					  .psn = (uint32_t)i,
					  .raddr = (uintptr_t)region,
					  .rkey = tf_mr_rkey(mr),
					  .length = SZ};
		raw_send(vi.fd, b, enc(b, &h));
	}
	for (i = 0; i < 3; i++) {
		h = (struct soft_tcp_hdr){.opcode = SOFT_TCP_OP_WRITE,
					  .psn = (uint32_t)(N + i),
					  .size = 16,
					  .raddr = (uintptr_t)(target + 16 * i),
					  .rkey = tf_mr_rkey(tmr)};
		n = enc(b, &h);
		memset(b + n, 0x11 * (i + 1), 16);
		/* The third WRITE is sent once the queue drained. */
		if (i == 2) {
			gate_budget = SZ + SOFT_TCP_HDR_COMMON;
			gate_mode = GATE_STEP;
			for (end = now_ms() + 5000;
			     gate_mode != GATE_SWALLOW && now_ms() < end;)
				tf_context_progress(ctx);
			CHECK(gate_mode == GATE_SWALLOW);
			CHECKF(target[0] == 0x11 && target[16] == 0x22,
			       "the WRITEs under the bound were not served");
			CHECK(soft_tcp_tx_queued(soft_qp_of(vi.v)) == 0);
		}
		raw_send(vi.fd, b, n + 16);
		if (i == 1) {
			/* Throttled: the READs are queued, the WRITEs wait. */
			for (end = now_ms() + 5000;
			     soft_tcp_tx_queued(soft_qp_of(vi.v)) <=
				     SOFT_TCP_TX_OWNED_MAX &&
			     now_ms() < end;)
				tf_context_progress(ctx);
			for (int k = 0; k < 100; k++)
				tf_context_progress(ctx);
			CHECK(soft_tcp_tx_queued(soft_qp_of(vi.v)) >
			      SOFT_TCP_TX_OWNED_MAX);
			CHECK(target[0] == 0);
		}
	}
	for (end = now_ms() + 2000; target[32] != 0x33 && now_ms() < end;)
		tf_context_progress(ctx);
	CHECKF(target[32] == 0x33,
	       "a WRITE sent after the send queue drained was not served "
	       "in 2 s: the connection stayed throttled");
	CHECK(tf_qp_state(vi.v) == TF_QPS_RTS);
	gate_mode = GATE_OFF;
	victim_close(&vi);
	CHECK_OK(tf_mr_dereg(tmr));
	CHECK_OK(tf_mr_dereg(mr));
	free(region);
}

/*
 * A requester's answer that arrives while a progress pass runs, after the
 * pass polled the sockets, is read by the next pass; the pass must not
 * fail the requester for its timeout meanwhile.  A pass can take long
 * enough for that on a loaded machine (its thread descheduled after the
 * poll, or waiting for a QP's lock); here the epoll_wait hook delivers the
 * ACK and then waits past the timeout, between the poll and the rest of
 * the pass.  The WRITE must complete successfully.
 */
enum { ANSWER_TMO_MS = 1000 };
static int answer_fd = -1;

static void answer_late(void)
{
	struct soft_tcp_hdr h = {.opcode = SOFT_TCP_OP_ACK, .psn = 0};
	uint8_t b[SOFT_TCP_HDR_MAX];

	raw_send(answer_fd, b, enc(b, &h));
	usleep((ANSWER_TMO_MS + 300) * 1000);
}

static void answer_during_pass(void)
{
	static uint8_t src[64];
	uint8_t payload[sizeof(src)];
	struct soft_tcp_hdr h;
	struct victim vi;
	struct tf_sge sge;
	struct tf_send_wr wr = {.wr_id = 77,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = TF_WR_RDMA_WRITE,
				.send_flags = TF_SEND_SIGNALED};
	struct tf_wc wc;
	size_t got = 0;
	uint64_t end;
	tf_mr_t *mr;

	printf("case: an answer that arrives during a progress pass\n");
	CHECK_OK(tf_mr_reg(pd, src, sizeof(src), TF_ACCESS_LOCAL_WRITE, &mr));
	qp_timeout_ms = ANSWER_TMO_MS;
	victim_open(&vi);
	qp_timeout_ms = 3000;
	send_hello(&vi, vi.nonce);
	sge = (struct tf_sge){(uintptr_t)src, sizeof(src), tf_mr_lkey(mr)};
	wr.wr.rdma.remote_addr = 0x10000;
	wr.wr.rdma.rkey = 0x1234;
	CHECK_OK(tf_post_send(vi.v, &wr, NULL));
	/* The WRITE is on the wire: the victim's clock for it runs. */
	raw_read_hdr(vi.fd, &h);
	CHECK(h.opcode == SOFT_TCP_OP_WRITE && h.psn == 0 &&
	      h.size == sizeof(src));
	for (end = now_ms() + 5000; got < sizeof(src) && now_ms() < end;) {
		ssize_t n = recv(vi.fd, payload + got, sizeof(src) - got,
				 MSG_DONTWAIT);

		if (n > 0)
			got += (size_t)n;
	}
	CHECK(got == sizeof(src));
	answer_fd = vi.fd;
	poll_hook_fd = soft_tcp_event_fd(soft_qp_of(vi.v)->ctx);
	poll_hook = answer_late;
	tf_context_progress(ctx);
	CHECK(!poll_hook);
	wc = wait_wc(vi.v);
	CHECKF(wc.wr_id == 77 && wc.status == TF_WC_SUCCESS,
	       "the WRITE completed with %s although its ACK had arrived "
	       "during the pass that failed it",
	       tf_wc_status_str(wc.status));
	CHECK(tf_qp_state(vi.v) == TF_QPS_RTS);
	victim_close(&vi);
	CHECK_OK(tf_mr_dereg(mr));
}

int main(void)
{
	tf_context_params_t cp = {.field_mask = TF_CONTEXT_PARAM_PROVIDER |
						TF_CONTEXT_PARAM_TRANSPORT |
						TF_CONTEXT_PARAM_TCP_ADDR,
				  .provider = "soft",
				  .transport = "tcp",
				  .tcp_addr = "127.0.0.1"};
	tf_cq_params_t cqp = {.field_mask = TF_CQ_PARAM_DEPTH, .depth = 256};
	uint8_t b[TF_QP_ADDR_MAX];
	size_t len;
	int ret;

	tf_set_allocator(&(tf_allocator_t){cnt_malloc, cnt_calloc, cnt_realloc,
					   cnt_free});
	tf_test_begin("soft_tcp_frames");
	unit_tests();
	printf("parser unit tests passed\n");

	/* The e2e part expects the transport to log; count its lines. */
	tf_log_set_handler(log_fn, NULL);
	ret = tf_context_open(&cp, &ctx);
	if (ret == -TF_ENOPROVIDER || ret == -EOPNOTSUPP)
		tf_test_skip("soft provider with tcp unavailable: %s",
			     tf_strerror(ret));
	CHECK_OK(ret);
	CHECK_OK(tf_pd_create(ctx, &pd));
	CHECK_OK(tf_cq_create(ctx, &cqp, &cq));
	CHECK_OK(tf_mr_reg(pd, good_dst, sizeof(good_dst),
			   TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE,
			   &good_mr));
	CHECK_OK(tf_mr_reg(pd, good_src, sizeof(good_src),
			   TF_ACCESS_LOCAL_WRITE, &src_mr));
	good_a = mk_qp();
	good_b = mk_qp();
	blob(good_b, b, &len);
	CHECK_OK(tf_qp_connect(good_a, b, len));
	blob(good_a, b, &len);
	CHECK_OK(tf_qp_connect(good_b, b, len));
	good_pair_works(100);
	if (n_tcp_logs)
		tf_test_fail(__FILE__, __LINE__, "log lines on the good path");

	raw_write_works();
	good_pair_works(101);
	for (int k = 0; k < BAD_N; k++)
		bad_stream((enum bad_kind)k);
	bad_hello();
	good_pair_works(102);
	stalled_peer();
	good_pair_works(103);
	read_flood();
	good_pair_works(104);
	throttle_resumes();
	good_pair_works(105);
	answer_during_pass();
	good_pair_works(106);

	CHECK_OK(tf_qp_destroy(good_a));
	CHECK_OK(tf_qp_destroy(good_b));
	CHECK_OK(tf_mr_dereg(good_mr));
	CHECK_OK(tf_mr_dereg(src_mr));
	CHECK_OK(tf_cq_destroy(cq));
	CHECK_OK(tf_pd_destroy(pd));
	tf_context_close(ctx);
	printf("soft_tcp_frames: PASS\n");
	return TF_TEST_PASS;
}
