/* SPDX-License-Identifier: MIT */
/*
 * conf_bidir: both sides at once, on two QPs that share one send CQ and
 * one receive CQ.  Each side posts, at the same moment, large RDMA writes
 * into the peer, SENDs the peer receives, and RDMA reads from the peer,
 * and then reaps: nothing may deadlock (a transport that blocks writing
 * while its peer also writes does), every completion names the right QP,
 * each QP's send completions come in posting order, and every byte lands
 * where it should.
 */
#include <string.h>

#include "tf_test.h"

#define NQP 2
#define NW  4 /* writes per QP */
#define WSZ (128 * 1024)
#define NS  4 /* sends per QP */
#define SSZ (64 * 1024)
#define NR  4 /* reads per QP */
#define RSZ (32 * 1024)

static uint32_t seed_of(int side, int kind, int qp, int i)
{
	return (uint32_t)(10000 * side + 1000 * kind + 100 * qp + i);
}

/* Which of the two QPs a completion names; fails if neither. */
static int qp_index(const struct tf_wc *wc, const struct tf_test_qp *q)
{
	for (int j = 0; j < NQP; j++)
		if (wc->qp == q[j].qp)
			return j;
	tf_test_fail(__FILE__, __LINE__, "completion names no QP: %s",
		     tf_test_wc_str(wc));
}

/* The WRs of a QP are posted write, send, read, write, ... (k % 3 == 2:
 * a read). */
static bool is_read(int k)
{
	return k % 3 == 2;
}

/*
 * Send completions of a QP come in posting order: @nsend[j] is the next
 * WR expected.  Under TF_QUIRK_SIW_READ_ORDER reads and the others are
 * each in posting order: @nsend[j] is the next non-read, @nread[j] the
 * next read.
 */
static void check_send(struct tf_pair *p, const struct tf_wc *wc,
		       const struct tf_test_qp *q, int *nsend, int *nread)
{
	static int quirk = -1;
	int j = qp_index(wc, q), k, want;

	CHECKF(wc->status == TF_WC_SUCCESS, "%s", tf_test_wc_str(wc));
	k = (int)(wc->wr_id - (uint64_t)(j * 1000));
	if (quirk < 0)
		quirk = tf_test_quirk(p, TF_QUIRK_SIW_READ_ORDER,
				      "send completion order");
	if (!quirk) {
		want = nsend[j]++;
	} else {
		int *next = is_read(k) ? &nread[j] : &nsend[j];

		while (is_read(*next) != is_read(k))
			(*next)++;
		want = (*next)++;
	}
	CHECKF(k == want, "QP %d: send completion %llu, expected %d (order)", j,
	       (unsigned long long)wc->wr_id, j * 1000 + want);
}

static void check_recv(const struct tf_wc *wc, const struct tf_test_qp *q,
		       int *nrecv)
{
	int j = qp_index(wc, q);

	CHECKF(wc->status == TF_WC_SUCCESS && wc->opcode == TF_WC_RECV &&
		       wc->byte_len == SSZ,
	       "%s", tf_test_wc_str(wc));
	CHECKF(wc->wr_id == (uint64_t)(j * 100 + nrecv[j]),
	       "QP %d: receive %llu, expected %d (order)", j,
	       (unsigned long long)wc->wr_id, j * 100 + nrecv[j]);
	nrecv[j]++;
}

