/* SPDX-License-Identifier: MIT */
/*
 * soft_tcp_resp.c - the tcp transport's responder: executes each request at
 * the target (SEND into a receive, WRITE, READ, atomics) once its frame is
 * completely buffered, in PSN order, and answers with an ACK (coalesced),
 * a READ or atomic response, or a NAK.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <string.h>
#include <sys/uio.h>

#include "soft_tcp_int.h"

/* ---------------------------------------------------------------- responder */

static uint8_t tcp_wire_status(enum tf_wc_status st)
{
	switch (st) {
	case TF_WC_RNR_RETRY_EXC_ERR:
		return SOFT_TCP_ST_RNR;
	case TF_WC_REM_ACCESS_ERR:
		return SOFT_TCP_ST_REM_ACCESS;
	case TF_WC_REM_INV_REQ_ERR:
		return SOFT_TCP_ST_REM_INV_REQ;
	default:
		return SOFT_TCP_ST_REM_OP;
	}
}

/*
 * NAK request @psn with @st and leave the QP in error (the check functions
 * of the engine already moved it there for access and length errors; this
 * makes sure of it for the others).  Returns 1: stop reading this stream.
 */
static int tcp_nak_fatal(struct tcp_conn *c, uint32_t psn, enum tf_wc_status st)
{
	struct soft_qp *qp = c->qp;

	soft_tcp_send_ack(c, psn, tcp_wire_status(st));
	if (qp) {
		soft_engine_qp_error(qp, TF_WC_WR_FLUSH_ERR);
		if (c->qp)
			soft_tcp_detach(c);
	}
	return 1;
}

static enum tf_wr_opcode tcp_recv_op(unsigned op)
{
	switch (op) {
	case SOFT_TCP_OP_SEND_IMM:
		return TF_WR_SEND_WITH_IMM;
	case SOFT_TCP_OP_SEND_INV:
		return TF_WR_SEND_WITH_INV;
	case SOFT_TCP_OP_WRITE_IMM:
		return TF_WR_RDMA_WRITE_WITH_IMM;
	default:
		return TF_WR_SEND;
	}
}

/*
 * Execute one request at the target.  Returns 0 to go on with the stream,
 * 1 to stop (the QP went to error, or we wait for an RNR re-send is not a
 * reason: dropped frames return 0), -1 for a protocol violation.
 * progress_lock and qp->lock held.
 */
/*
 * Place a WRITE's payload in this side's memory: the NIC's DMA.  It is not
 * ordered with the application's own accesses to that memory (an
 * application may poll a byte the peer writes, as on any RDMA device);
 * what orders them is the completion.  Out of line and named, so that the
 * ThreadSanitizer stage can tell this copy from the provider's own state
 * (scripts/tsan.supp).
 */
__attribute__((noinline)) static void soft_tcp_place(void *dst, const void *src,
						     size_t n)
{
	memcpy(dst, src, n);
	/* Not a tail call: the frame stays in the sanitizer's stack. */
	__asm__ volatile("" ::: "memory");
}

