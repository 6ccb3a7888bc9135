/* SPDX-License-Identifier: MIT */
/*
 * soft_shm_msg.c - transport "shm", messages: the sender appends SEND,
 * SEND_WITH_IMM, SEND_WITH_INV and the immediate of RDMA_WRITE_WITH_IMM to
 * the peer QP's inbound ring and completes them on the receiver's
 * acknowledgement; the receiver validates every record (the peer's word),
 * matches receive WQEs, pulls large payloads with process_vm_readv, and
 * acknowledges or NAKs.  Also the per-QP progress that drives both sides.
 */
#include <errno.h>
#include <string.h>
#include <sys/uio.h>

#include "soft_shm_int.h"

/* Our inbound ring's size, from our own bookkeeping: the segment header is
 * writable by the peer, so its ring_size must not be trusted after we
 * wrote it. */
static uint32_t own_ring_size(const struct soft_qp *qp)
{
	return (uint32_t)(qp->shm_seg_size - SHM_HDR_SIZE);
}

static uint8_t *own_ring(struct soft_qp *qp)
{
	return (uint8_t *)qp->shm_seg + SHM_HDR_SIZE;
}

static uint32_t align_rec(uint64_t n)
{
	return (uint32_t)((n + SHM_REC_ALIGN - 1) &
			  ~(uint64_t)(SHM_REC_ALIGN - 1));
}

/* ------------------------------------------------------------ messages */

/* Append a message for @wqe to the peer's ring; -EAGAIN when full. */
int soft_shm_ring_send(struct soft_qp *qp, struct shm_qp *s,
		       struct soft_swqe *wqe)
{
	uint64_t eager = qp->ctx->base.cfg.soft_shm_eager;
	uint32_t rsize = s->rring_mask + 1;
	bool imm_only = wqe->opcode == TF_WR_RDMA_WRITE_WITH_IMM;
	bool pull;
	uint32_t need, off, contig, nsge = 0;
	uint64_t head, total;
	struct shm_msg *m;

	/* An eager record must fit in half the ring so that wrapping always
	 * makes progress. */
	if (eager > rsize / 2 - SHM_REC_ALIGN)
		eager = rsize / 2 - SHM_REC_ALIGN;
	pull = !imm_only && wqe->total_len > eager;
	if (pull)
		nsge = wqe->inline_data ? 1 : wqe->num_sge;
	need = align_rec(sizeof(*m) + (pull ? nsge * sizeof(struct shm_iov)
				       : imm_only ? 0
						  : wqe->total_len));
	head = atomic_load_explicit(&s->rseg->head, memory_order_acquire);
	off = (uint32_t)(s->tx_tail & s->rring_mask);
	contig = rsize - off;
	total = need > contig ? contig + need : need;
	if (s->tx_tail + total - head > rsize)
		return -EAGAIN;
	if (need > contig) {
		m = (struct shm_msg *)(s->rring + off);
		m->size = contig;
		m->op = SHM_OP_PAD;
		s->tx_tail += contig;
		off = 0;
	}
	m = (struct shm_msg *)(s->rring + off);
	m->size = need;
	m->op = (uint8_t)wqe->opcode;
	m->pull = pull;
	m->nsge = (uint16_t)nsge;
	m->len = wqe->total_len;
	m->imm = wqe->imm_data;
	m->inv_rkey = wqe->invalidate_rkey;
	m->pad = 0;
	m->seq = ++s->tx_seq;
	if (pull) {
		struct shm_iov *iov = (struct shm_iov *)(m + 1);

		if (wqe->inline_data)
			iov[0] = (struct shm_iov){(uintptr_t)wqe->inline_data,
						  wqe->total_len};
		else
			for (uint32_t i = 0; i < nsge; i++)
				iov[i] = (struct shm_iov){wqe->sge[i].addr,
							  wqe->sge[i].length};
	} else if (!imm_only && wqe->total_len) {
		soft_wqe_gather(wqe, 0, m + 1, wqe->total_len);
	}
	s->tx_tail += need;
	wqe->psn = (uint32_t)m->seq;
	atomic_store_explicit(&s->rseg->tail, s->tx_tail, memory_order_release);
	SOFT_WRITE_ONCE(s->n_inflight, s->n_inflight + 1);
	shm_mark_pending(qp->ctx->shm_priv, qp->base.qpn);
	soft_shm_ring_doorbell(qp, s);
	return 0;
}

