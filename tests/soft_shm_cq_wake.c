/* SPDX-License-Identifier: MIT */
/*
 * soft_shm_cq_wake: a shm peer wakes a thread asleep on an armed CQ's fd
 * itself (soft_tpt_ctl.cq_wake), and wakes a sender for its
 * acknowledgements only when it waits for them.  Two processes, one
 * connected QP pair (separate send and receive CQs); each round, one side
 * arms a CQ and sleeps in poll(2) on its fd, the other acts once it is
 * asleep:
 *
 *   recv   B sleeps on its receive CQ; A's SEND wakes it directly (A's
 *          cq_wakes_direct counts it; up to 5 tries, see round_repeated).
 *   send   A sleeps on its send CQ after a signaled SEND; B's
 *          acknowledgement wakes it directly (B counts it; as many
 *          tries).
 *   fence  A posts a SEND and a fenced SEND, which waits in A's send queue
 *          for the first one's acknowledgement, and sleeps on its receive
 *          CQ for B's answer, which B sends once both arrived: B's
 *          acknowledgement must wake A (through A's waker thread: A's
 *          segment says that work waits), or neither side ever goes on.
 *   owed   B sleeps on a CQ that nothing completes, its receive CQ not
 *          armed; A's SEND wakes nobody, and A owes B's waker a wake-up
 *          for its acknowledgement: A pays it when it sleeps on its send
 *          CQ (owed-sleep), or when it polls and the acknowledgement is
 *          late (owed-spin); else A would wait for as long as B sleeps.
 *   noslot B takes every CQ slot with idle CQs, then a new QP pair: B's
 *          new CQs have none, and A's SEND still wakes B (through B's
 *          waker thread), with no direct wake-up counted.
 *
 * A lost wake-up shows as a side that never wakes: the test fails on its
 * poll timeout.
 */
#include <poll.h>
#include <time.h>
#include <stdlib.h>
#include <unistd.h>

#include "tf_test.h"

#define LEN	   64
#define SLOTS	   512 /* SOFT_CQ_WAKE_SLOTS */
#define ASLEEP_US  20000
#define WRID_SEND1 1
#define WRID_SEND2 2
#define WRID_RECV  10

static uint8_t buf[4 * LEN];
static tf_mr_t *mr;

static uint64_t direct_wakes(struct tf_pair *p)
{
	tf_context_stats_t st;

	CHECK_OK(tf_context_query_stats(p->ctx, &st));
	return st.cq_wakes_direct;
}

static uint64_t owed_paid(struct tf_pair *p)
{
	tf_context_stats_t st;

	CHECK_OK(tf_context_query_stats(p->ctx, &st));
	return st.wakes_owed_paid;
}

static void post_recv(tf_qp_t *qp, uint64_t wr_id)
{
	struct tf_sge sge = {.addr = (uintptr_t)buf + 2 * LEN,
			     .length = LEN,
			     .lkey = tf_mr_lkey(mr)};
	struct tf_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1};

	CHECK_OK(tf_post_recv(qp, &wr, NULL));
}

