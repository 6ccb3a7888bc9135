/* SPDX-License-Identifier: MIT */
/*
 * verbs_iw.c - iWARP's rule that the initiator speaks first.
 *
 * An iWARP connection runs over TCP.  The initiator sends an MPA request,
 * the responder an MPA reply, and then "MPA Responder mode
 * implementations MUST receive and validate at least one FPDU before
 * sending any FPDUs" (RFC 5044, 7.1.2).  siw (6.1) enforces it on the
 * initiator: when it reads the MPA reply it looks for more bytes behind
 * it, and if the responder's first FPDU is already there it fails the
 * connection (CONNECT_ERROR, -EINVAL, after "peer sent extra data") and
 * resets it; the responder's work then completes flushed.  rdma_cm tells
 * the responder the connection is established as soon as it sent its
 * reply, so a responder that posts at once races the initiator's kernel.
 * Which side is the initiator is rdma_cm's choice (verbs_cm.c), not the
 * application's, so the application cannot order its first message.
 *
 * So every QP of an iWARP device keeps its first receive for the provider:
 * posted at create, before any of the application's, into an 8-byte slot
 * of a registration of its PD.  The initiator, once established, sends
 * its token into the responder's slot before anything else (an
 * unsignaled SEND); the responder's first send waits until its slot holds
 * the token, answers with its own, which takes the initiator's kept
 * receive, and only then posts the application's work.  The provider's
 * WRs carry the generation VERBS_WRID_GEN_PROV, which no QP has, so
 * their completions (the two receives, and anything flushed) are dropped
 * by the poller like a destroyed QP's.  A responder that never sends
 * never answers; the initiator's kept receive then takes nothing, since
 * every SEND of the responder would come after the answer.
 */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "verbs_int.h"

/* Token slots of a PD: pages of 8-byte slots, each registered once. */
#define IW_PAGE	 4096
#define IW_SLOTS ((uint32_t)(IW_PAGE / sizeof(uint64_t)))
/* What the initiator writes; any value but 0. */
#define IW_TOKEN 0x5446495741525031ull /* "TFIWARP1" */
/* The responder's wait: yield this long, then sleep IW_NAP_NS a turn. */
#define IW_SPIN_NS 200000ull
#define IW_NAP_NS  20000l

struct tf_verbs_iw {
	struct tf_verbs_iw *next; /* a PD's pages */
	_Atomic uint64_t *slots;  /* IW_SLOTS, one page */
	struct ibv_mr *mr;
	uint32_t nused;
	uint64_t used[IW_SLOTS / 64]; /* bit per slot */
};

static struct tf_verbs_iw *iw_page_new(struct tf_verbs_pd *pd)
{
	struct tf_verbs_iw *p = tf__calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->slots = mmap(NULL, IW_PAGE, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p->slots == MAP_FAILED) {
		tf__free(p);
		return NULL;
	}
	p->mr = ibv_reg_mr(pd->ibpd, (void *)p->slots, IW_PAGE,
			   IBV_ACCESS_LOCAL_WRITE);
	if (!p->mr) {
		tf_log_error(VERBS_SUBSYS, "iWARP token page: ibv_reg_mr: %m");
		munmap((void *)p->slots, IW_PAGE);
		tf__free(p);
		return NULL;
	}
	return p;
}

/* A free slot of @pd for @qp (qp->iw_page, qp->iw_slot), zeroed. */
static int iw_slot_get(struct tf_verbs_pd *pd, struct tf_verbs_qp *qp)
{
	struct tf_verbs_iw *p;
	int ret = 0;

	pthread_mutex_lock(&pd->iw_lock);
	for (p = pd->iw; p && p->nused == IW_SLOTS; p = p->next)
		;
	if (!p) {
		p = iw_page_new(pd);
		if (!p) {
			ret = -ENOMEM;
			goto out;
		}
		p->next = pd->iw;
		pd->iw = p;
	}
	for (uint32_t w = 0; w < IW_SLOTS / 64; w++) {
		if (p->used[w] == ~0ull)
			continue;
		uint32_t b = (uint32_t)__builtin_ctzll(~p->used[w]);

		p->used[w] |= 1ull << b;
		p->nused++;
		qp->iw_page = p;
		qp->iw_slot = w * 64 + b;
		atomic_store_explicit(&p->slots[qp->iw_slot], 0,
				      memory_order_relaxed);
		break;
	}
out:
	pthread_mutex_unlock(&pd->iw_lock);
	return ret;
}