int soft_tcp_serve(struct tcp_conn *c, const struct soft_tcp_hdr *h,
		   const uint8_t *payload)
{
	struct soft_qp *qp = c->qp;
	struct soft_ctx *ctx = qp->ctx;
	enum tf_wc_status st;
	void *local = NULL;

	if (h->psn != c->expect_psn) {
		/* After an RNR NAK everything up to the re-sent PSN was
		 * already in flight: drop it, the requester sends it again. */
		if (c->resp_drop)
			return 0;
		tf_log_error(SUB, "qp %u: request psn %u, expected %u",
			     qp->base.qpn, h->psn, c->expect_psn);
		return -1;
	}
	c->resp_drop = false;

	switch (h->opcode) {
	case SOFT_TCP_OP_WRITE:
	case SOFT_TCP_OP_WRITE_IMM:
		/* Zero-length writes check no key, as in verbs. */
		if (h->size) {
			st = soft_tpt_check_local(
				ctx, qp, h->rkey, h->raddr, h->size,
				TF_ACCESS_REMOTE_WRITE, &local);
			if (st != TF_WC_SUCCESS)
				return tcp_nak_fatal(c, h->psn, st);
		}
		if (h->opcode == SOFT_TCP_OP_WRITE_IMM &&
		    !soft_engine_recv_peek(qp)) {
			/* Nothing is placed until a receive is there: the
			 * whole request is retried. */
			if (h->size)
				soft_tpt_access_done(ctx);
			goto rnr;
		}
		/* The frame is complete in the buffer, so the check and the
		 * copy happen in one go: a revocation waits at most for
		 * this memcpy, never for the peer. */
		if (h->size) {
			soft_tcp_place(local, payload, h->size);
			soft_tpt_access_done(ctx);
		}
		if (h->opcode == SOFT_TCP_OP_WRITE_IMM) {
			st = soft_engine_recv(qp, TF_WR_RDMA_WRITE_WITH_IMM,
					      NULL, h->size, h->imm, 0);
			if (st == TF_WC_RNR_RETRY_EXC_ERR)
				goto rnr;
			if (st != TF_WC_SUCCESS)
				return tcp_nak_fatal(c, h->psn, st);
		}
		break;
	case SOFT_TCP_OP_SEND:
	case SOFT_TCP_OP_SEND_IMM:
	case SOFT_TCP_OP_SEND_INV:
		st = soft_engine_recv(qp, tcp_recv_op(h->opcode), payload,
				      h->size, h->imm, h->inv_rkey);
		if (st == TF_WC_RNR_RETRY_EXC_ERR)
			goto rnr;
		if (st != TF_WC_SUCCESS)
			return tcp_nak_fatal(c, h->psn, st);
		break;
	case SOFT_TCP_OP_READ_REQ: {
		struct soft_tcp_hdr r = {.opcode = SOFT_TCP_OP_READ_RESP,
					 .psn = h->psn,
					 .size = h->length};
		uint8_t hdr[SOFT_TCP_HDR_MAX];
		struct iovec v;
		int hl;

		if (h->length) {
			st = soft_tpt_check_local(
				ctx, qp, h->rkey, h->raddr, h->length,
				TF_ACCESS_REMOTE_READ, &local);
			if (st != TF_WC_SUCCESS)
				return tcp_nak_fatal(c, h->psn, st);
		}
		v.iov_base = local;
		v.iov_len = h->length;
		hl = soft_tcp_encode_hdr(&r, hdr);
		c->expect_psn++;
		c->ack_pending = false;
		/* Sent from the region, or copied into the send queue: the
		 * access is over when this returns. */
		st = soft_tcp_send_frame(c, hdr, hl, &v, h->length ? 1 : 0,
					 h->length, false)
			     ? TF_WC_REM_OP_ERR
			     : TF_WC_SUCCESS;
		if (h->length)
			soft_tpt_access_done(ctx);
		if (st != TF_WC_SUCCESS)
			return tcp_nak_fatal(c, h->psn, st);
		return 0;
	}
	case SOFT_TCP_OP_FETCH_ADD:
	case SOFT_TCP_OP_CMP_SWAP: {
		struct soft_tcp_hdr r = {.opcode = SOFT_TCP_OP_ATOMIC_RESP,
					 .psn = h->psn};

		if (h->raddr & 7)
			return tcp_nak_fatal(c, h->psn, TF_WC_REM_INV_REQ_ERR);
		st = soft_tpt_check_local(ctx, qp, h->rkey, h->raddr, 8,
					  TF_ACCESS_REMOTE_ATOMIC, &local);
		if (st != TF_WC_SUCCESS)
			return tcp_nak_fatal(c, h->psn, st);
		r.orig = soft_atomic_exec(ctx, local,
					  h->opcode == SOFT_TCP_OP_FETCH_ADD
						  ? TF_WR_ATOMIC_FETCH_ADD
						  : TF_WR_ATOMIC_CMP_SWP,
					  h->compare_add, h->swap);
		soft_tpt_access_done(ctx);
		c->expect_psn++;
		c->ack_pending = false;
		if (soft_tcp_send_simple(c, &r))
			return tcp_nak_fatal(c, h->psn, TF_WC_REM_OP_ERR);
		return 0;
	}
	default:
		return -1;
	}
	/* WRITE and SEND: acknowledged in a batch when the stream has been
	 * read (every response acknowledges the earlier requests too). */
	c->expect_psn++;
	c->ack_pending = true;
	c->ack_psn = h->psn;
	return 0;

rnr:
	c->resp_drop = true;
	soft_tcp_send_ack(c, h->psn, SOFT_TCP_ST_RNR);
	return 0;
}