/* Sender side: acknowledgements and NAKs of our messages.  qp->lock. */
static int tx_progress(struct soft_qp *qp, struct shm_qp *s)
{
	struct shm_seg *rs = s->rseg;
	/* The responder acks or NAKs first and then leaves LIVE: read its
	 * state before its acks and NAKs, so that what came with the state
	 * change is seen and reported rather than a lost connection. */
	bool peer_down = atomic_load_explicit(&rs->state,
					      memory_order_acquire) != SEG_LIVE;
	uint64_t ack = atomic_load_explicit(&rs->ack_seq, memory_order_acquire);
	uint32_t gen;
	int n = 0;

	while (s->acked < ack && s->n_inflight &&
	       qp->base.state == TF_QPS_RTS) {
		struct soft_swqe *wqe = soft_sq_wqe(qp, qp->sq_head);

		s->acked++;
		SOFT_WRITE_ONCE(s->n_inflight, s->n_inflight - 1);
		n++;
		soft_engine_send_done(qp, wqe, TF_WC_SUCCESS);
	}
	if (s->owed_seq)
		soft_shm_owed_check(s);
	if (qp->base.state != TF_QPS_RTS || !s->n_inflight)
		return n;
	gen = atomic_load_explicit(&rs->nak_gen, memory_order_acquire);
	if (gen != s->nak_gen_seen &&
	    atomic_load(&rs->nak_seq) == s->acked + 1) {
		struct soft_swqe *wqe = soft_sq_wqe(qp, qp->sq_head);
		enum tf_wc_status st = atomic_load(&rs->nak_status);

		s->nak_gen_seen = gen;
		n++;
		/* The peer's word: a NAK carries an error, never success, and
		 * only a status this enum knows. */
		if (st == TF_WC_SUCCESS || (unsigned)st > TF_WC_GENERAL_ERR)
			st = TF_WC_REM_OP_ERR;
		if (st != TF_WC_RNR_RETRY_EXC_ERR) {
			soft_engine_send_done(qp, wqe, st);
			return n;
		}
		TF_STAT_ADD(&qp->base, rnr_retries, 1);
		if (qp->base.rnr_retry != 7 &&
		    ++wqe->retries > qp->base.rnr_retry) {
			soft_engine_send_done(qp, wqe, TF_WC_RNR_RETRY_EXC_ERR);
			return n;
		}
		s->rnr_go_pending = gen;
		s->rnr_deadline = tf__now_ns() + SHM_RNR_DELAY_NS;
	}
	if (s->rnr_go_pending && tf__now_ns() >= s->rnr_deadline) {
		atomic_store_explicit(&rs->rnr_go, s->rnr_go_pending,
				      memory_order_release);
		soft_shm_ring_doorbell(qp, s);
		s->rnr_go_pending = 0;
		n++;
	}
	/* A responder moves its QP to error before it writes the NAK that
	 * explains why: give the NAK 2 ms to land before calling the
	 * connection lost. */
	if (peer_down && qp->base.state == TF_QPS_RTS) {
		uint64_t now = tf__now_ns();

		if (!s->peer_down_ns)
			s->peer_down_ns = now;
		if (now - s->peer_down_ns < 2000000)
			return n;
	}
	if (peer_down && qp->base.state == TF_QPS_RTS) {
		/* The responder went to error or away: no ack will come. */
		soft_engine_send_done(qp, soft_sq_wqe(qp, qp->sq_head),
				      TF_WC_RETRY_EXC_ERR);
		n++;
	}
	return n;
}

static void nak(struct soft_qp *qp, struct shm_qp *s, uint64_t seq,
		enum tf_wc_status st)
{
	struct shm_seg *seg = own_seg(qp);

	atomic_store_explicit(&seg->nak_seq, seq, memory_order_relaxed);
	atomic_store_explicit(&seg->nak_status, st, memory_order_relaxed);
	s->my_nak_gen++;
	if (!s->my_nak_gen)
		s->my_nak_gen = 1;
	atomic_store_explicit(&seg->nak_gen, s->my_nak_gen,
			      memory_order_release);
}

/* Deliver a pulled (large) SEND: read the sender's buffers straight into
 * the receive WQE. */
