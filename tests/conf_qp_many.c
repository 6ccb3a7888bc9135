/* SPDX-License-Identifier: MIT */
/*
 * conf_qp_many: one context holds 1,000 connected QPs to a peer process,
 * each with its own CQ, and every one of them works (issue 14, item 5).
 *
 * The soft provider used to make each CQ's fd an epoll set nesting the
 * context's set; the kernel limits such wakeup paths, and tf_cq_create
 * failed with EINVAL after about 250 QPs over shm and 50 over tcp, far
 * below the max_qp of the capabilities.  Here:
 *  - each side creates TF_TEST_QPS (default 1,000, at most max_qp) CQs
 *    and QPs and connects them to the peer's, in batches of 100 that each
 *    carry a SEND both ways before the next batch opens (the tcp
 *    transport bounds the connections still waiting for their first
 *    frame at 256 per context, and the connecting side sends that frame
 *    from progress);
 *  - with all of them open, a SEND on every QP in each direction
 *    completes on the sender's CQ and lands in the receiver's buffer for
 *    that QP;
 *  - the CQ fd of the first, a middle and the last QP still wakes a
 *    sleeper that calls nothing while the peer sends (as conf_cq_event),
 *    with every other CQ of the context armed too.
 * RLIMIT_NOFILE is raised to its hard limit first (a CQ is a descriptor,
 * and so are a QP's shared-memory segment and tcp connection); the test
 * skips if that cannot hold the QPs.
 */
#include <dirent.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "tf_test.h"

#define MSG   64  /* bytes per QP in each buffer */
#define BATCH 100 /* QPs opened between two rounds of traffic */

struct many {
	unsigned n;
	tf_cq_t **cq;
	struct tf_test_qp *q;
	struct tf_test_buf buf; /* n * MSG: slot i for QP i */
};

/* Descriptors the test may need: a few per QP on each side. */
static unsigned raise_nofile(unsigned want)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return want;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
		(void)getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= 4 * want + 256)
		return want;
	return rl.rlim_cur > 256 ? (unsigned)((rl.rlim_cur - 256) / 4) : 0;
}

static void close_all(struct many *m)
{
	tf_test_buf_free(&m->buf);
	for (unsigned i = 0; i < m->n; i++) {
		tf_test_qp_close(&m->q[i]);
		CHECK_OK(tf_cq_destroy(m->cq[i]));
	}
	free(m->q);
	free(m->cq);
}

static void send_one(struct many *m, unsigned i, uint32_t seed)
{
	uint8_t *at = m->buf.addr + (size_t)i * MSG;
	struct tf_sge sge = {.addr = (uintptr_t)at,
			     .length = MSG,
			     .lkey = tf_test_buf_lkey(&m->buf)};
	struct tf_send_wr wr = {.wr_id = i,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = TF_WR_SEND,
				.send_flags = TF_SEND_SIGNALED};

	tf_test_fill(at, MSG, seed);
	POST_SEND(m->q[i].qp, &wr);
}

/* QPs [lo, hi) each carry one SEND from @from to the other side. */
static void round_range(struct tf_pair *p, struct many *m, unsigned lo,
			unsigned hi, enum tf_test_side from, uint32_t seed0)
{
	struct tf_wc wc;

	if (p->side != from) {
		for (unsigned i = lo; i < hi; i++)
			tf_test_post_recv1(m->q[i].qp, i,
					   m->buf.addr + (size_t)i * MSG, MSG,
					   tf_test_buf_lkey(&m->buf));
		tf_test_sync(p); /* receives posted */
		for (unsigned i = lo; i < hi; i++) {
			EXPECT_WC(p, m->cq[i], i, TF_WC_SUCCESS, TF_WC_RECV,
				  &wc);
			CHECK(wc.byte_len == MSG);
			CHECK_FILL(m->buf.addr + (size_t)i * MSG, MSG,
				   seed0 + i);
		}
	} else {
		tf_test_sync(p);
		for (unsigned i = lo; i < hi; i++)
			send_one(m, i, seed0 + i);
		for (unsigned i = lo; i < hi; i++)
			EXPECT_WC(p, m->cq[i], i, TF_WC_SUCCESS, TF_WC_SEND,
				  &wc);
	}
	tf_test_sync(p);
}

static long count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	long n = 0;

	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n - 3; /* ".", ".." and the one being read */
}

