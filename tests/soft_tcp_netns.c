/* SPDX-License-Identifier: MIT */
/*
 * soft_tcp_netns - the soft provider's tcp transport between two network
 * namespaces, as between two hosts.
 *
 * The test creates two namespaces joined by a veth pair with addresses
 * from TEST-NET-1 (192.0.2.0/24) and, in a second round, from the IPv6
 * documentation prefix (2001:db8::/32); these exist only inside the
 * namespaces.  Two children enter one namespace each, open a soft context
 * with transport tcp bound to their veth address, exchange QP blobs over a
 * socketpair, and run WRITE, READ, SEND and both atomics one way, then a
 * WRITE the other way.  The namespaces are deleted whatever happens
 * (atexit and signal handlers in the parent).  Skips (77) without root or
 * without namespace support.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tf_test.h"

#define BUF_SIZE 8192
/* Offsets in each side's buffer. */
#define OFF_WRITE  0	/* A writes 1 KiB here on B */
#define OFF_READ   1024 /* B's pattern that A reads */
#define OFF_RECV   2048 /* B's receive buffer */
#define OFF_ATOMIC 3072 /* B's 8-byte counter */
#define OFF_BACK   4096 /* B writes 512 bytes here on A */
#define OFF_LOCAL  6144 /* A's local landing zone (READ, atomics) */

