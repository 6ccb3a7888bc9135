/* SPDX-License-Identifier: MIT */
/*
 * soft_shm_ready: shm progress visits the queue pairs a peer flagged in the
 * context's ready map (or that have work of their own), not every queue
 * pair, and still misses nothing.  Two contexts A and B of this process
 * connect NPAIRS pairs of queue pairs over shm:
 *  - a sender flags its target: after B posts a SEND on one queue pair,
 *    that queue pair's bit is set in A's ready map;
 *  - one busy pair among the idle ones: MSGS SENDs from B to A on it, a
 *    few in flight at a time, all arrive in order with their bytes, and
 *    all complete at B (its acknowledgements are watched without a
 *    doorbell);
 *  - then one SEND each way on every pair: all arrive;
 *  - a hostile peer: every bit of A's ready map set and A's doorbell rung,
 *    again and again, also in the middle of traffic: A's progress takes
 *    the bits, no completion appears that nobody asked for, every queue
 *    pair stays ready to send, and SENDs on the busy pair and on a queue
 *    pair created since (an empty slot, then a reused one) still arrive.
 */
#include <stdlib.h>
#include <string.h>

#include "soft_shm_int.h"
#include "fault_util.h"

#define NPAIRS	 96 /* and one more, created later */
#define BUSY	 57
#define MSGS	 2000
#define WINDOW	 8
#define LEN	 64
#define BUFSZ	 ((NPAIRS + 1) * LEN)
#define BOUND_MS 20000

struct side {
	tf_context_t *ctx;
	tf_pd_t *pd;
	tf_cq_t *cq;
	tf_mr_t *mr;
	tf_qp_t *qp[NPAIRS + 1];
	uint8_t buf[BUFSZ];
};

static void side_open(struct side *s)
{
	ft_shm_side_open(&s->ctx, &s->pd, &s->cq, s->buf, BUFSZ, &s->mr);
}

static void side_close(struct side *s)
{
	for (unsigned i = 0; i <= NPAIRS; i++)
		if (s->qp[i])
			CHECK_OK(tf_qp_destroy(s->qp[i]));
	ft_shm_side_close(s->ctx, s->pd, s->cq, s->mr);
}

static void connect_pair(struct side *a, struct side *b, unsigned i)
{
	tf_qp_params_t qa = {.send_cq = a->cq, .recv_cq = a->cq};
	tf_qp_params_t qb = {.send_cq = b->cq, .recv_cq = b->cq};
	uint8_t ab[TF_QP_ADDR_MAX], bb[TF_QP_ADDR_MAX];
	size_t al = sizeof(ab), bl = sizeof(bb);

	CHECK_OK(tf_qp_create(a->pd, &qa, &a->qp[i]));
	CHECK_OK(tf_qp_create(b->pd, &qb, &b->qp[i]));
	CHECK_OK(tf_qp_get_addr(a->qp[i], ab, &al));
	CHECK_OK(tf_qp_get_addr(b->qp[i], bb, &bl));
	CHECK_OK(tf_qp_connect(a->qp[i], bb, bl));
	CHECK_OK(tf_qp_connect(b->qp[i], ab, al));
}

/* One completion on @s's CQ, making progress on both sides. */
static void wait_wc(struct side *s, struct side *o, struct tf_wc *wc)
{
	ft_shm_wait_wc(s->cq, s->ctx, o->ctx, wc, BOUND_MS);
}

/* A receive on pair @i into buffer slot @slot. */
static void post_recv(struct side *s, unsigned i, unsigned slot, uint64_t id)
{
	struct tf_sge sge = {.addr = (uintptr_t)(s->buf + (size_t)slot * LEN),
			     .length = LEN,
			     .lkey = tf_mr_lkey(s->mr)};
	struct tf_recv_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1};

	CHECK_OK(tf_post_recv(s->qp[i], &wr, NULL));
}

/* A SEND of LEN bytes made from @seed on pair @i, from buffer slot
 * @slot. */