int main(void)
{
	struct tf_test_buf t, s, rbuf, r, l;
	struct tf_test_rbuf prt, prr;
	struct tf_test_qp q[NQP];
	tf_cq_t *scq, *rcq;
	tf_cq_params_t cqp = {.field_mask = TF_CQ_PARAM_DEPTH, .depth = 256};
	tf_qp_params_t qpp = {0};
	struct tf_pair p;
	int me, peer, nsend[NQP] = {0}, nread[NQP] = {0}, nrecv[NQP] = {0};
	int left_s = NQP * (NW + NS + NR), left_r = NQP * NS;

	tf_test_begin("conf_bidir");
	tf_test_pair_open(&p);
	me = p.side == TF_SIDE_A ? 0 : 1;
	peer = 1 - me;
	CHECK_OK(tf_cq_create(p.ctx, &cqp, &scq));
	CHECK_OK(tf_cq_create(p.ctx, &cqp, &rcq));
	qpp.send_cq = scq;
	qpp.recv_cq = rcq;
	for (int j = 0; j < NQP; j++)
		tf_test_qp_open(&p, &qpp, &q[j]);

	/* t: written by the peer; s: sources; rbuf: receives; r: read by
	 * the peer; l: read results. */
	tf_test_buf_alloc(&p, p.pd, TF_MEM_LIB, NQP * NW * WSZ,
			  TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE, &t);
	tf_test_buf_alloc(&p, p.pd, TF_MEM_MALLOC, NQP * (NW * WSZ + NS * SSZ),
			  TF_ACCESS_LOCAL_WRITE, &s);
	tf_test_buf_alloc(&p, p.pd, TF_MEM_MMAP, NQP * NS * SSZ,
			  TF_ACCESS_LOCAL_WRITE, &rbuf);
	tf_test_buf_alloc(&p, p.pd, TF_MEM_MALLOC, NQP * NR * RSZ,
			  TF_ACCESS_REMOTE_READ, &r);
	tf_test_buf_alloc(&p, p.pd, TF_MEM_LIB, NQP * NR * RSZ,
			  TF_ACCESS_LOCAL_WRITE, &l);
	tf_test_send_buf(&p, &t);
	tf_test_send_buf(&p, &r);
	prt = tf_test_recv_rbuf(&p);
	prr = tf_test_recv_rbuf(&p);

	for (int j = 0; j < NQP; j++) {
		for (int i = 0; i < NW; i++)
			tf_test_fill(s.addr + (size_t)(j * NW + i) * WSZ, WSZ,
				     seed_of(me, 0, j, i));
		for (int i = 0; i < NS; i++)
			tf_test_fill(s.addr + (size_t)NQP * NW * WSZ +
					     (size_t)(j * NS + i) * SSZ,
				     SSZ, seed_of(me, 1, j, i));
		for (int i = 0; i < NR; i++)
			tf_test_fill(r.addr + (size_t)(j * NR + i) * RSZ, RSZ,
				     seed_of(me, 2, j, i));
		for (int i = 0; i < NS; i++)
			tf_test_post_recv1(q[j].qp, (uint64_t)(j * 100 + i),
					   rbuf.addr +
						   (size_t)(j * NS + i) * SSZ,
					   SSZ, tf_test_buf_lkey(&rbuf));
	}
	tf_test_sync(&p);

	/* Post everything on both QPs: writes, sends, reads interleaved. */
	for (int j = 0; j < NQP; j++) {
		static struct tf_sge sge[NQP][NW + NS + NR];
		static struct tf_send_wr wr[NQP][NW + NS + NR];
		int n = 0;

		for (int i = 0; i < 4; i++) {
			if (i < NW) {
				sge[j][n] = (struct tf_sge){
					.addr = (uintptr_t)s.addr +
						(size_t)(j * NW + i) * WSZ,
					.length = WSZ,
					.lkey = tf_test_buf_lkey(&s)};
				wr[j][n] = (struct tf_send_wr){
					.opcode = TF_WR_RDMA_WRITE,
					.wr.rdma = {
						.remote_addr =
							prt.addr +
							(uint64_t)(j * NW + i) *
								WSZ,
						.rkey = prt.rkey}};
				n++;
			}
			if (i < NS) {
				sge[j][n] = (struct tf_sge){
					.addr = (uintptr_t)s.addr +
						(size_t)NQP * NW * WSZ +
						(size_t)(j * NS + i) * SSZ,
					.length = SSZ,
					.lkey = tf_test_buf_lkey(&s)};
				wr[j][n] = (struct tf_send_wr){
					.opcode = TF_WR_SEND};
				n++;
			}
			if (i < NR) {
				sge[j][n] = (struct tf_sge){
					.addr = (uintptr_t)l.addr +
						(size_t)(j * NR + i) * RSZ,
					.length = RSZ,
					.lkey = tf_test_buf_lkey(&l)};
				wr[j][n] = (struct tf_send_wr){
					.opcode = TF_WR_RDMA_READ,
					.wr.rdma = {
						.remote_addr =
							prr.addr +
							(uint64_t)(j * NR + i) *
								RSZ,
						.rkey = prr.rkey}};
				n++;
			}
		}
		for (int k = 0; k < n; k++) {
			wr[j][k].wr_id = (uint64_t)(j * 1000 + k);
			wr[j][k].sg_list = &sge[j][k];
			wr[j][k].num_sge = 1;
			wr[j][k].send_flags = TF_SEND_SIGNALED;
			wr[j][k].next = k + 1 < n ? &wr[j][k + 1] : NULL;
		}
		POST_SEND(q[j].qp, wr[j]);
	}

	/* Reap both CQs until everything completed; give up if nothing
	 * completes for a whole timeout (a deadlock). */
	for (int waited = 0; left_s || left_r;) {
		struct tf_wc wc;
		bool got = false;

		if (left_s && tf_cq_poll(scq, 1, &wc) == 1) {
			check_send(&p, &wc, q, nsend, nread);
			left_s--;
			got = true;
		}
		if (left_r && tf_cq_poll(rcq, 1, &wc) == 1) {
			check_recv(&wc, q, nrecv);
			left_r--;
			got = true;
		}
		if (got) {
			waited = 0;
			continue;
		}
		tf_test_progress_for(&p, 1);
		CHECKF(++waited < tf_test_timeout_ms(),
		       "no completion for %d ms: %d send and %d receive "
		       "completions missing",
		       tf_test_timeout_ms(), left_s, left_r);
	}
	tf_test_sync(&p);

	/* Everything the peer wrote, sent and let us read. */
	for (int j = 0; j < NQP; j++) {
		for (int i = 0; i < NW; i++)
			CHECK_FILL(t.addr + (size_t)(j * NW + i) * WSZ, WSZ,
				   seed_of(peer, 0, j, i));
		for (int i = 0; i < NS; i++)
			CHECK_FILL(rbuf.addr + (size_t)(j * NS + i) * SSZ, SSZ,
				   seed_of(peer, 1, j, i));
		for (int i = 0; i < NR; i++)
			CHECK_FILL(l.addr + (size_t)(j * NR + i) * RSZ, RSZ,
				   seed_of(peer, 2, j, i));
	}
	tf_test_sync(&p);
	for (int j = 0; j < NQP; j++)
		tf_test_qp_close(&q[j]);
	CHECK_OK(tf_cq_destroy(scq));
	CHECK_OK(tf_cq_destroy(rcq));
	tf_test_buf_free(&t);
	tf_test_buf_free(&s);
	tf_test_buf_free(&rbuf);
	tf_test_buf_free(&r);
	tf_test_buf_free(&l);
	return tf_test_pair_end(&p);
}