static uint64_t iw_wrid(bool recv)
{
	return (recv ? VERBS_WRID_RECV : 0) | (uint64_t)VERBS_WRID_GEN_PROV
						      << VERBS_WRID_GEN_SHIFT;
}

static struct ibv_sge iw_sge(const struct tf_verbs_qp *qp)
{
	struct tf_verbs_iw *p = qp->iw_page;

	return (struct ibv_sge){.addr = (uintptr_t)&p->slots[qp->iw_slot],
				.length = sizeof(uint64_t),
				.lkey = p->mr->lkey};
}

int tf_verbs_iw_qp_init(struct tf_verbs_pd *pd, struct tf_verbs_qp *qp)
{
	struct ibv_sge sge;
	struct ibv_recv_wr wr = {.num_sge = 1}, *bad;
	int ret;

	ret = iw_slot_get(pd, qp);
	if (ret)
		return ret;
	sge = iw_sge(qp);
	wr.wr_id = iw_wrid(true);
	wr.sg_list = &sge;
	ret = ibv_post_recv(qp->ibqp, &wr, &bad);
	if (ret) {
		ret = ret < 0 ? ret : -ret;
		tf_log_error(VERBS_SUBSYS, "qp %u: the provider's receive: %s",
			     qp->base.qpn, strerror(-ret));
		tf_verbs_iw_qp_fini(pd, qp);
		return ret;
	}
	return 0;
}

void tf_verbs_iw_qp_fini(struct tf_verbs_pd *pd, struct tf_verbs_qp *qp)
{
	struct tf_verbs_iw *p = qp->iw_page;

	if (!p)
		return;
	pthread_mutex_lock(&pd->iw_lock);
	p->used[qp->iw_slot / 64] &= ~(1ull << (qp->iw_slot % 64));
	p->nused--;
	pthread_mutex_unlock(&pd->iw_lock);
	qp->iw_page = NULL;
}

void tf_verbs_iw_pd_fini(struct tf_verbs_pd *pd)
{
	while (pd->iw) {
		struct tf_verbs_iw *p = pd->iw;

		pd->iw = p->next;
		if (p->nused)
			tf_log_warn(VERBS_SUBSYS,
				    "iWARP token page freed with %u slots in "
				    "use",
				    p->nused);
		if (ibv_dereg_mr(p->mr))
			tf_log_warn(VERBS_SUBSYS,
				    "iWARP token page: ibv_dereg_mr: %m");
		munmap((void *)p->slots, IW_PAGE);
		tf__free(p);
	}
}

/* Our token, from our slot, ahead of anything else on the send queue. */
int tf_verbs_iw_send_token(struct tf_verbs_qp *qp)
{
	struct ibv_sge sge = iw_sge(qp);
	struct ibv_send_wr wr = {.wr_id = iw_wrid(false),
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_SEND},
			   *bad;
	int ret;

	/* The initiator's slot is ours to send from: the answer that
	 * lands there later comes only after this SEND arrived. */
	atomic_store_explicit(&qp->iw_page->slots[qp->iw_slot], IW_TOKEN,
			      memory_order_relaxed);
	ret = ibv_post_send(qp->ibqp, &wr, &bad);
	if (ret) {
		ret = ret < 0 ? ret : -ret;
		tf_log_info(VERBS_SUBSYS, "qp %u: the provider's SEND: %s",
			    qp->base.qpn, strerror(-ret));
	}
	return ret;
}

/*
 * The responder: wait until the initiator's token is in our slot, then
 * answer.  @gone says whether the connection failed meanwhile.
 */
int tf_verbs_iw_wait_token(struct tf_verbs_qp *qp, uint64_t deadline_ms,
			   bool (*gone)(struct tf_verbs_qp *))
{
	_Atomic uint64_t *slot = &qp->iw_page->slots[qp->iw_slot];
	uint64_t t0 = tf__now_ns();

	while (!atomic_load_explicit(slot, memory_order_acquire)) {
		uint64_t t = tf__now_ns();

		if (gone(qp))
			return -ENOTCONN;
		if (t / 1000000 >= deadline_ms) {
			tf_log_info(VERBS_SUBSYS,
				    "qp %u: the initiator's first message did "
				    "not come",
				    qp->base.qpn);
			return -ENOTCONN;
		}
		if (t - t0 < IW_SPIN_NS) {
			sched_yield();
		} else {
			struct timespec ts = {.tv_nsec = IW_NAP_NS};

			nanosleep(&ts, NULL);
		}
	}
	return tf_verbs_iw_send_token(qp);
}