static void post_send(struct side *s, unsigned i, unsigned slot, uint64_t id,
		      uint32_t seed)
{
	uint8_t *at = s->buf + (size_t)slot * LEN;
	struct tf_sge sge = {.addr = (uintptr_t)at,
			     .length = LEN,
			     .lkey = tf_mr_lkey(s->mr)};
	struct tf_send_wr wr = {.wr_id = id,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = TF_WR_SEND,
				.send_flags = TF_SEND_SIGNALED};

	for (unsigned k = 0; k < LEN; k++)
		at[k] = (uint8_t)(seed * 131 + k);
	CHECK_OK(tf_post_send(s->qp[i], &wr, NULL));
}

static void check_bytes(struct side *s, unsigned slot, uint32_t seed)
{
	const uint8_t *at = s->buf + (size_t)slot * LEN;

	for (unsigned k = 0; k < LEN; k++)
		CHECKF(at[k] == (uint8_t)(seed * 131 + k),
		       "message %u: byte %u is %#x", seed, k, at[k]);
}

/* One SEND from @s to @r on pair @i, checked at both ends. */
static void send_one(struct side *s, struct side *r, unsigned i, uint32_t seed)
{
	struct tf_wc wc;

	post_recv(r, i, i, seed);
	post_send(s, i, i, seed, seed);
	wait_wc(s, r, &wc);
	CHECKF(wc.status == TF_WC_SUCCESS && wc.wr_id == seed &&
		       wc.qp == s->qp[i],
	       "pair %u: send %u: %s", i, seed, tf_test_wc_str(&wc));
	wait_wc(r, s, &wc);
	CHECKF(wc.status == TF_WC_SUCCESS && wc.wr_id == seed &&
		       wc.qp == r->qp[i] && wc.byte_len == LEN,
	       "pair %u: recv %u: %s", i, seed, tf_test_wc_str(&wc));
	check_bytes(r, i, seed);
}

/* What a hostile peer can do: flag every queue pair slot of @s's context
 * and ring its doorbell. */
static void flag_all(struct side *s)
{
	struct soft_tpt_ctl *ctl = soft_ctx_of(s->ctx)->tpt_ctl;

	for (unsigned w = 0; w < SOFT_MAX_QP / 64; w++)
		atomic_store(&ctl->ready[w], ~0ull);
	atomic_fetch_add(&ctl->doorbell, 1);
}

/* @s's queue pairs are all still up, and its CQ holds nothing. */
static void check_quiet(struct side *s, const char *when)
{
	struct tf_wc wc;

	for (unsigned i = 0; i <= NPAIRS; i++)
		if (s->qp[i])
			CHECKF(soft_qp_of(s->qp[i])->base.state == TF_QPS_RTS,
			       "%s: pair %u left RTS", when, i);
	CHECKF(tf_cq_poll(s->cq, 1, &wc) == 0, "%s: a completion: %s", when,
	       tf_test_wc_str(&wc));
}

/* The busy pair: @n SENDs from B to A, WINDOW in flight, with a hostile
 * flag_all of A every @hostile messages (0: never). */
static void busy(struct side *a, struct side *b, uint32_t base, uint32_t n,
		 uint32_t hostile)
{
	uint32_t sent = 0, got = 0, done = 0;
	uint64_t end = ft_now_ms() + BOUND_MS;

	while (got < n || done < n) {
		struct tf_wc wc;
		int k;

		/* Buffer slot sent % WINDOW, reused once the message that
		 * had it was checked and completed. */
		if (sent < n && sent - got < WINDOW && sent - done < WINDOW) {
			post_recv(a, BUSY, sent % WINDOW, base + sent);
			post_send(b, BUSY, sent % WINDOW, base + sent,
				  base + sent);
			sent++;
			if (hostile && !(sent % hostile))
				flag_all(a);
		}
		k = tf_cq_poll(a->cq, 1, &wc);
		CHECK(k >= 0);
		if (k) {
			CHECKF(wc.status == TF_WC_SUCCESS &&
				       wc.wr_id == base + got &&
				       wc.qp == a->qp[BUSY] &&
				       wc.byte_len == LEN,
			       "busy recv %u: %s", base + got,
			       tf_test_wc_str(&wc));
			check_bytes(a, got % WINDOW, base + got);
			got++;
		}
		k = tf_cq_poll(b->cq, 1, &wc);
		CHECK(k >= 0);
		if (k) {
			CHECKF(wc.status == TF_WC_SUCCESS &&
				       wc.wr_id == base + done &&
				       wc.qp == b->qp[BUSY],
			       "busy send %u: %s", base + done,
			       tf_test_wc_str(&wc));
			done++;
		}
		tf_context_progress(a->ctx);
		tf_context_progress(b->ctx);
		CHECKF(ft_now_ms() < end,
		       "busy pair: %u sent, %u received, %u done", sent, got,
		       done);
	}
}