static void open_all(struct tf_pair *p, struct many *m)
{
	tf_cq_params_t cqp = {.field_mask = TF_CQ_PARAM_DEPTH, .depth = 8};
	tf_qp_params_t qpp = {
		.field_mask = TF_QP_PARAM_MAX_SEND_WR | TF_QP_PARAM_MAX_RECV_WR,
		.max_send_wr = 2,
		.max_recv_wr = 2,
	};
	int ret;

	m->cq = calloc(m->n, sizeof(*m->cq));
	m->q = calloc(m->n, sizeof(*m->q));
	CHECK(m->cq && m->q);
	tf_test_buf_alloc(p, p->pd, TF_MEM_MALLOC, (size_t)m->n * MSG,
			  TF_ACCESS_LOCAL_WRITE, &m->buf);
	for (unsigned i = 0; i < m->n; i++) {
		ret = tf_cq_create(p->ctx, &cqp, &m->cq[i]);
		CHECKF(ret == 0,
		       "tf_cq_create of CQ %u of %u: %s (the provider's "
		       "max_qp is %u)",
		       i + 1, m->n, tf_strerror(ret), p->caps.max_qp);
		qpp.send_cq = qpp.recv_cq = m->cq[i];
		tf_test_qp_open(p, &qpp, &m->q[i]);
		if ((i + 1) % BATCH == 0 || i + 1 == m->n) {
			unsigned lo = i - i % BATCH;

			round_range(p, m, lo, i + 1, TF_SIDE_A, 0x100000 + lo);
			round_range(p, m, lo, i + 1, TF_SIDE_B, 0x200000 + lo);
		}
	}
}

/* Side B sleeps in poll() on QP @i's CQ fd, every CQ armed, while A
 * sends on QP @i. */
static void wake_one(struct tf_pair *p, struct many *m, unsigned i)
{
	struct tf_wc wc;

	if (p->side == TF_SIDE_A) {
		tf_test_sync(p); /* B is armed */
		send_one(m, i, 0x7000 + i);
		EXPECT_WC(p, m->cq[i], i, TF_WC_SUCCESS, TF_WC_SEND, &wc);
		tf_test_sync(p);
		return;
	}
	struct pollfd pfd = {.fd = tf_cq_fd(m->cq[i]), .events = POLLIN};
	int n;

	CHECK(pfd.fd >= 0);
	tf_test_post_recv1(m->q[i].qp, i, m->buf.addr + (size_t)i * MSG, MSG,
			   tf_test_buf_lkey(&m->buf));
	for (unsigned k = 0; k < m->n; k++)
		CHECK_OK(tf_cq_arm(m->cq[k]));
	CHECK(tf_cq_poll(m->cq[i], 1, &wc) == 0);
	tf_test_sync(p);
	n = poll(&pfd, 1, tf_test_timeout_ms());
	CHECKF(n == 1 && (pfd.revents & POLLIN),
	       "QP %u of %u: its CQ fd did not become readable while the "
	       "process slept in poll() (poll = %d, revents 0x%x)",
	       i, m->n, n, pfd.revents);
	EXPECT_WC(p, m->cq[i], i, TF_WC_SUCCESS, TF_WC_RECV, &wc);
	CHECK_FILL(m->buf.addr + (size_t)i * MSG, MSG, 0x7000 + i);
	tf_test_sync(p);
}

int main(void)
{
	const char *env = getenv("TF_TEST_QPS");
	unsigned want = 1000, fit;
	struct tf_pair p;
	struct many m = {0};

	tf_test_begin("conf_qp_many");
	if (env) {
		char *end;
		unsigned long v = strtoul(env, &end, 10);

		CHECKF(*env && !*end && v >= 1 && v <= 100000,
		       "TF_TEST_QPS=%s: want 1 to 100000", env);
		want = (unsigned)v;
	}
	/* Before the fork: both sides inherit it. */
	fit = raise_nofile(want);
	tf_test_pair_open(&p);
	tf_test_require_caps(&p, TF_CAP_CQ_FD, "completion fds");
	if (fit < want)
		tf_test_skip("RLIMIT_NOFILE holds %u QPs, not %u", fit, want);
	m.n = want;
	if (p.caps.max_qp < m.n + 8) {
		m.n = p.caps.max_qp > 8 ? p.caps.max_qp - 8 : 1;
		tf_test_info("max_qp is %u: %u QPs", p.caps.max_qp, m.n);
	}
	tf_test_info("%u QPs a side (TF_TEST_QPS %s)", m.n,
		     env ? env : "unset");
	open_all(&p, &m);
	round_range(&p, &m, 0, m.n, TF_SIDE_A, 0x1000);
	round_range(&p, &m, 0, m.n, TF_SIDE_B, 0x4000);
	wake_one(&p, &m, 0);
	wake_one(&p, &m, m.n / 2);
	wake_one(&p, &m, m.n - 1);
	tf_test_info("%u QPs and CQs in one context, each carried a SEND "
		     "both ways; %ld descriptors open",
		     m.n, count_fds());
	tf_test_sync(&p);
	close_all(&m);
	return tf_test_pair_end(&p);
}