static enum tf_wc_status deliver_pull(struct soft_qp *qp, struct shm_qp *s,
				      const struct shm_msg *m,
				      const struct shm_iov *riov)
{
	struct iovec l[SHM_MAX_PULL_SGE], r[SHM_MAX_PULL_SGE];
	struct soft_rwqe *rwqe = soft_engine_recv_peek(qp);
	unsigned long nl = 0, nr = 0;
	ssize_t n;

	if (!rwqe || m->len > rwqe->total_len)
		return soft_engine_recv_commit(qp, m->op, m->len, m->imm,
					       m->inv_rkey);
	/* The sender's buffers live only as long as its QP: a destroyed
	 * sender means a lost connection, as a dead peer does. */
	if (atomic_load(&s->rseg->state) == SEG_DEAD) {
		soft_engine_qp_error(qp, TF_WC_RETRY_EXC_ERR);
		return TF_WC_WR_FLUSH_ERR;
	}
	for (uint32_t i = 0; i < rwqe->num_sge && nl < SHM_MAX_PULL_SGE; i++)
		if (rwqe->sge[i].length)
			l[nl++] = (struct iovec){
				(void *)(uintptr_t)rwqe->sge[i].addr,
				rwqe->sge[i].length};
	for (uint32_t i = 0; i < m->nsge; i++)
		if (riov[i].len)
			r[nr++] = (struct iovec){
				(void *)(uintptr_t)riov[i].addr, riov[i].len};
	/* A single call moves up to the smaller side; large messages may
	 * need several (the kernel copies at most MAX_RW_COUNT). */
	uint64_t done = 0;

	while (done < m->len) {
		struct iovec lt[SHM_MAX_PULL_SGE], rt[SHM_MAX_PULL_SGE];
		unsigned long a = 0, b = 0;
		uint64_t skip;

		skip = done;
		for (unsigned long i = 0; i < nl; i++) {
			if (skip >= l[i].iov_len) {
				skip -= l[i].iov_len;
				continue;
			}
			lt[a++] = (struct iovec){(char *)l[i].iov_base + skip,
						 l[i].iov_len - skip};
			skip = 0;
		}
		skip = done;
		for (unsigned long i = 0; i < nr; i++) {
			if (skip >= r[i].iov_len) {
				skip -= r[i].iov_len;
				continue;
			}
			rt[b++] = (struct iovec){(char *)r[i].iov_base + skip,
						 r[i].iov_len - skip};
			skip = 0;
		}
		n = process_vm_readv(s->peer->pid, lt, a, rt, b, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			tf_log_error(SOFT_SUBSYS,
				     "shm: pulling a %u-byte message from %d: "
				     "%s",
				     m->len, (int)s->peer->pid,
				     n < 0 ? strerror(errno) : "no progress");
			soft_engine_qp_error(qp, TF_WC_WR_FLUSH_ERR);
			return TF_WC_REM_OP_ERR;
		}
		done += (uint64_t)n;
	}
	return soft_engine_recv_commit(qp, m->op, m->len, m->imm, m->inv_rkey);
}

/* Check a record the peer wrote: every field is the peer's word.  @m is
 * our private copy of the header (the peer could change the ring under
 * us); a pulled message's buffer list is copied into @iov and checked
 * there. */
static bool msg_valid(struct soft_qp *qp, struct shm_qp *s,
		      const struct shm_msg *m, const uint8_t *rec,
		      struct shm_iov *iov, uint64_t avail, uint32_t off)
{
	uint32_t rsize = own_ring_size(qp);
	uint64_t sum = 0;

	if (m->size < sizeof(*m) || m->size % SHM_REC_ALIGN ||
	    m->size > avail || m->size > rsize - off)
		return false;
	if (m->op == SHM_OP_PAD)
		return true;
	if (m->seq != s->rx_seq + 1 || m->len > qp->ctx->base.cfg.soft_max_msg)
		return false;
	switch (m->op) {
	case TF_WR_SEND:
	case TF_WR_SEND_WITH_IMM:
	case TF_WR_SEND_WITH_INV:
		break;
	case TF_WR_RDMA_WRITE_WITH_IMM:
		return !m->pull;
	default:
		return false;
	}
	if (!m->pull)
		return sizeof(*m) + (uint64_t)m->len <= m->size;
	if (m->nsge > SHM_MAX_PULL_SGE ||
	    sizeof(*m) + m->nsge * sizeof(struct shm_iov) > m->size)
		return false;
	memcpy(iov, rec + sizeof(*m), m->nsge * sizeof(struct shm_iov));
	for (uint32_t i = 0; i < m->nsge; i++) {
		if (iov[i].len > m->len)
			return false;
		sum += iov[i].len;
	}
	return sum == m->len;
}

/* Receiver side: consume our inbound ring.  qp->lock. */
static int rx_progress_one(struct soft_qp *qp, struct shm_qp *s);

/*
 * Receiver side, and then a wake-up for a sender asleep on a CQ fd that
 * waits for our acknowledgements: for the completions they produce on its
 * send CQ (woken directly where we can), or for the work they let go out
 * (its segment's tx_wait: the waker, which does not know which CQ the
 * sender sleeps on).  A sender with neither needs no wake-up: a sleeping
 * server that armed only its receive CQs is not woken by the
 * acknowledgement of its answer.
 */
static int rx_progress(struct soft_qp *qp, struct shm_qp *s)
{
	int n = rx_progress_one(qp, s);

	if (!n)
		return n;
	/* Our acknowledgements (release stores) before the sender's flags:
	 * pairs with the sender's "flag, then look at the acks". */
	atomic_thread_fence(memory_order_seq_cst);
	if (!atomic_load_explicit(&s->peer->ctl->armed, memory_order_relaxed))
		return n;
	if (atomic_load_explicit(&s->rseg->tx_wait, memory_order_relaxed) ||
	    soft_shm_wake_cq(qp, s, &s->scq) == SHM_CQ_UNKNOWN)
		soft_shm_wake_peer(s->peer);
	return n;
}

