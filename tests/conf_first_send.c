/* SPDX-License-Identifier: MIT */
/*
 * conf_first_send: both sides send the moment their QPs are connected.
 *
 * On iWARP the connection's responder must not send before the initiator
 * has (RFC 5044, 7.1.2), and siw fails the connection of a responder that
 * does while the initiator still reads the MPA reply; which side is which
 * is the provider's choice, not the application's.  The provider holds
 * the responder's first send until the initiator spoke (verbs_iw.c).  So
 * here both sides connect many fresh QP pairs at once, without a barrier
 * between them, and each posts its SEND on every one without waiting (the
 * post waits for its own connection): every SEND must arrive intact and
 * every completion succeed.
 * On other transports the test is the same and the race does not exist.
 */
#include <string.h>

#include "tf_test.h"

#define NQ     32 /* QP pairs a round */
#define ROUNDS 4
#define MSG    48

static uint32_t seed_of(int side, int round, int i)
{
	return (uint32_t)(0x100000 * (side + 1) + 0x100 * round + i);
}

/* Create @q with its two CQs and its receive posted (the peer's SEND may
 * come as soon as it is connected: iWARP has no receiver-not-ready retry),
 * and send its address to the peer. */
static void make_qp(struct tf_pair *p, struct tf_test_qp *q,
		    struct tf_test_buf *rbuf, int i)
{
	uint8_t blob[TF_QP_ADDR_MAX];
	size_t len = sizeof(blob);

	tf_test_qp_create(p, NULL, q);
	tf_test_post_recv1(q->qp, (uint64_t)i, rbuf->addr + (size_t)i * MSG,
			   MSG, tf_test_buf_lkey(rbuf));
	CHECK_OK(tf_qp_get_addr(q->qp, blob, &len));
	tf_test_send_u64(p, len);
	tf_test_send_msg(p, blob, len);
}

static void one_round(struct tf_pair *p, int round, struct tf_test_buf *sbuf,
		      struct tf_test_buf *rbuf)
{
	static uint8_t peer[NQ][TF_QP_ADDR_MAX];
	uint64_t plen[NQ];
	struct tf_test_qp q[NQ];
	struct tf_wc wc;
	int other = p->side == TF_SIDE_A ? TF_SIDE_B : TF_SIDE_A;

	memset(rbuf->addr, 0, rbuf->len);
	for (int i = 0; i < NQ; i++)
		make_qp(p, &q[i], rbuf, i);
	for (int i = 0; i < NQ; i++) {
		plen[i] = tf_test_recv_u64(p);
		CHECK(plen[i] > 0 && plen[i] <= TF_QP_ADDR_MAX);
		tf_test_recv_msg(p, peer[i], plen[i]);
	}
	/* Every connection of the round at once (rdma_cm: none is
	 * established when tf_qp_connect returns, and the kernel sets them
	 * up together), then each SEND at once: each waits for its own
	 * connection. */
	for (int i = 0; i < NQ; i++)
		CHECK_OK(tf_qp_connect(q[i].qp, peer[i], plen[i]));
	for (int i = 0; i < NQ; i++) {
		uint8_t *src = sbuf->addr + (size_t)i * MSG;
		struct tf_sge sge = {.addr = (uintptr_t)src,
				     .length = MSG,
				     .lkey = tf_test_buf_lkey(sbuf)};
		struct tf_send_wr wr = {.wr_id = 1000 + (uint64_t)i,
					.sg_list = &sge,
					.num_sge = 1,
					.opcode = TF_WR_SEND,
					.send_flags = TF_SEND_SIGNALED};

		tf_test_fill(src, MSG, seed_of(p->side, round, i));
		POST_SEND(q[i].qp, &wr);
	}
	for (int i = 0; i < NQ; i++) {
		EXPECT_WC(p, q[i].scq, 1000 + (uint64_t)i, TF_WC_SUCCESS,
			  TF_WC_SEND, &wc);
		EXPECT_WC(p, q[i].rcq, (uint64_t)i, TF_WC_SUCCESS, TF_WC_RECV,
			  &wc);
		CHECKF(wc.byte_len == MSG,
		       "QP %d of round %d: %u bytes, sent %d", i, round,
		       wc.byte_len, MSG);
		CHECK_FILL(rbuf->addr + (size_t)i * MSG, MSG,
			   seed_of(other, round, i));
	}
	tf_test_sync(p);
	for (int i = 0; i < NQ; i++)
		tf_test_qp_close(&q[i]);
}

int main(void)
{
	struct tf_test_buf sbuf, rbuf;
	struct tf_pair p;

	tf_test_begin("conf_first_send");
	tf_test_pair_open(&p);
	tf_test_buf_alloc(&p, p.pd, TF_MEM_MALLOC, NQ * MSG, 0, &sbuf);
	tf_test_buf_alloc(&p, p.pd, TF_MEM_MALLOC, NQ * MSG,
			  TF_ACCESS_LOCAL_WRITE, &rbuf);
	for (int r = 0; r < ROUNDS; r++)
		one_round(&p, r, &sbuf, &rbuf);
	tf_test_info("%d QP pairs, each side's SEND posted right after "
		     "connecting",
		     NQ * ROUNDS);
	tf_test_sync(&p);
	tf_test_buf_free(&sbuf);
	tf_test_buf_free(&rbuf);
	return tf_test_pair_end(&p);
}
