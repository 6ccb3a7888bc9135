/* SPDX-License-Identifier: MIT */
/*
 * soft_shm_rma.c - transport "shm", one-sided operations: the initiator
 * checks the target context's TPT (mapped read-only) and copies, with
 * plain loads and stores into the peer's tf_mem_alloc memory mapped here,
 * or with process_vm_readv/writev.  The target CPU does nothing.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/uio.h>

#include "soft_shm_int.h"

/* Copy between local SGEs (or inline data) and the peer's memory with
 * process_vm_readv/writev. */
static bool vm_copy(pid_t pid, const struct soft_swqe *wqe, void *local,
		    uint64_t raddr, uint64_t len, bool write)
{
	struct iovec liov[SHM_MAX_PULL_SGE + 1], riov;
	unsigned long nl = 0;
	uint64_t done = 0;

	if (local) {
		liov[nl++] = (struct iovec){local, len};
	} else if (wqe->inline_data) {
		liov[nl++] = (struct iovec){wqe->inline_data, len};
	} else {
		for (uint32_t i = 0; i < wqe->num_sge && nl < SHM_MAX_PULL_SGE;
		     i++)
			if (wqe->sge[i].length)
				liov[nl++] = (struct iovec){
					(void *)(uintptr_t)wqe->sge[i].addr,
					wqe->sge[i].length};
	}
	while (done < len) {
		ssize_t n;
		struct iovec *lv = liov;
		unsigned long ln = nl;
		uint64_t skip = done;

		/* Skip what was already copied (partial transfers). */
		while (ln && skip >= lv->iov_len) {
			skip -= lv->iov_len;
			lv++;
			ln--;
		}
		if (!ln)
			return false;
		struct iovec first = {(char *)lv->iov_base + skip,
				      lv->iov_len - skip};
		struct iovec tmp[SHM_MAX_PULL_SGE + 1];

		tmp[0] = first;
		for (unsigned long i = 1; i < ln; i++)
			tmp[i] = lv[i];
		riov = (struct iovec){(void *)(uintptr_t)(raddr + done),
				      len - done};
		n = write ? process_vm_writev(pid, tmp, ln, &riov, 1, 0)
			  : process_vm_readv(pid, tmp, ln, &riov, 1, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			tf_log_error(SOFT_SUBSYS, "shm: process_vm_%s(%d): %s",
				     write ? "writev" : "readv", (int)pid,
				     n < 0 ? strerror(errno) : "no progress");
			return false;
		}
		done += (uint64_t)n;
	}
	return true;
}

/* Rights an opcode needs at the target. */
static inline unsigned rma_access(enum tf_wr_opcode op)
{
	switch (op) {
	case TF_WR_RDMA_READ:
		return TF_ACCESS_REMOTE_READ;
	case TF_WR_ATOMIC_FETCH_ADD:
	case TF_WR_ATOMIC_CMP_SWP:
		return TF_ACCESS_REMOTE_ATOMIC;
	default:
		return TF_ACCESS_REMOTE_WRITE;
	}
}

/* The target failed our check of its TPT: tell it (its QP goes to error,
 * class C at the responder) and fail the WQE. */
static __attribute__((noinline, cold)) enum tf_wc_status
rma_denied(struct soft_qp *qp, struct shm_qp *s, const struct soft_swqe *wqe)
{
	tf_log_debug(SOFT_SUBSYS,
		     "qp %#x: remote access denied by peer TPT (rkey %#x addr "
		     "%#llx len %u)",
		     qp->base.qpn, wqe->rkey,
		     (unsigned long long)wqe->remote_addr, wqe->total_len);
	atomic_store_explicit(&s->rseg->peer_err, 1, memory_order_release);
	soft_shm_ring_doorbell(qp, s);
	return TF_WC_REM_ACCESS_ERR;
}

/* An atomic on 8 bytes of the peer's memory, at @tgt when mapped here,
 * else through process_vm_*, serialized with every other atomic on that
 * context's memory (its robust, process-shared atomic_lock). */
static enum tf_wc_status rma_atomic(struct shm_peer *p, struct soft_swqe *wqe,
				    uint8_t *tgt)
{
	pthread_mutex_t *m = &p->ctl->atomic_lock;
	uint64_t orig = 0, nv, addr = wqe->remote_addr;
	bool ok = true;

	if (pthread_mutex_lock(m) == EOWNERDEAD)
		pthread_mutex_consistent(m);
	if (tgt)
		orig = *(volatile uint64_t *)tgt;
	else
		ok = vm_copy(p->pid, wqe, &orig, addr, 8, false);
	nv = wqe->opcode == TF_WR_ATOMIC_FETCH_ADD
		     ? orig + wqe->compare_add
		     : (orig == wqe->compare_add ? wqe->swap : orig);
	if (ok && nv != orig) {
		if (tgt)
			*(volatile uint64_t *)tgt = nv;
		else
			ok = vm_copy(p->pid, wqe, &nv, addr, 8, true);
	}
	pthread_mutex_unlock(m);
	if (!ok)
		return TF_WC_REM_OP_ERR;
	soft_sge_scatter(wqe->sge, wqe->num_sge, 0, &orig, 8);
	return TF_WC_SUCCESS;
}