static int rx_progress_one(struct soft_qp *qp, struct shm_qp *s)
{
	struct shm_seg *seg = own_seg(qp);
	uint8_t *ring = own_ring(qp);
	uint32_t mask = own_ring_size(qp) - 1;
	int n = 0;

	if (s->rnr_stalled) {
		if (atomic_load_explicit(&s->rseg->state,
					 memory_order_relaxed) != SEG_LIVE) {
			/* The sender gave up (its QP is in error or gone):
			 * nobody waits for what is left in the ring. */
			s->rnr_stalled = false;
			SOFT_WRITE_ONCE(s->rx_head, atomic_load(&seg->tail));
			atomic_store_explicit(&seg->head, s->rx_head,
					      memory_order_release);
			return 1;
		}
		if (atomic_load_explicit(&seg->rnr_go, memory_order_acquire) !=
		    s->my_nak_gen)
			return 0;
		s->rnr_stalled = false;
	}
	while (qp->base.state == TF_QPS_RTS) {
		uint64_t tail =
			atomic_load_explicit(&seg->tail, memory_order_acquire);
		uint32_t off = (uint32_t)(s->rx_head & mask);
		struct shm_iov iov[SHM_MAX_PULL_SGE];
		struct shm_msg mh, *m = &mh;
		enum tf_wc_status st;

		if (tail == s->rx_head)
			break;
		memcpy(&mh, ring + off, sizeof(mh));
		if (tail - s->rx_head > own_ring_size(qp) ||
		    !msg_valid(qp, s, m, ring + off, iov, tail - s->rx_head,
			       off)) {
			tf_log_error(SOFT_SUBSYS,
				     "qp %#x: malformed message from the peer",
				     qp->base.qpn);
			nak(qp, s, s->rx_seq + 1, TF_WC_REM_INV_REQ_ERR);
			soft_engine_qp_error(qp, TF_WC_WR_FLUSH_ERR);
			return n + 1;
		}
		if (m->op == SHM_OP_PAD) {
			SOFT_WRITE_ONCE(s->rx_head, s->rx_head + m->size);
			atomic_store_explicit(&seg->head, s->rx_head,
					      memory_order_release);
			continue;
		}
		if (m->pull)
			st = deliver_pull(qp, s, m, iov);
		else
			st = soft_engine_recv(qp, m->op,
					      ring + off + sizeof(mh), m->len,
					      m->imm, m->inv_rkey);
		n++;
		if (st == TF_WC_RNR_RETRY_EXC_ERR) {
			/* Leave it at the head; the sender decides. */
			nak(qp, s, m->seq, st);
			s->rnr_stalled = true;
			break;
		}
		s->rx_seq = m->seq;
		SOFT_WRITE_ONCE(s->rx_head, s->rx_head + m->size);
		atomic_store_explicit(&seg->head, s->rx_head,
				      memory_order_release);
		if (st != TF_WC_SUCCESS) {
			nak(qp, s, m->seq, st);
			break;
		}
		atomic_store_explicit(&seg->ack_seq, s->rx_seq,
				      memory_order_release);
	}
	return n;
}

int soft_shm_qp_progress(struct soft_qp *qp, struct shm_qp *s,
			 uint64_t check_pass)
{
	struct shm_seg *seg = own_seg(qp);
	int n = 0;

	if (qp->base.state != TF_QPS_RTS)
		return 0;
	if (atomic_load_explicit(&seg->peer_err, memory_order_relaxed)) {
		/* Our peer failed our TPT check: class C at the responder. */
		atomic_store(&seg->peer_err, 0);
		TF_STAT_ADD(&qp->ctx->base, remote_access_denied, 1);
		soft_engine_qp_error(qp, TF_WC_WR_FLUSH_ERR);
		return 1;
	}
	if (check_pass && soft_shm_peer_dead_pass(s->peer, check_pass)) {
		/* Its segment stays mapped: take the acks and NAKs it wrote
		 * before it exited first, then fail what is left. */
		if (s->n_inflight)
			tx_progress(qp, s);
		tf_log_info(SOFT_SUBSYS, "qp %#x: peer process %d is gone",
			    qp->base.qpn, (int)s->peer->pid);
		if (qp->base.state == TF_QPS_RTS)
			soft_engine_qp_error(qp, TF_WC_RETRY_EXC_ERR);
		return 1;
	}
	if (s->n_inflight)
		n += tx_progress(qp, s);
	if (atomic_load_explicit(&seg->tail, memory_order_relaxed) !=
	    s->rx_head)
		n += rx_progress(qp, s);
	return n;
}
