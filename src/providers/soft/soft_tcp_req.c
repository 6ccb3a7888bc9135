/* SPDX-License-Identifier: MIT */
/*
 * soft_tcp_req.c - the tcp transport's requester: submit gives each send
 * WQE its PSN, request frames go to the send path in PSN order (again from
 * the NAKed one after an RNR back-off), and responses (ACK/NAK, READ data,
 * atomic results) complete the outstanding WQEs in order.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdatomic.h>
#include <sys/uio.h>

#include "soft_tcp_int.h"

/* ---------------------------------------------------------------- requester */

/* PSNs wrap; a precedes b when the forward distance is below 2^31. */
static inline bool psn_before(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) < 0;
}

/* Build and send the request frame of @w.  qp->lock held. */
static int tcp_send_request(struct tcp_conn *c, struct soft_swqe *w)
{
	struct soft_tcp_hdr h = {.psn = w->psn};
	uint8_t hdr[SOFT_TCP_HDR_MAX];
	struct iovec stack_iov[TCP_IOV_STACK], *iov = stack_iov;
	uint32_t niov = 0, i;
	bool payload = false;
	int hl, ret;

	switch (w->opcode) {
	case TF_WR_SEND:
		h.opcode = SOFT_TCP_OP_SEND;
		payload = true;
		break;
	case TF_WR_SEND_WITH_IMM:
		h.opcode = SOFT_TCP_OP_SEND_IMM;
		h.imm = w->imm_data;
		payload = true;
		break;
	case TF_WR_SEND_WITH_INV:
		h.opcode = SOFT_TCP_OP_SEND_INV;
		h.inv_rkey = w->invalidate_rkey;
		payload = true;
		break;
	case TF_WR_RDMA_WRITE:
	case TF_WR_RDMA_WRITE_WITH_IMM:
		h.opcode = w->opcode == TF_WR_RDMA_WRITE
				   ? SOFT_TCP_OP_WRITE
				   : SOFT_TCP_OP_WRITE_IMM;
		h.raddr = w->remote_addr;
		h.rkey = w->rkey;
		if (w->opcode == TF_WR_RDMA_WRITE_WITH_IMM)
			h.imm = w->imm_data;
		payload = true;
		break;
	case TF_WR_RDMA_READ:
		h.opcode = SOFT_TCP_OP_READ_REQ;
		h.raddr = w->remote_addr;
		h.rkey = w->rkey;
		h.length = w->total_len;
		break;
	case TF_WR_ATOMIC_FETCH_ADD:
	case TF_WR_ATOMIC_CMP_SWP:
		h.opcode = w->opcode == TF_WR_ATOMIC_FETCH_ADD
				   ? SOFT_TCP_OP_FETCH_ADD
				   : SOFT_TCP_OP_CMP_SWAP;
		h.raddr = w->remote_addr;
		h.rkey = w->rkey;
		h.compare_add = w->compare_add;
		if (w->opcode == TF_WR_ATOMIC_CMP_SWP)
			h.swap = w->swap;
		break;
	default:
		return -EINVAL;
	}
	if (payload) {
		h.size = w->total_len;
		if (w->inline_data) {
			if (w->total_len) {
				iov[0].iov_base = w->inline_data;
				iov[0].iov_len = w->total_len;
				niov = 1;
			}
		} else {
			if (w->num_sge > TCP_IOV_STACK) {
				iov = tf__malloc(w->num_sge * sizeof(*iov));
				if (!iov)
					return -ENOMEM;
			}
			for (i = 0; i < w->num_sge; i++) {
				if (!w->sge[i].length)
					continue;
				iov[niov].iov_base =
					(void *)(uintptr_t)w->sge[i].addr;
				iov[niov++].iov_len = w->sge[i].length;
			}
		}
	}
	hl = soft_tcp_encode_hdr(&h, hdr);
	ret = soft_tcp_send_frame(c, hdr, hl, niov ? iov : NULL, niov, h.size,
				  true);
	if (iov != stack_iov)
		tf__free(iov);
	return ret;
}

/* Hand every submitted but unsent request to the send path, unless the
 * connection is not up or an RNR back-off is running.  qp->lock held. */
int soft_tcp_push_requests(struct tcp_conn *c)
{
	int ret;

	if (c->state != TCP_UP || c->rnr_due_ns)
		return 0;
	while (c->out_sent < c->out_cnt) {
		struct soft_swqe *w =
			c->out[(c->out_head + c->out_sent) % c->out_size];

		ret = tcp_send_request(c, w);
		if (ret)
			return ret;
		c->out_sent++;
	}
	return 0;
}

int soft_tcp_submit(struct soft_qp *qp, struct soft_swqe *wqe)
{
	struct tcp_conn *c = qp->tp_priv;
	int ret;

	if (!c || c->detach)
		return -ENOTCONN;
	if (c->out_cnt == c->out_size)
		return -EAGAIN;
	wqe->psn = c->next_psn++;
	wqe->retries = 0;
	wqe->t_post_ns = 0;
	if (!c->out_cnt)
		c->last_act_ns = tf__now_ns();
	c->out[(c->out_head + c->out_cnt) % c->out_size] = wqe;
	c->out_cnt++;
	if (c->state == TCP_LOST)
		atomic_store_explicit(&c->tc->kick, true, memory_order_release);
	ret = soft_tcp_push_requests(c);
	if (ret) {
		/* Not handed to the socket: take it back (it was the last
		 * one; earlier ones went out). */
		c->out_cnt--;
		c->next_psn--;
		return ret;
	}
	return 0;
}