int main(void)
{
	struct side *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
	struct soft_tpt_ctl *actl;
	uint32_t qpn, seed = 1;
	struct tf_wc wc;

	tf_test_begin("soft_shm_ready");
	CHECK(a && b);
	side_open(a);
	side_open(b);
	for (unsigned i = 0; i < NPAIRS; i++)
		connect_pair(a, b, i);
	actl = soft_ctx_of(a->ctx)->tpt_ctl;

	/* The sender flags its target's slot before the doorbell. */
	for (unsigned i = 0; i < 4; i++)
		tf_context_progress(a->ctx);
	qpn = tf_qp_num(a->qp[BUSY]);
	post_recv(a, BUSY, BUSY, seed);
	post_send(b, BUSY, BUSY, seed, seed);
	CHECKF(atomic_load(&actl->ready[shm_bit_word(qpn)]) & shm_bit_mask(qpn),
	       "a SEND to qp %#x did not flag it in the peer's ready map", qpn);
	wait_wc(a, b, &wc);
	CHECKF(wc.status == TF_WC_SUCCESS && wc.qp == a->qp[BUSY],
	       "first recv: %s", tf_test_wc_str(&wc));
	check_bytes(a, BUSY, seed);
	wait_wc(b, a, &wc);
	CHECKF(wc.status == TF_WC_SUCCESS && wc.qp == b->qp[BUSY],
	       "first send: %s", tf_test_wc_str(&wc));
	seed++;

	/* One busy pair among idle ones. */
	busy(a, b, seed, MSGS, 0);
	seed += MSGS;

	/* Every pair, both ways. */
	for (unsigned i = 0; i < NPAIRS; i++) {
		send_one(b, a, i, seed++);
		send_one(a, b, i, seed++);
	}

	/* A hostile peer sets every bit: A takes them, nothing happens. */
	for (int r = 0; r < 16; r++) {
		flag_all(a);
		tf_context_progress(a->ctx);
		for (unsigned w = 0; w < SOFT_MAX_QP / 64; w++)
			CHECKF(!atomic_load(&actl->ready[w]),
			       "progress left ready word %u set", w);
		check_quiet(a, "bits set by a peer");
	}
	/* ... also in the middle of traffic. */
	busy(a, b, seed, MSGS / 4, 7);
	seed += MSGS / 4;
	check_quiet(a, "busy pair with bits set by a peer");

	/* A queue pair created since: an empty slot, then a reused one. */
	connect_pair(a, b, NPAIRS);
	flag_all(a);
	send_one(b, a, NPAIRS, seed++);
	send_one(a, b, NPAIRS, seed++);
	CHECK_OK(tf_qp_destroy(a->qp[NPAIRS]));
	CHECK_OK(tf_qp_destroy(b->qp[NPAIRS]));
	a->qp[NPAIRS] = b->qp[NPAIRS] = NULL;
	flag_all(a);
	tf_context_progress(a->ctx);
	check_quiet(a, "bits of a destroyed queue pair");
	connect_pair(a, b, NPAIRS);
	flag_all(a);
	send_one(b, a, NPAIRS, seed++);
	send_one(a, b, NPAIRS, seed++);
	send_one(b, a, BUSY, seed++);
	send_one(a, b, 0, seed++);
	check_quiet(a, "the end");

	side_close(a);
	side_close(b);
	free(a);
	free(b);
	return tf_test_end();
}