static void post_send(tf_qp_t *qp, uint64_t wr_id, unsigned flags)
{
	struct tf_sge sge = {
		.addr = (uintptr_t)buf, .length = LEN, .lkey = tf_mr_lkey(mr)};
	struct tf_send_wr wr = {.wr_id = wr_id,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = TF_WR_SEND,
				.send_flags = TF_SEND_SIGNALED | flags};

	CHECK_OK(tf_post_send(qp, &wr, NULL));
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Arm @cq, look once more, then sleep on its fd, in one poll(2) that
 * nothing else ends, until a completion of @wr_id comes (others are
 * dropped); fails when the test timeout passes asleep. */
static void sleep_for(tf_cq_t *cq, uint64_t wr_id)
{
	int64_t end = now_ms() + 4 * (int64_t)tf_test_timeout_ms();
	struct pollfd pfd = {.fd = tf_cq_fd(cq), .events = POLLIN};
	struct tf_wc wc;

	CHECK(pfd.fd >= 0);
	for (;;) {
		int n;

		CHECK_OK(tf_cq_arm(cq));
		n = tf_cq_poll(cq, 1, &wc);
		CHECK(n >= 0);
		if (n == 0) {
			int64_t left = end - now_ms();

			CHECKF(left > 0 && poll(&pfd, 1, (int)left) == 1,
			       "no completion of wr_id %llu: asleep for "
			       "good",
			       (unsigned long long)wr_id);
			n = tf_cq_poll(cq, 1, &wc);
			CHECK(n >= 0);
		}
		if (n == 1) {
			CHECKF(wc.status == TF_WC_SUCCESS, "wr_id %llu: %s",
			       (unsigned long long)wc.wr_id,
			       tf_wc_status_str(wc.status));
			if (wc.wr_id == wr_id)
				return;
		}
	}
}

/* Spin on @cq until a completion of @wr_id. */
static void spin_for(tf_cq_t *cq, uint64_t wr_id)
{
	int64_t end = 4 * (int64_t)tf_test_timeout_ms() * 1000;
	struct tf_wc wc;

	for (int64_t t = 0;; t += 10) {
		int n = tf_cq_poll(cq, 1, &wc);

		CHECK(n >= 0);
		if (n == 1) {
			CHECK(wc.status == TF_WC_SUCCESS);
			if (wc.wr_id == wr_id)
				return;
		}
		CHECKF(t < end, "no completion of wr_id %llu",
		       (unsigned long long)wr_id);
		usleep(10);
	}
}

/*
 * B sleeps on its receive CQ; A sends once B said it is about to sleep
 * and a little more.  Returns, on A, whether A woke B directly.
 */
static bool round_recv(struct tf_pair *p)
{
	uint64_t w0 = direct_wakes(p);
	bool direct = false;

	if (p->side == TF_SIDE_B) {
		post_recv(p->q.qp, WRID_RECV);
		tf_test_send_u64(p, 1); /* about to sleep */
		sleep_for(p->q.rcq, WRID_RECV);
	} else {
		(void)tf_test_recv_u64(p);
		usleep(ASLEEP_US);
		post_send(p->q.qp, WRID_SEND1, 0);
		spin_for(p->q.scq, WRID_SEND1);
		direct = direct_wakes(p) > w0;
	}
	tf_test_sync(p);
	return direct;
}

/* A sleeps on its send CQ after a SEND; B takes it once A said it is
 * about to sleep and a little more.  Returns, on B, whether B's
 * acknowledgement woke A directly. */
static bool round_send(struct tf_pair *p)
{
	uint64_t w0 = direct_wakes(p);
	bool direct = false;

	if (p->side == TF_SIDE_B) {
		post_recv(p->q.qp, WRID_RECV);
		tf_test_sync(p);
		(void)tf_test_recv_u64(p);
		usleep(ASLEEP_US);
		spin_for(p->q.rcq, WRID_RECV);
		direct = direct_wakes(p) > w0;
	} else {
		tf_test_sync(p);
		post_send(p->q.qp, WRID_SEND1, 0);
		tf_test_send_u64(p, 1); /* about to sleep */
		sleep_for(p->q.scq, WRID_SEND1);
	}
	tf_test_sync(p);
	return direct;
}

/*
 * B arms @other (a CQ of no QP) and sleeps on its fd and on the test's
 * socket; A's SEND lands on B's receive CQ, not armed.  A waits for its
 * completion asleep (@sleep) or polling, and then wakes B through the
 * socket: nothing of the provider's does, so A's completion can only come
 * from the wake-up A owes B's waker.  B then finds the message.
 */
static void round_owed(struct tf_pair *p, tf_cq_t *other, bool sleep)
{
	if (p->side == TF_SIDE_B) {
		struct pollfd pfd[2] = {
			{.fd = tf_cq_fd(other), .events = POLLIN},
			{.fd = p->sock, .events = POLLIN}};

		post_recv(p->q.qp, WRID_RECV);
		CHECK_OK(tf_cq_arm(other));
		tf_test_send_u64(p, 1); /* about to sleep */
		CHECK(poll(pfd, 2, -1) == 1 && pfd[1].revents);
		(void)tf_test_recv_u64(p);
		spin_for(p->q.rcq, WRID_RECV);
	} else {
		uint64_t paid0 = owed_paid(p);

		(void)tf_test_recv_u64(p);
		usleep(ASLEEP_US);
		post_send(p->q.qp, WRID_SEND1, 0);
		if (sleep)
			sleep_for(p->q.scq, WRID_SEND1);
		else
			spin_for(p->q.scq, WRID_SEND1);
		CHECKF(owed_paid(p) > paid0, "owed-%s: no wake-up paid",
		       sleep ? "sleep" : "spin");
		tf_test_send_u64(p, 1); /* done: wake up */
	}
	tf_test_sync(p);
}

/*
 * @round until the side @judge sees a direct wake-up, at most 5 times:
 * on a loaded machine the sleeper may not be asleep yet when the other
 * side acts (then the completion is found by the arm's second look, and
 * there is nothing to wake).  A direct path that never works fails all 5.
 */
static void round_repeated(struct tf_pair *p, bool (*round)(struct tf_pair *),
			   enum tf_test_side judge, const char *what)
{
	for (int i = 0;; i++) {
		bool direct = round(p);
		uint64_t again;

		if (p->side == judge) {
			CHECKF(direct || i < 4,
			       "%s: no direct wake-up in %d "
			       "rounds",
			       what, i + 1);
			tf_test_send_u64(p, !direct);
			if (direct)
				return;
		} else {
			again = tf_test_recv_u64(p);
			if (!again)
				return;
		}
	}
}

int main(void)
{
	struct tf_pair p;
	tf_cq_t *filler[SLOTS] = {NULL};

	setenv("TOLLFREE_PROVIDER", "soft", 1);
	setenv("TOLLFREE_SOFT_TRANSPORT", "shm", 1);
	tf_test_begin("soft_shm_cq_wake");
	tf_test_pair_open(&p);
	if (tf_test_peer_mode())
		tf_test_skip("two processes on one host only");
	CHECK_OK(tf_mr_reg(p.pd, buf, sizeof(buf), TF_ACCESS_LOCAL_WRITE, &mr));
	tf_test_qp_open(&p, NULL, &p.q);

	/* recv */
	round_repeated(&p, round_recv, TF_SIDE_A, "recv");

	/* send */
	round_repeated(&p, round_send, TF_SIDE_B, "send");

	/* fence */
	if (p.side == TF_SIDE_B) {
		post_recv(p.q.qp, WRID_RECV);
		post_recv(p.q.qp, WRID_RECV + 1);
		tf_test_sync(&p);
		(void)tf_test_recv_u64(&p); /* posted */
		usleep(ASLEEP_US);
		spin_for(p.q.rcq, WRID_RECV + 1);
		post_send(p.q.qp, WRID_SEND1, 0);
		spin_for(p.q.scq, WRID_SEND1);
	} else {
		post_recv(p.q.qp, WRID_RECV);
		tf_test_sync(&p);
		post_send(p.q.qp, WRID_SEND1, 0);
		post_send(p.q.qp, WRID_SEND2, TF_SEND_FENCE);
		tf_test_send_u64(&p, 1);
		sleep_for(p.q.rcq, WRID_RECV);
		spin_for(p.q.scq, WRID_SEND2);
	}
	tf_test_sync(&p);

	/* owed */
	if (p.side == TF_SIDE_B) {
		tf_cq_params_t cp = {.field_mask = TF_CQ_PARAM_DEPTH,
				     .depth = 4};
		tf_cq_t *other;

		CHECK_OK(tf_cq_create(p.ctx, &cp, &other));
		round_owed(&p, other, true);
		round_owed(&p, other, false);
		CHECK_OK(tf_cq_destroy(other));
	} else {
		round_owed(&p, NULL, true);
		round_owed(&p, NULL, false);
	}

	/* noslot */
	tf_test_qp_close(&p.q);
	if (p.side == TF_SIDE_B) {
		tf_cq_params_t cp = {.field_mask = TF_CQ_PARAM_DEPTH,
				     .depth = 4};

		for (int i = 0; i < SLOTS; i++)
			CHECK_OK(tf_cq_create(p.ctx, &cp, &filler[i]));
	}
	tf_test_qp_open(&p, NULL, &p.q);
	if (round_recv(&p))
		CHECKF(false, "noslot: a direct wake-up without a slot");
	if (p.side == TF_SIDE_B)
		for (int i = 0; i < SLOTS; i++)
			CHECK_OK(tf_cq_destroy(filler[i]));
	tf_test_qp_close(&p.q);
	CHECK_OK(tf_mr_dereg(mr));
	return tf_test_pair_end(&p);
}