static enum tf_wc_status tcp_wc_status(uint8_t st)
{
	switch (st) {
	case SOFT_TCP_ST_OK:
		return TF_WC_SUCCESS;
	case SOFT_TCP_ST_RNR:
		return TF_WC_RNR_RETRY_EXC_ERR;
	case SOFT_TCP_ST_REM_ACCESS:
		return TF_WC_REM_ACCESS_ERR;
	case SOFT_TCP_ST_REM_INV_REQ:
		return TF_WC_REM_INV_REQ_ERR;
	default:
		return TF_WC_REM_OP_ERR;
	}
}

static bool tcp_is_read_like(const struct soft_swqe *w)
{
	return w->opcode == TF_WR_RDMA_READ ||
	       w->opcode == TF_WR_ATOMIC_FETCH_ADD ||
	       w->opcode == TF_WR_ATOMIC_CMP_SWP;
}

/* Pop the oldest outstanding WQE.  qp->lock held. */
static struct soft_swqe *tcp_pop(struct tcp_conn *c)
{
	struct soft_swqe *w = c->out[c->out_head % c->out_size];

	c->out_head++;
	c->out_cnt--;
	if (c->out_sent)
		c->out_sent--;
	return w;
}

/*
 * A response (ACK/NAK, READ_RESP, ATOMIC_RESP) arrived.  Returns 0 to go
 * on, 1 when the QP went to error, -1 for a protocol violation.
 * progress_lock and qp->lock held.
 */
int soft_tcp_response(struct tcp_conn *c, const struct soft_tcp_hdr *h,
		      const uint8_t *payload)
{
	struct soft_qp *qp = c->qp;
	enum tf_wc_status st;
	struct soft_swqe *w;

	/* Everything before this PSN is acknowledged by it: those must be
	 * SENDs and WRITEs, whose only answer is an ACK. */
	while (c->out_cnt && c->out_sent &&
	       psn_before(c->out[c->out_head % c->out_size]->psn, h->psn)) {
		w = c->out[c->out_head % c->out_size];
		if (tcp_is_read_like(w)) {
			tf_log_error(SUB,
				     "qp %u: response %u skips the "
				     "answer to request %u",
				     qp->base.qpn, h->psn, w->psn);
			return -1;
		}
		tcp_pop(c);
		soft_engine_send_done(qp, w, TF_WC_SUCCESS);
		if (tcp_gone(c))
			return 1;
	}
	if (!c->out_cnt || !c->out_sent ||
	    c->out[c->out_head % c->out_size]->psn != h->psn) {
		tf_log_error(SUB,
			     "qp %u: response to psn %u, which is not "
			     "outstanding",
			     qp->base.qpn, h->psn);
		return -1;
	}
	w = c->out[c->out_head % c->out_size];

	if (h->opcode == SOFT_TCP_OP_ACK && h->status == SOFT_TCP_ST_RNR) {
		if (w->opcode != TF_WR_SEND &&
		    w->opcode != TF_WR_SEND_WITH_IMM &&
		    w->opcode != TF_WR_SEND_WITH_INV &&
		    w->opcode != TF_WR_RDMA_WRITE_WITH_IMM) {
			tf_log_error(SUB,
				     "qp %u: RNR NAK for a request that "
				     "consumes no receive",
				     qp->base.qpn);
			return -1;
		}
		if (qp->base.rnr_retry != 7 &&
		    w->retries >= qp->base.rnr_retry) {
			tcp_pop(c);
			soft_engine_send_done(qp, w, TF_WC_RNR_RETRY_EXC_ERR);
			return 1;
		}
		w->retries++;
		TF_STAT_ADD(&qp->base, rnr_retries, 1);
		/* Go back: everything from w on is sent again after the
		 * delay (the responder drops what is still in flight). */
		c->out_sent = 0;
		c->rnr_due_ns = tf__now_ns() + c->rnr_delay_ns;
		if (c->rnr_delay_ns < TCP_RNR_MAX_NS)
			c->rnr_delay_ns *= 2;
		tcp_set_work(c, true);
		return 0;
	}
	c->rnr_delay_ns = TCP_RNR_MIN_NS;

	switch (h->opcode) {
	case SOFT_TCP_OP_ACK:
		if (h->status != SOFT_TCP_ST_OK) {
			tcp_pop(c);
			soft_engine_send_done(qp, w, tcp_wc_status(h->status));
			return 1;
		}
		if (tcp_is_read_like(w)) {
			tf_log_error(SUB, "qp %u: ACK for a READ/atomic",
				     qp->base.qpn);
			return -1;
		}
		st = TF_WC_SUCCESS;
		break;
	case SOFT_TCP_OP_READ_RESP:
		if (w->opcode != TF_WR_RDMA_READ || h->size != w->total_len) {
			tf_log_error(SUB,
				     "qp %u: READ response of %u bytes "
				     "for a %s of %u",
				     qp->base.qpn, h->size,
				     w->opcode == TF_WR_RDMA_READ ? "READ"
								  : "non-READ",
				     w->total_len);
			return -1;
		}
		soft_sge_scatter(w->sge, w->num_sge, 0, payload, h->size);
		st = TF_WC_SUCCESS;
		break;
	case SOFT_TCP_OP_ATOMIC_RESP:
		if (w->opcode != TF_WR_ATOMIC_FETCH_ADD &&
		    w->opcode != TF_WR_ATOMIC_CMP_SWP) {
			tf_log_error(SUB,
				     "qp %u: atomic response for a "
				     "non-atomic",
				     qp->base.qpn);
			return -1;
		}
		{
			uint64_t v = h->orig;

			soft_sge_scatter(w->sge, w->num_sge, 0, &v,
					 w->total_len < 8 ? w->total_len : 8);
		}
		st = TF_WC_SUCCESS;
		break;
	default:
		return -1;
	}
	tcp_pop(c);
	soft_engine_send_done(qp, w, st);
	return tcp_gone(c) ? 1 : 0;
}