static pid_t parent_pid;
static pid_t kids[2];
static char ns[2][32], veth[2][16];
static int ns_made;

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	st = system(cmd);
	if (st == -1 || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

static void cleanup(void)
{
	int i;

	if (getpid() != parent_pid)
		return;
	for (i = 0; i < 2; i++) {
		if (kids[i] > 0) {
			kill(kids[i], SIGKILL);
			waitpid(kids[i], NULL, 0);
			kids[i] = 0;
		}
	}
	/* Deleting a namespace deletes the veth end inside it (and with it
	 * the pair); the link delete covers a pair not yet moved. */
	if (ns_made) {
		sh("ip link del %s >/dev/null 2>&1", veth[0]);
		for (i = 0; i < 2; i++)
			sh("ip netns del %s >/dev/null 2>&1", ns[i]);
		ns_made = 0;
	}
}

static void on_signal(int sig)
{
	cleanup();
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Build the two namespaces and the veth pair; false if not possible. */
static bool setup_netns(char *why, size_t len)
{
	int i;

	snprintf(ns[0], sizeof(ns[0]), "tf_tcp_a_%d", (int)parent_pid);
	snprintf(ns[1], sizeof(ns[1]), "tf_tcp_b_%d", (int)parent_pid);
	/* Interface names have at most 15 characters. */
	snprintf(veth[0], sizeof(veth[0]), "tfa%d", (int)parent_pid % 1000000);
	snprintf(veth[1], sizeof(veth[1]), "tfb%d", (int)parent_pid % 1000000);
	ns_made = 1;
	for (i = 0; i < 2; i++) {
		if (sh("ip netns add %s", ns[i])) {
			snprintf(why, len, "'ip netns add' failed");
			return false;
		}
	}
	if (sh("ip link add %s type veth peer name %s", veth[0], veth[1])) {
		snprintf(why, len, "cannot create a veth pair");
		return false;
	}
	for (i = 0; i < 2; i++) {
		if (sh("ip link set %s netns %s", veth[i], ns[i]) ||
		    sh("ip -n %s addr add 192.0.2.%d/24 dev %s", ns[i], i + 1,
		       veth[i]) ||
		    sh("ip -n %s addr add 2001:db8::%d/64 dev %s nodad", ns[i],
		       i + 1, veth[i]) ||
		    sh("ip -n %s link set lo up", ns[i]) ||
		    sh("ip -n %s link set %s up", ns[i], veth[i])) {
			snprintf(why, len, "cannot configure the veth pair");
			return false;
		}
	}
	return true;
}

/* ---------------------------------------------------------------- child */

struct info {
	uint32_t blob_len;
	uint8_t blob[TF_QP_ADDR_MAX];
	uint64_t addr;
	uint32_t rkey;
};

struct side {
	int id; /* 0: A, 1: B */
	int sp;
	tf_context_t *ctx;
	tf_pd_t *pd;
	tf_cq_t *cq;
	tf_mr_t *mr;
	tf_qp_t *qp;
	uint8_t *buf;
	struct info peer;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void xfer(int fd, void *buf, size_t len, bool out)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = out ? write(fd, (char *)buf + done, len - done)
				: read(fd, (char *)buf + done, len - done);

		if (n < 0 && errno == EINTR)
			continue;
		CHECK(n > 0);
		done += (size_t)n;
	}
}

static void send_msg(int sp, char c)
{
	xfer(sp, &c, 1, true);
}

/* Progress until a control byte arrives from the other side. */
static char wait_msg(struct side *s)
{
	uint64_t end = now_ms() + 20000;
	char c;

	while (now_ms() < end) {
		ssize_t n;

		CHECK(tf_context_progress(s->ctx) >= 0);
		n = recv(s->sp, &c, 1, MSG_DONTWAIT);
		if (n == 1)
			return c;
		CHECK(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
	}
	tf_test_fail(__FILE__, __LINE__, "side %c: no message from the peer",
		     'A' + s->id);
}

static struct tf_wc wait_wc(struct side *s)
{
	uint64_t end = now_ms() + 20000;
	struct tf_wc wc;

	while (now_ms() < end) {
		int n = tf_cq_poll(s->cq, 1, &wc);

		CHECK(n >= 0);
		if (n == 1)
			return wc;
	}
	tf_test_fail(__FILE__, __LINE__, "side %c: no completion", 'A' + s->id);
}

static void post(struct side *s, enum tf_wr_opcode op, uint32_t off,
		 uint32_t len, uint64_t raddr, uint64_t cmp_add, uint64_t swap)
{
	struct tf_sge sge = {(uintptr_t)(s->buf + off), len, tf_mr_lkey(s->mr)};
	struct tf_send_wr wr = {.wr_id = op,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = op,
				.send_flags = TF_SEND_SIGNALED};
	struct tf_wc wc;

	if (op == TF_WR_ATOMIC_FETCH_ADD || op == TF_WR_ATOMIC_CMP_SWP) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = s->peer.rkey;
		wr.wr.atomic.compare_add = cmp_add;
		wr.wr.atomic.swap = swap;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = s->peer.rkey;
	}
	CHECK_OK(tf_post_send(s->qp, &wr, NULL));
	wc = wait_wc(s);
	if (wc.status != TF_WC_SUCCESS || wc.wr_id != (uint64_t)op)
		tf_test_fail(__FILE__, __LINE__,
			     "side %c: op %d completed with %s", 'A' + s->id,
			     (int)op, tf_wc_status_str(wc.status));
}

static int run_child(int id, int sp, const char *addr)
{
	tf_context_params_t cp = {.field_mask = TF_CONTEXT_PARAM_PROVIDER |
						TF_CONTEXT_PARAM_TRANSPORT |
						TF_CONTEXT_PARAM_TCP_ADDR,
				  .provider = "soft",
				  .transport = "tcp",
				  .tcp_addr = addr};
	tf_cq_params_t cqp = {.field_mask = TF_CQ_PARAM_DEPTH, .depth = 64};
	tf_qp_params_t qpp = {0};
	struct side s = {.id = id, .sp = sp};
	struct info me = {0};
	char path[96];
	size_t len;
	uint64_t v;
	int fd, i;

	tf_test_begin(id ? "soft_tcp_netns[B]" : "soft_tcp_netns[A]");
	snprintf(path, sizeof(path), "/var/run/netns/%s", ns[id]);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0);
	CHECK(setns(fd, CLONE_NEWNET) == 0);
	close(fd);

	CHECK_OK(tf_context_open(&cp, &s.ctx));
	CHECK_OK(tf_pd_create(s.ctx, &s.pd));
	CHECK_OK(tf_cq_create(s.ctx, &cqp, &s.cq));
	s.buf = aligned_alloc(4096, BUF_SIZE);
	CHECK(s.buf);
	memset(s.buf, 0, BUF_SIZE);
	CHECK_OK(tf_mr_reg(s.pd, s.buf, BUF_SIZE, TF_ACCESS_ALL, &s.mr));
	qpp.send_cq = s.cq;
	qpp.recv_cq = s.cq;
	CHECK_OK(tf_qp_create(s.pd, &qpp, &s.qp));

	len = sizeof(me.blob);
	CHECK_OK(tf_qp_get_addr(s.qp, me.blob, &len));
	me.blob_len = (uint32_t)len;
	me.addr = (uintptr_t)s.buf;
	me.rkey = tf_mr_rkey(s.mr);
	xfer(sp, &me, sizeof(me), true);
	xfer(sp, &s.peer, sizeof(s.peer), false);
	CHECK(s.peer.blob_len <= sizeof(s.peer.blob));
	CHECK_OK(tf_qp_connect(s.qp, s.peer.blob, s.peer.blob_len));

	if (id == 0) {
		/* A: every operation towards B. */
		for (i = 0; i < 1024; i++)
			s.buf[OFF_LOCAL + i] = (uint8_t)(i * 7 + 1);
		post(&s, TF_WR_RDMA_WRITE, OFF_LOCAL, 1024,
		     s.peer.addr + OFF_WRITE, 0, 0);
		memset(s.buf + OFF_LOCAL, 0, 1024);
		post(&s, TF_WR_RDMA_READ, OFF_LOCAL, 1024,
		     s.peer.addr + OFF_READ, 0, 0);
		for (i = 0; i < 1024; i++)
			CHECK(s.buf[OFF_LOCAL + i] == (uint8_t)(i ^ 0x5c));
		memcpy(s.buf + OFF_LOCAL, "hello over the veth", 20);
		post(&s, TF_WR_SEND, OFF_LOCAL, 20, 0, 0, 0);
		post(&s, TF_WR_ATOMIC_FETCH_ADD, OFF_LOCAL, 8,
		     s.peer.addr + OFF_ATOMIC, 10, 0);
		memcpy(&v, s.buf + OFF_LOCAL, 8);
		CHECK(v == 5);
		post(&s, TF_WR_ATOMIC_CMP_SWP, OFF_LOCAL, 8,
		     s.peer.addr + OFF_ATOMIC, 15, 99);
		memcpy(&v, s.buf + OFF_LOCAL, 8);
		CHECK(v == 15);
		send_msg(sp, 'A');
		/* Serve B's WRITE, then check it. */
		CHECK(wait_msg(&s) == 'B');
		for (i = 0; i < 512; i++)
			CHECK(s.buf[OFF_BACK + i] == (uint8_t)(i + 3));
		send_msg(sp, 'F');
	} else {
		struct tf_recv_wr rwr = {.wr_id = 0x77};
		struct tf_sge rs = {(uintptr_t)(s.buf + OFF_RECV), 1024,
				    tf_mr_lkey(s.mr)};
		struct tf_wc wc;

		/* B: the target.  Its pattern, its counter, a receive. */
		for (i = 0; i < 1024; i++)
			s.buf[OFF_READ + i] = (uint8_t)(i ^ 0x5c);
		v = 5;
		memcpy(s.buf + OFF_ATOMIC, &v, 8);
		rwr.sg_list = &rs;
		rwr.num_sge = 1;
		CHECK_OK(tf_post_recv(s.qp, &rwr, NULL));
		/* Serve A (polling the CQ progresses) until it is done. */
		wc = wait_wc(&s);
		CHECK(wc.wr_id == 0x77 && wc.status == TF_WC_SUCCESS &&
		      wc.opcode == TF_WC_RECV && wc.byte_len == 20);
		CHECK(!memcmp(s.buf + OFF_RECV, "hello over the veth", 20));
		CHECK(wait_msg(&s) == 'A');
		for (i = 0; i < 1024; i++)
			CHECK(s.buf[OFF_WRITE + i] == (uint8_t)(i * 7 + 1));
		memcpy(&v, s.buf + OFF_ATOMIC, 8);
		CHECK(v == 99);
		/* And the other direction. */
		for (i = 0; i < 512; i++)
			s.buf[OFF_LOCAL + i] = (uint8_t)(i + 3);
		post(&s, TF_WR_RDMA_WRITE, OFF_LOCAL, 512,
		     s.peer.addr + OFF_BACK, 0, 0);
		send_msg(sp, 'B');
		CHECK(wait_msg(&s) == 'F');
	}

	CHECK_OK(tf_qp_destroy(s.qp));
	CHECK_OK(tf_mr_dereg(s.mr));
	CHECK_OK(tf_cq_destroy(s.cq));
	CHECK_OK(tf_pd_destroy(s.pd));
	tf_context_close(s.ctx);
	free(s.buf);
	return tf_test_end();
}