/*
 * Everything but a WRITE or READ through a mapping already cached: map the
 * peer's tf_mem_alloc region on first use, execute atomics, and copy with
 * process_vm_readv/writev when the memory is not shared (malloc, mmap) or
 * cannot be mapped.  Called with the access published (active) and
 * allowed by @snap.
 */
static __attribute__((noinline, cold)) enum tf_wc_status
rma_slow(struct shm_qp *s, struct soft_swqe *wqe,
	 const struct soft_tpt_entry *snap)
{
	struct shm_peer *p = s->peer;
	uint64_t len = wqe->total_len, addr = wqe->remote_addr;
	uint8_t *tgt = NULL;

	if (snap->shmem_idx >= 0) {
		uint64_t msize = 0, off = addr - snap->addr;

		tgt = soft_shm_peer_map(p, snap->shmem_idx, snap->shmem_gen,
					&msize);
		/* The TPT entry is the peer's word: the range must also lie
		 * inside what we really mapped, or we would touch our own
		 * memory.  Otherwise fall back to process_vm_*, where the
		 * kernel checks the peer's address space. */
		if (tgt && snap->shmem_off <= msize &&
		    off <= msize - snap->shmem_off &&
		    len <= msize - snap->shmem_off - off)
			tgt += snap->shmem_off + off;
		else
			tgt = NULL;
	}
	switch (wqe->opcode) {
	case TF_WR_RDMA_READ:
		if (tgt)
			soft_sge_scatter(wqe->sge, wqe->num_sge, 0, tgt, len);
		else if (!vm_copy(p->pid, wqe, NULL, addr, len, false))
			return TF_WC_REM_OP_ERR;
		return TF_WC_SUCCESS;
	case TF_WR_ATOMIC_FETCH_ADD:
	case TF_WR_ATOMIC_CMP_SWP:
		return rma_atomic(p, wqe, tgt);
	default:
		if (tgt)
			soft_wqe_gather(wqe, 0, tgt, len);
		else if (len && !vm_copy(p->pid, wqe, NULL, addr, len, true))
			return TF_WC_REM_OP_ERR;
		return TF_WC_SUCCESS;
	}
}

/*
 * The fast path, as libfabric's smr_rma_fast: a WRITE or READ into the
 * peer's tf_mem_alloc memory, already mapped here, under a key that the
 * TPT snapshot allows.  A few loads, one exchange and the copy; the rest
 * (errors, a first mapping, process_vm_*, atomics) leaves through the
 * out-of-line calls above.
 *
 * Dekker with the revoker (soft_shm_quiesce): publish the slot in the
 * target QP's segment, then read the key; the revoker clears the key, then
 * waits until no segment names the slot.  Either we see the cleared key or
 * the revoker waits for our copy.
 */
enum tf_wc_status soft_shm_one_sided(struct soft_qp *qp, struct shm_qp *s,
				     struct soft_swqe *wqe)
{
	const struct soft_peer_addr *a = &qp->peer;
	struct shm_peer *p = s->peer;
	struct shm_seg *rs = s->rseg;
	uint64_t len = wqe->total_len, addr = wqe->remote_addr;
	uint32_t slot = wqe->rkey & p->mask;
	unsigned access = rma_access(wqe->opcode);
	enum tf_wc_status st = TF_WC_SUCCESS;
	struct soft_tpt_entry snap;
	uint8_t *tgt;

	/* An exchange is a full barrier on its own (cheaper than a store
	 * and a fence). */
	atomic_exchange_explicit(&rs->active, slot + 1, memory_order_seq_cst);
	if (TF__UNLIKELY(
		    atomic_load_explicit(&rs->state, memory_order_relaxed) !=
		    SEG_LIVE)) {
		/* A responder in error (or gone) does not answer: the
		 * requester's retries run out. */
		st = TF_WC_RETRY_EXC_ERR;
		goto out;
	}
	soft_tpt_read(&p->tpt->slots[slot], &snap);
	/* The key, and the target QP's one peer: us (for a window bound to
	 * that QP, whoever else learned the key and the QP's address). */
	if (TF__UNLIKELY(!soft_tpt_allows(&snap, wqe->rkey, a->pd_id, a->qpn,
					  a->access, addr, len, access) ||
			 !shm_peer_is_us(rs, qp, snap.type == SOFT_TPT_MW))) {
		st = rma_denied(qp, s, wqe);
		goto out;
	}
	/* The responder's translation, modelled here since we do its
	 * work. */
	soft_xlate_touch(qp->ctx, addr, len);
	tgt = shm_map_cached(p, &snap, addr, len);
	if (TF__LIKELY(tgt && access != TF_ACCESS_REMOTE_ATOMIC)) {
		if (access == TF_ACCESS_REMOTE_READ)
			soft_sge_scatter(wqe->sge, wqe->num_sge, 0, tgt, len);
		else
			soft_wqe_gather(wqe, 0, tgt, len);
	} else {
		st = rma_slow(s, wqe, &snap);
	}
out:
	atomic_store_explicit(&rs->active, 0, memory_order_release);
	return st;
}
