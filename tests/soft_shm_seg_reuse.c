/* SPDX-License-Identifier: MIT */
/*
 * soft_shm_seg_reuse: the soft shm transport reuses the segment of a
 * destroyed queue pair for the next one, and keeps the peer's segments
 * mapped for the next connection to a kept peer
 * (TOLLFREE_SOFT_SHM_SEG_CACHE).  Two contexts A and B of this process
 * connect a pair of queue pairs per round and destroy it:
 *  - from the second round on, the new queue pairs take the old segments
 *    and A's connect uses its kept mapping of B's, and a SEND arrives in
 *    the round's receive buffer;
 *  - the address of the queue pair destroyed the round before (the same
 *    segment and fd, now serving a new queue pair) is refused to a new
 *    queue pair of A, and the live pair is not disturbed;
 *  - once B closes, A lets go of what it kept for B (progress), and after
 *    A closes this process has the fds it had before.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "soft_shm_int.h"
#include "fault_util.h"

#define ROUNDS	 4
#define BUFSZ	 256
#define BOUND_MS 20000

struct side {
	tf_context_t *ctx;
	tf_pd_t *pd;
	tf_cq_t *cq;
	tf_mr_t *mr;
	uint8_t buf[BUFSZ];
};

static void side_open(struct side *s)
{
	ft_shm_side_open(&s->ctx, &s->pd, &s->cq, s->buf, BUFSZ, &s->mr);
}

static void side_close(struct side *s)
{
	ft_shm_side_close(s->ctx, s->pd, s->cq, s->mr);
}

static tf_qp_t *new_qp(struct side *s)
{
	tf_qp_params_t qpp = {.send_cq = s->cq, .recv_cq = s->cq};
	tf_qp_t *qp;

	CHECK_OK(tf_qp_create(s->pd, &qpp, &qp));
	return qp;
}

/* The file of @qp's segment (a memfd: its inode is its own). */
static ino_t seg_ino(tf_qp_t *qp)
{
	struct stat st;

	CHECK(!fstat(soft_qp_of(qp)->shm_seg_fd, &st));
	return st.st_ino;
}

/* One completion on @s's CQ, making progress on both sides. */
static void wait_wc(struct side *s, struct side *o, struct tf_wc *wc)
{
	ft_shm_wait_wc(s->cq, s->ctx, o->ctx, wc, BOUND_MS);
}

/* A SEND of @byte from @qa (side @a) to @qb (side @b), checked. */
static void send_one(struct side *a, tf_qp_t *qa, struct side *b, tf_qp_t *qb,
		     uint8_t byte)
{
	struct tf_sge rs = {.addr = (uintptr_t)b->buf,
			    .length = BUFSZ,
			    .lkey = tf_mr_lkey(b->mr)};
	struct tf_recv_wr rwr = {.wr_id = byte, .sg_list = &rs, .num_sge = 1};
	struct tf_sge ss = {.addr = (uintptr_t)a->buf,
			    .length = 64,
			    .lkey = tf_mr_lkey(a->mr)};
	struct tf_send_wr swr = {.wr_id = byte,
				 .sg_list = &ss,
				 .num_sge = 1,
				 .opcode = TF_WR_SEND,
				 .send_flags = TF_SEND_SIGNALED};
	struct tf_wc wc;

	memset(a->buf, byte, 64);
	memset(b->buf, 0, BUFSZ);
	CHECK_OK(tf_post_recv(qb, &rwr, NULL));
	CHECK_OK(tf_post_send(qa, &swr, NULL));
	wait_wc(a, b, &wc);
	CHECKF(wc.status == TF_WC_SUCCESS && wc.wr_id == byte, "send %#x: %s",
	       byte, tf_test_wc_str(&wc));
	wait_wc(b, a, &wc);
	CHECKF(wc.status == TF_WC_SUCCESS && wc.wr_id == byte &&
		       wc.byte_len == 64,
	       "recv %#x: %s", byte, tf_test_wc_str(&wc));
	for (int i = 0; i < 64; i++)
		CHECKF(b->buf[i] == byte, "recv %#x: byte %d is %#x", byte, i,
		       b->buf[i]);
}

int main(void)
{
	struct side a = {0}, b = {0};
	uint8_t stale[TF_QP_ADDR_MAX];
	size_t stale_len = 0;
	ino_t aino = 0, bino = 0;
	int fds0 = ft_count_fds();
	struct shm_ctx *sc;
	uint64_t end;

	tf_test_begin("soft_shm_seg_reuse");
	setenv("TOLLFREE_SOFT_SHM_SEG_CACHE", "8", 1);
	side_open(&a);
	side_open(&b);
	for (uint32_t round = 0; round < ROUNDS; round++) {
		uint8_t ab[TF_QP_ADDR_MAX], bb[TF_QP_ADDR_MAX];
		size_t al = sizeof(ab), bl = sizeof(bb);
		tf_qp_t *qa = new_qp(&a), *qb = new_qp(&b);
		struct shm_qp *s;

		CHECK_OK(tf_qp_get_addr(qa, ab, &al));
		CHECK_OK(tf_qp_get_addr(qb, bb, &bl));
		CHECK_OK(tf_qp_connect(qa, bb, bl));
		CHECK_OK(tf_qp_connect(qb, ab, al));
		s = soft_qp_of(qa)->tp_priv;
		if (!round) {
			aino = seg_ino(qa);
			bino = seg_ino(qb);
		} else {
			CHECKF(seg_ino(qa) == aino && seg_ino(qb) == bino,
			       "round %u: the segments were not reused", round);
			CHECKF(s->rmap != NULL,
			       "round %u: the peer's segment was mapped anew",
			       round);
		}
		send_one(&a, qa, &b, qb, (uint8_t)(0x10 + round));
		if (stale_len) {
			/* The old address names the same segment (and fd),
			 * now of another queue pair. */
			tf_qp_t *qx = new_qp(&a);
			int r = TOLERATED(tf_qp_connect(qx, stale, stale_len));

			CHECKF(r != 0,
			       "round %u: a queue pair connected to the "
			       "address of a destroyed one",
			       round);
			CHECK_OK(tf_qp_destroy(qx));
			send_one(&a, qa, &b, qb, (uint8_t)(0x40 + round));
			send_one(&b, qb, &a, qa, (uint8_t)(0x80 + round));
		}
		memcpy(stale, bb, bl);
		stale_len = bl;
		CHECK_OK(tf_qp_destroy(qa));
		CHECK_OK(tf_qp_destroy(qb));
	}
	/* B goes: A lets go of it, and of the segments kept for it. */
	side_close(&b);
	sc = soft_ctx_of(a.ctx)->shm_priv;
	end = ft_now_ms() + BOUND_MS;
	while ((sc->peers || sc->n_spare) && ft_now_ms() < end) {
		tf_context_progress(a.ctx);
		usleep(100);
	}
	CHECKF(!sc->peers && !sc->n_spare,
	       "B closed: A still keeps it (%s) or %u segments",
	       sc->peers ? "attached" : "let go", sc->n_spare);
	side_close(&a);
	CHECKF(ft_count_fds() == fds0, "%d fds open, %d before", ft_count_fds(),
	       fds0);
	return tf_test_end();
}