/* ---------------------------------------------------------------- parent */

static int run_round(const char *addr_a, const char *addr_b)
{
	int sp[2], st, i, fails = 0;

	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0);
	fflush(stdout);
	for (i = 0; i < 2; i++) {
		kids[i] = fork();
		CHECK(kids[i] >= 0);
		if (kids[i] == 0) {
			close(sp[1 - i]);
			_exit(run_child(i, sp[i], i ? addr_b : addr_a));
		}
	}
	close(sp[0]);
	close(sp[1]);
	for (i = 0; i < 2; i++) {
		CHECK(waitpid(kids[i], &st, 0) == kids[i]);
		kids[i] = 0;
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			printf("side %c failed (status %#x)\n", 'A' + i, st);
			fails++;
		}
	}
	return fails;
}

int main(void)
{
	char why[128];
	int fails;

	tf_test_begin("soft_tcp_netns");
	parent_pid = getpid();
	if (geteuid() != 0)
		tf_test_skip("needs root to create network namespaces");
	if (sh("ip -V >/dev/null 2>&1"))
		tf_test_skip("the 'ip' tool (iproute2) is not installed");
	atexit(cleanup);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	signal(SIGHUP, on_signal);
	if (!setup_netns(why, sizeof(why))) {
		cleanup();
		tf_test_skip("network namespaces unavailable: %s", why);
	}

	printf("round 1: IPv4 192.0.2.1 <-> 192.0.2.2\n");
	fails = run_round("192.0.2.1", "192.0.2.2");
	printf("round 2: IPv6 2001:db8::1 <-> 2001:db8::2\n");
	fails += run_round("2001:db8::1", "2001:db8::2");
	cleanup();
	if (fails)
		tf_test_fail(__FILE__, __LINE__, "%d side(s) failed", fails);
	return tf_test_end();
}
