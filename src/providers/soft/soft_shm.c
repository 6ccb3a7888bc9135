/* SPDX-License-Identifier: MIT */
/*
 * soft_shm.c - transport "shm": RC between processes of one host.
 *
 * Each QP owns a segment (a memfd, struct shm_seg) that its peer maps
 * read-write through /proc/<pid>/fd/<fd>.  It holds:
 *  - an inbound ring: the peer (sender) appends messages (SEND,
 *    SEND_WITH_IMM, SEND_WITH_INV, the immediate of RDMA_WRITE_WITH_IMM);
 *    the owner (receiver) consumes them in progress and matches receive
 *    WQEs.  Payloads up to TOLLFREE_SOFT_SHM_EAGER are copied into the
 *    ring; larger ones carry the sender's buffer list instead and the
 *    receiver pulls the data with process_vm_readv straight into its
 *    receive buffers (one copy, no fragmentation);
 *  - acknowledgements written by the owner: ack_seq (messages accepted)
 *    and a NAK (sequence, status, generation) for RNR and errors.  The
 *    sender completes a SEND when it is acknowledged, so completion means
 *    "placed in a receive buffer", as in RC;
 *  - the Dekker word (active) of the peer's one-sided accesses, and
 *    peer_err, by which an initiator that failed the TPT check moves the
 *    responder QP to error (class C, as rxe's responder does).
 *
 * One-sided operations (WRITE, READ, atomics) are executed by the
 * initiator: it checks the target context's TPT, mapped read-only, and
 * copies with plain loads and stores when the target memory comes from
 * tf_mem_alloc (a memfd the initiator maps once and caches), or with
 * process_vm_readv/writev otherwise.  The target CPU does nothing.  To
 * keep RC ordering, a one-sided operation starts only when every earlier
 * message of the QP has been acknowledged.
 *
 * Peer death: a pidfd per peer context is polled every few milliseconds
 * from progress; a dead peer's QPs go to error (outstanding work completes
 * with TF_WC_RETRY_EXC_ERR, the rest is flushed).  The QP's transport
 * timeout is not used: a live peer acknowledges when it next makes
 * progress (or its progress thread does), so only death fails work.
 *
 * A process asleep on a CQ fd (no progress thread) is woken by its peers:
 * while one of its CQs is armed, a peer that rings its doorbell or
 * acknowledges its messages also writes its wake eventfd, duplicated with
 * pidfd_getfd (the same permission as process_vm_*: same user, or
 * CAP_SYS_PTRACE, and a Yama ptrace_scope that allows it).
 *
 * Counters: the target of a one-sided operation does no work, so its
 * bytes_in does not see WRITEs; remote_access_denied is counted by the
 * target when it learns of the failed check (peer_err).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdalign.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "soft_int.h"

#define SHM_SEG_MAGIC	 0x5345474d48535446ull /* "FTSHMGES" */
#define SHM_SEG_VERSION	 1
#define SHM_HDR_SIZE	 512u
#define SHM_REC_ALIGN	 64u
#define SHM_OP_PAD	 0xffu
#define SHM_MAX_PULL_SGE 64u
/* How long a sender waits before it lets an RNR'd message be retried. */
#define SHM_RNR_DELAY_NS 10000ull
/* How often progress checks that peers are alive. */
#define SHM_LIVENESS_NS 5000000ull

enum { SEG_LIVE = 0, SEG_ERR = 1, SEG_DEAD = 2 };

#define READ_ONCE SOFT_READ_ONCE

struct shm_seg {
	/* Constant after creation. */
	uint64_t magic;
	uint32_t version;
	uint32_t qpn;
	uint64_t ctx_nonce;
	uint32_t ring_size; /* power of two */
	uint32_t hdr_size;
	int32_t owner_pid;
	/* Written by the owner. */
	alignas(64) _Atomic uint32_t state;
	/* Written by the owner (receiver side): acknowledgements. */
	alignas(64) _Atomic uint64_t ack_seq;
	_Atomic uint64_t nak_seq;
	_Atomic uint32_t nak_status;
	_Atomic uint32_t nak_gen;
	/* Written by the peer (initiator side). */
	alignas(64) _Atomic uint32_t active; /* TPT slot + 1 being accessed */
	_Atomic int32_t peer_pid;
	_Atomic uint32_t peer_err; /* responder must go to error */
	_Atomic uint32_t rnr_go;   /* NAK generation the sender lets retry */
	/* Written by the peer: ring producer position (bytes). */
	alignas(64) _Atomic uint64_t tail;
	/* Written by the owner: ring consumer position (bytes). */
	alignas(64) _Atomic uint64_t head;
};

_Static_assert(sizeof(struct shm_seg) <= SHM_HDR_SIZE, "segment header");

/* A ring record; the payload (eager) or the sender's buffer list (pull:
 * nsge x {u64 addr, u64 len}) follows. */
struct shm_msg {
	uint32_t size; /* whole record, multiple of SHM_REC_ALIGN */
	uint8_t op;    /* enum tf_wr_opcode or SHM_OP_PAD */
	uint8_t pull;
	uint16_t nsge;
	uint32_t len;
	uint32_t imm;
	uint32_t inv_rkey;
	uint32_t pad;
	uint64_t seq;
};

struct shm_iov {
	uint64_t addr, len;
};

/* A peer context: its TPT and the tf_mem_alloc regions we mapped. */
/* map[].gen while a mapping is being replaced (never a region's gen in
 * practice: generations count up from 1 per tf_mem_alloc slot reuse). */
#define SHM_MAP_UPDATING UINT32_MAX

struct shm_peer {
	struct shm_peer *next;
	uint64_t nonce;
	pid_t pid;
	int pidfd;
	_Atomic int wake_fd; /* the peer's wake eventfd: -1 not opened yet,
			      * -2 cannot be opened */
	int refs;
	_Atomic bool dead;
	struct soft_tpt_ctl *ctl;	/* read-write page */
	const struct soft_tpt_hdr *tpt; /* read-only */
	size_t tpt_size;
	uint32_t mask;
	struct {
		_Atomic uint32_t gen; /* 0: not mapped; see peer_map */
		uint8_t *base;
		size_t size;
	} map[SOFT_MAX_SHMEM];
	/* Guards creating mappings.  Not ctx->lock: a revoker holds that
	 * while it waits for accesses, and an access may be mapping. */
	pthread_mutex_t map_lock;
	struct shm_old_map {
		struct shm_old_map *next;
		void *base;
		size_t size;
	} * old_maps;
};

struct shm_ctx {
	pthread_mutex_t seg_lock; /* segs[] (leaf lock) */
	struct soft_qp **segs;
	uint32_t n_segs;
	struct shm_peer *peers; /* ctx->lock */
	_Atomic uint64_t next_check_ns;
	_Atomic uint64_t db_seen; /* doorbell value progress acted on */
	/* Some QP waits for acks or an RNR timer: keep polling. */
	_Atomic bool any_pending;
};

/* Per connected QP. */
struct shm_qp {
	struct shm_peer *peer;
	struct shm_seg *rseg; /* the peer QP's segment */
	size_t rseg_size;
	uint8_t *rring;
	uint32_t rring_mask;
	/* sender side */
	uint64_t tx_tail, tx_seq, acked;
	uint64_t peer_down_ns; /* when the responder was first seen down */
	uint32_t n_inflight;
	uint32_t nak_gen_seen;
	uint32_t rnr_go_pending; /* NAK generation to release, 0 none */
	uint64_t rnr_deadline;
	/* receiver side */
	uint64_t rx_head, rx_seq;
	uint32_t my_nak_gen;
	bool rnr_stalled;
};

/* Our inbound ring's size, from our own bookkeeping: the segment header is
 * writable by the peer, so its ring_size must not be trusted after we
 * wrote it. */
static uint32_t own_ring_size(const struct soft_qp *qp)
{
	return (uint32_t)(qp->shm_seg_size - SHM_HDR_SIZE);
}

static struct shm_seg *own_seg(struct soft_qp *qp)
{
	return qp->shm_seg;
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

static bool pid_alive(pid_t pid)
{
	return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

/* ------------------------------------------------------------ context */

/* ctx->lock held. */
static int shm_ctx_alloc(struct soft_ctx *ctx)
{
	struct shm_ctx *sc;

	if (atomic_load_explicit((void *_Atomic *)&ctx->shm_priv,
				 memory_order_acquire))
		return 0;
	sc = tf__calloc(1, sizeof(*sc));
	if (!sc)
		return -ENOMEM;
	sc->segs = tf__calloc(SOFT_MAX_QP, sizeof(*sc->segs));
	if (!sc->segs) {
		tf__free(sc);
		return -ENOMEM;
	}
	pthread_mutex_init(&sc->seg_lock, NULL);
	atomic_store_explicit((void *_Atomic *)&ctx->shm_priv, sc,
			      memory_order_release);
	return 0;
}

static int shm_ctx_init(struct soft_ctx *ctx)
{
	return shm_ctx_alloc(ctx);
}

static void shm_ctx_fini(struct soft_ctx *ctx)
{
	struct shm_ctx *sc = ctx->shm_priv;

	if (!sc)
		return;
	/* Peers are released with their last QP; any left here leaked. */
	pthread_mutex_destroy(&sc->seg_lock);
	tf__free(sc->segs);
	tf__free(sc);
	ctx->shm_priv = NULL;
}

/* ------------------------------------------------------------ segments */

int soft_shm_qp_init(struct soft_qp *qp)
{
	struct soft_ctx *ctx = qp->ctx;
	uint64_t rs = 4096;
	struct shm_ctx *sc;
	struct shm_seg *seg;
	size_t size;
	int fd, ret;

	while (rs < ctx->base.cfg.soft_shm_ring_size && rs < (1ull << 30))
		rs <<= 1;
	pthread_mutex_lock(&ctx->lock);
	ret = shm_ctx_alloc(ctx);
	pthread_mutex_unlock(&ctx->lock);
	if (ret)
		return ret;
	sc = ctx->shm_priv;
	size = SHM_HDR_SIZE + rs;
	fd = memfd_create("tollfree-qp", MFD_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		tf_log_error(SOFT_SUBSYS, "shm: memfd_create(qp): %m");
		return ret;
	}
	if (ftruncate(fd, (off_t)size)) {
		ret = -errno;
		tf_log_error(SOFT_SUBSYS, "shm: ftruncate(qp, %zu): %m", size);
		goto err_close;
	}
	seg = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (seg == MAP_FAILED) {
		ret = -errno;
		tf_log_error(SOFT_SUBSYS, "shm: mmap(qp, %zu): %m", size);
		goto err_close;
	}
	seg->version = SHM_SEG_VERSION;
	seg->ctx_nonce = ctx->nonce;
	seg->ring_size = (uint32_t)rs;
	seg->hdr_size = SHM_HDR_SIZE;
	seg->owner_pid = getpid();
	qp->shm_seg = seg;
	qp->shm_seg_fd = fd;
	qp->shm_seg_size = size;
	/* The QP number is not known yet: soft_shm_qp_addr fills it and
	 * publishes the magic. */
	pthread_mutex_lock(&sc->seg_lock);
	sc->segs[sc->n_segs++] = qp;
	pthread_mutex_unlock(&sc->seg_lock);
	return 0;

err_close:
	close(fd);
	return ret;
}

/* Wait until the peer's Dekker word of @seg no longer equals @val (or,
 * @val 0, until it is 0); a dead peer does not block. */
static void wait_active(struct shm_seg *seg, uint32_t val)
{
	for (uint32_t spins = 0;; spins++) {
		uint32_t a = atomic_load(&seg->active);

		if (val ? a != val : a == 0)
			return;
		if ((spins & 1023) == 1023) {
			if (!pid_alive(atomic_load(&seg->peer_pid)))
				return;
			sched_yield();
		} else {
			tf__cpu_relax();
		}
	}
}

void soft_shm_qp_destroy(struct soft_qp *qp)
{
	struct shm_ctx *sc = qp->ctx->shm_priv;
	struct shm_seg *seg = qp->shm_seg;

	if (!seg)
		return;
	pthread_mutex_lock(&sc->seg_lock);
	for (uint32_t i = 0; i < sc->n_segs; i++) {
		if (sc->segs[i] == qp) {
			sc->segs[i] = sc->segs[--sc->n_segs];
			break;
		}
	}
	pthread_mutex_unlock(&sc->seg_lock);
	/* Accesses through this QP re-check the state after publishing
	 * their slot: once the word is clear, none can land any more. */
	atomic_store(&seg->state, SEG_DEAD);
	atomic_thread_fence(memory_order_seq_cst);
	wait_active(seg, 0);
	munmap(seg, qp->shm_seg_size);
	close(qp->shm_seg_fd);
	qp->shm_seg = NULL;
	qp->shm_seg_fd = -1;
}

void soft_shm_quiesce(struct soft_ctx *ctx, uint32_t slot)
{
	struct shm_ctx *sc = atomic_load_explicit(
		(void *_Atomic *)&ctx->shm_priv, memory_order_acquire);

	if (!sc)
		return;
	pthread_mutex_lock(&sc->seg_lock);
	for (uint32_t i = 0; i < sc->n_segs; i++)
		wait_active(own_seg(sc->segs[i]), slot + 1);
	pthread_mutex_unlock(&sc->seg_lock);
}

static int shm_qp_addr(struct soft_qp *qp, struct soft_peer_addr *me)
{
	struct shm_seg *seg = own_seg(qp);

	if (!seg)
		return -EINVAL;
	if (!seg->magic) {
		seg->qpn = qp->base.qpn;
		atomic_thread_fence(memory_order_release);
		seg->magic = SHM_SEG_MAGIC;
	}
	me->pid = getpid();
	me->tpt_fd = qp->ctx->tpt_fd;
	me->qp_fd = qp->shm_seg_fd;
	return 0;
}

/* ------------------------------------------------------------ peers */

static int open_peer_fd(pid_t pid, int fd, struct stat *st)
{
	char path[64];
	int f;

	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, fd);
	f = open(path, O_RDWR | O_CLOEXEC);
	if (f < 0) {
		int ret = -errno;

		tf_log_error(SOFT_SUBSYS, "shm: open %s: %m", path);
		return ret;
	}
	if (fstat(f, st)) {
		int ret = -errno;

		close(f);
		return ret;
	}
	return f;
}

static void peer_free(struct shm_peer *p)
{
	for (uint32_t i = 0; i < SOFT_MAX_SHMEM; i++)
		if (p->map[i].base)
			munmap(p->map[i].base, p->map[i].size);
	while (p->old_maps) {
		struct shm_old_map *o = p->old_maps;

		p->old_maps = o->next;
		munmap(o->base, o->size);
		tf__free(o);
	}
	if (p->ctl)
		munmap(p->ctl, SOFT_PAGE_SIZE);
	if (p->tpt)
		munmap((void *)p->tpt, p->tpt_size);
	if (p->pidfd >= 0)
		close(p->pidfd);
	if (atomic_load(&p->wake_fd) >= 0)
		close(atomic_load(&p->wake_fd));
	pthread_mutex_destroy(&p->map_lock);
	tf__free(p);
}

/* Find or map the peer context of @a.  ctx->lock held. */
static int peer_get(struct soft_ctx *ctx, const struct soft_peer_addr *a,
		    struct shm_peer **peer_p)
{
	struct shm_ctx *sc = ctx->shm_priv;
	struct shm_peer *p;
	struct stat st;
	void *m;
	int fd, ret;

	for (p = sc->peers; p; p = p->next) {
		if (p->nonce == a->ctx_nonce && !p->dead) {
			p->refs++;
			*peer_p = p;
			return 0;
		}
	}
	p = tf__calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->pidfd = -1;
	atomic_init(&p->wake_fd, -1);
	pthread_mutex_init(&p->map_lock, NULL);
	p->pid = a->pid;
	p->nonce = a->ctx_nonce;
	fd = open_peer_fd(a->pid, a->tpt_fd, &st);
	if (fd < 0) {
		ret = -TF_EPEER;
		goto err_free;
	}
	if (st.st_size < (off_t)(2 * SOFT_PAGE_SIZE)) {
		ret = -TF_EPEER;
		goto err_close;
	}
	p->tpt_size = (size_t)st.st_size - SOFT_PAGE_SIZE;
	m = mmap(NULL, SOFT_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		 0);
	if (m == MAP_FAILED) {
		ret = -errno;
		goto err_close;
	}
	p->ctl = m;
	m = mmap(NULL, p->tpt_size, PROT_READ, MAP_SHARED, fd, SOFT_PAGE_SIZE);
	if (m == MAP_FAILED) {
		ret = -errno;
		goto err_close;
	}
	p->tpt = m;
	close(fd);
	fd = -1;
	if (p->tpt->magic != SOFT_TPT_MAGIC ||
	    p->tpt->ctx_nonce != a->ctx_nonce || p->tpt->pid != a->pid ||
	    !p->tpt->nslots || (p->tpt->nslots & (p->tpt->nslots - 1)) ||
	    sizeof(struct soft_tpt_hdr) +
			    (size_t)p->tpt->nslots *
				    sizeof(struct soft_tpt_entry) >
		    p->tpt_size) {
		tf_log_error(SOFT_SUBSYS,
			     "shm: peer %d's TPT does not match its address",
			     (int)a->pid);
		ret = -TF_EPEER;
		goto err_close;
	}
	p->mask = p->tpt->nslots - 1;
	p->pidfd = (int)syscall(SYS_pidfd_open, a->pid, 0);
	/* Without pidfds (old kernel) liveness falls back to kill(0). */
	p->refs = 1;
	p->next = sc->peers;
	sc->peers = p;
	*peer_p = p;
	return 0;

err_close:
	if (fd >= 0)
		close(fd);
err_free:
	peer_free(p);
	return ret;
}

/* ctx->lock held. */
static void peer_put(struct soft_ctx *ctx, struct shm_peer *p)
{
	struct shm_ctx *sc = ctx->shm_priv;

	if (--p->refs)
		return;
	for (struct shm_peer **pp = &sc->peers; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	}
	peer_free(p);
}

static bool peer_dead(struct shm_peer *p)
{
	if (atomic_load_explicit(&p->dead, memory_order_relaxed))
		return true;
	if (p->pidfd >= 0) {
		struct pollfd pfd = {.fd = p->pidfd, .events = POLLIN};

		if (poll(&pfd, 1, 0) == 1)
			atomic_store(&p->dead, true);
	} else if (!pid_alive(p->pid)) {
		atomic_store(&p->dead, true);
	}
	return atomic_load_explicit(&p->dead, memory_order_relaxed);
}

/*
 * The address in this process of tf_mem_alloc region @idx of the peer, at
 * generation @gen, mapping it on first use (slow path, under map_lock).
 * NULL if it cannot be mapped (then process_vm_* is used).  Replaced
 * mappings are kept until the peer is released, because another thread
 * may still be copying through them.
 */
static uint8_t *peer_map(struct shm_peer *p, int32_t idx, uint32_t gen,
			 uint64_t *size_p)
{
	typeof(p->tpt->shmem[0]) const *e;
	uint8_t *base = NULL;
	uint64_t size;
	struct stat st;
	int32_t pfd;
	void *m;
	int fd;

	if (idx < 0 || (uint32_t)idx >= SOFT_MAX_SHMEM)
		return NULL;
	/* Seqlock read: a replacement first invalidates the slot's gen
	 * (SHM_MAP_UPDATING), so base and size are a matching pair when gen
	 * reads the same before and after. */
	if (atomic_load_explicit(&p->map[idx].gen, memory_order_acquire) ==
	    gen) {
		base = p->map[idx].base;
		size = p->map[idx].size;
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&p->map[idx].gen,
					 memory_order_relaxed) == gen) {
			*size_p = size;
			return base;
		}
		base = NULL;
	}
	pthread_mutex_lock(&p->map_lock);
	if (atomic_load(&p->map[idx].gen) == gen) {
		base = p->map[idx].base;
		*size_p = p->map[idx].size;
		goto out;
	}
	/* The table lives in the peer's memory and may change under us:
	 * read each field once and use only the copies. */
	e = &p->tpt->shmem[idx];
	pfd = e->fd;
	size = e->size;
	if (atomic_load(&e->gen) != gen || pfd < 0 || !size)
		goto out;
	fd = open_peer_fd(p->pid, pfd, &st);
	if (fd < 0)
		goto out;
	/* The fd number may have been reused between our reads: the
	 * generation must not have moved, and the file must be big enough. */
	if (atomic_load(&e->gen) != gen || (uint64_t)st.st_size < size ||
	    size > SIZE_MAX) {
		close(fd);
		goto out;
	}
	m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		goto out;
	if (p->map[idx].base) {
		struct shm_old_map *o = tf__malloc(sizeof(*o));

		if (o) {
			o->base = p->map[idx].base;
			o->size = p->map[idx].size;
			o->next = p->old_maps;
			p->old_maps = o;
		}
	}
	atomic_store_explicit(&p->map[idx].gen, SHM_MAP_UPDATING,
			      memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	p->map[idx].base = m;
	p->map[idx].size = size;
	atomic_store_explicit(&p->map[idx].gen, gen, memory_order_release);
	base = m;
	*size_p = size;
out:
	pthread_mutex_unlock(&p->map_lock);
	return base;
}

/* ------------------------------------------------------------ connect */

static int shm_connect(struct soft_qp *qp)
{
	struct soft_ctx *ctx = qp->ctx;
	const struct soft_peer_addr *a = &qp->peer;
	struct shm_qp *s;
	struct shm_seg *rs;
	struct stat st;
	int fd, ret;

	if (!own_seg(qp))
		return -TF_EPEER;
	/* Make sure our own segment is published (the peer may have got
	 * our address before; this is idempotent). */
	{
		struct soft_peer_addr me;

		shm_qp_addr(qp, &me);
	}
	s = tf__calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	pthread_mutex_lock(&ctx->lock);
	ret = peer_get(ctx, a, &s->peer);
	pthread_mutex_unlock(&ctx->lock);
	if (ret)
		goto err_free;
	fd = open_peer_fd(a->pid, a->qp_fd, &st);
	if (fd < 0) {
		ret = -TF_EPEER;
		goto err_peer;
	}
	if (st.st_size <= SHM_HDR_SIZE) {
		close(fd);
		ret = -TF_EPEER;
		goto err_peer;
	}
	s->rseg_size = (size_t)st.st_size;
	rs = mmap(NULL, s->rseg_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		  0);
	close(fd);
	if (rs == MAP_FAILED) {
		ret = -errno;
		tf_log_error(SOFT_SUBSYS, "shm: mmap peer qp segment: %m");
		goto err_peer;
	}
	s->rseg = rs;
	if (rs->magic != SHM_SEG_MAGIC || rs->version != SHM_SEG_VERSION ||
	    rs->qpn != a->qpn || rs->ctx_nonce != a->ctx_nonce ||
	    rs->hdr_size != SHM_HDR_SIZE || rs->ring_size < 4096 ||
	    (rs->ring_size & (rs->ring_size - 1)) ||
	    (size_t)rs->ring_size + SHM_HDR_SIZE != s->rseg_size) {
		tf_log_error(SOFT_SUBSYS,
			     "shm: peer qp %#x segment does not match its "
			     "address",
			     a->qpn);
		ret = -TF_EPEER;
		goto err_unmap;
	}
	s->rring = (uint8_t *)rs + SHM_HDR_SIZE;
	s->rring_mask = rs->ring_size - 1;
	/* We are the only producer of the peer's ring. */
	s->tx_tail = atomic_load(&rs->tail);
	s->tx_seq = s->acked = atomic_load(&rs->ack_seq);
	s->nak_gen_seen = atomic_load(&rs->nak_gen);
	atomic_store(&rs->peer_pid, (int32_t)getpid());
	s->rx_head = atomic_load(&own_seg(qp)->head);
	s->rx_seq = atomic_load(&own_seg(qp)->ack_seq);
	s->my_nak_gen = atomic_load(&own_seg(qp)->nak_gen);
	soft_qp_lock(qp);
	/* Release: the hint reads of progress see an initialized state. */
	__atomic_store_n(&qp->tp_priv, s, __ATOMIC_RELEASE);
	soft_qp_unlock(qp);
	return 0;

err_unmap:
	munmap(rs, s->rseg_size);
err_peer:
	pthread_mutex_lock(&ctx->lock);
	peer_put(ctx, s->peer);
	pthread_mutex_unlock(&ctx->lock);
err_free:
	tf__free(s);
	return ret;
}

static void shm_qp_fini(struct soft_qp *qp)
{
	struct shm_qp *s = qp->tp_priv;
	struct soft_ctx *ctx = qp->ctx;

	if (qp->in_list) {
		/* Error state: peers' accesses and sends now fail. */
		if (own_seg(qp))
			atomic_store(&own_seg(qp)->state, SEG_ERR);
		if (s) {
			SOFT_WRITE_ONCE(s->n_inflight, 0);
			s->rnr_go_pending = 0;
		}
		return;
	}
	if (!s)
		return;
	munmap(s->rseg, s->rseg_size);
	pthread_mutex_lock(&ctx->lock);
	peer_put(ctx, s->peer);
	pthread_mutex_unlock(&ctx->lock);
	tf__free(s);
	qp->tp_priv = NULL;
}

/* The peer sleeps on a CQ fd: write its wake eventfd (opened on first
 * use).  A system call, but only while the peer has armed a CQ. */
static void wake_peer(struct shm_peer *p)
{
	int fd = atomic_load_explicit(&p->wake_fd, memory_order_acquire);
	uint64_t one = 1;

	if (fd == -1) {
		int expect = -1, nfd = -2;

		/* An eventfd cannot be reopened through /proc (it is no
		 * file); pidfd_getfd duplicates it, with the same permission
		 * check as process_vm_writev. */
		if (p->tpt->wake_fd >= 0 && p->pidfd >= 0)
			nfd = (int)syscall(SYS_pidfd_getfd, p->pidfd,
					   p->tpt->wake_fd, 0);
		if (nfd < 0) {
			tf_log_debug(SOFT_SUBSYS,
				     "shm: cannot get peer %d's wake fd: %m",
				     (int)p->pid);
			nfd = -2;
		}
		if (!atomic_compare_exchange_strong(&p->wake_fd, &expect,
						    nfd)) {
			if (nfd >= 0)
				close(nfd);
			nfd = expect;
		}
		fd = nfd;
	}
	if (fd >= 0 && write(fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		tf_log_debug(SOFT_SUBSYS, "shm: waking peer %d: %m",
			     (int)p->pid);
}

/* Tell the peer context that one of its QPs has something to see.  The
 * doorbell update is a full barrier, so the armed flag read after it
 * pairs with the peer's "arm, then poll once more". */
static void ring_doorbell(struct shm_qp *s)
{
	atomic_fetch_add_explicit(&s->peer->ctl->doorbell, 1,
				  memory_order_seq_cst);
	if (atomic_load_explicit(&s->peer->ctl->armed, memory_order_relaxed))
		wake_peer(s->peer);
}

/* ------------------------------------------------------------ one-sided */

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

static enum tf_wc_status shm_one_sided(struct soft_qp *qp, struct shm_qp *s,
				       struct soft_swqe *wqe)
{
	struct soft_ctx *ctx = qp->ctx;
	struct shm_peer *p = s->peer;
	struct shm_seg *rs = s->rseg;
	const struct soft_peer_addr *a = &qp->peer;
	enum tf_wc_status st = TF_WC_SUCCESS;
	struct soft_tpt_entry snap;
	uint64_t len = wqe->total_len, addr = wqe->remote_addr;
	uint32_t slot = wqe->rkey & p->mask;
	unsigned access;
	uint8_t *tgt = NULL;

	switch (wqe->opcode) {
	case TF_WR_RDMA_READ:
		access = TF_ACCESS_REMOTE_READ;
		break;
	case TF_WR_ATOMIC_FETCH_ADD:
	case TF_WR_ATOMIC_CMP_SWP:
		access = TF_ACCESS_REMOTE_ATOMIC;
		break;
	default:
		access = TF_ACCESS_REMOTE_WRITE;
		break;
	}
	/* Dekker: publish the slot, then check the key; the revoker clears
	 * the key, then waits for the word. */
	/* An exchange is a full barrier on its own (cheaper than a store
	 * and a fence). */
	atomic_exchange_explicit(&rs->active, slot + 1, memory_order_seq_cst);
	if (atomic_load_explicit(&rs->state, memory_order_relaxed) !=
	    SEG_LIVE) {
		/* A responder in error (or gone) does not answer: the
		 * requester's retries run out. */
		st = TF_WC_RETRY_EXC_ERR;
		goto out;
	}
	soft_tpt_read(&p->tpt->slots[slot], &snap);
	if (!soft_tpt_allows(&snap, wqe->rkey, a->pd_id, a->qpn, a->access,
			     addr, len, access)) {
		tf_log_debug(SOFT_SUBSYS,
			     "qp %#x: remote access denied by peer TPT (rkey "
			     "%#x addr %#llx len %llu)",
			     qp->base.qpn, wqe->rkey, (unsigned long long)addr,
			     (unsigned long long)len);
		atomic_store_explicit(&rs->peer_err, 1, memory_order_release);
		ring_doorbell(s);
		st = TF_WC_REM_ACCESS_ERR;
		goto out;
	}
	/* The responder's translation, modelled here since we do its
	 * work. */
	soft_xlate_touch(ctx, addr, len);
	if (snap.shmem_idx >= 0) {
		uint64_t msize = 0, off = addr - snap.addr;

		tgt = peer_map(p, snap.shmem_idx, snap.shmem_gen, &msize);
		/* The TPT entry is the peer's word: the range must also lie
		 * inside what we really mapped, or we would touch our own
		 * memory.  Otherwise fall back to process_vm_*, where the
		 * kernel checks the peer's address space. */
		if (tgt && snap.shmem_off <= msize &&
		    off <= msize - snap.shmem_off &&
		    len <= msize - snap.shmem_off - off)
			tgt += snap.shmem_off + off;
		else
			tgt = NULL;
	}
	switch (wqe->opcode) {
	case TF_WR_RDMA_READ:
		if (tgt)
			soft_sge_scatter(wqe->sge, wqe->num_sge, 0, tgt, len);
		else if (!vm_copy(p->pid, wqe, NULL, addr, len, false))
			st = TF_WC_REM_OP_ERR;
		break;
	case TF_WR_ATOMIC_FETCH_ADD:
	case TF_WR_ATOMIC_CMP_SWP: {
		pthread_mutex_t *m = &p->ctl->atomic_lock;
		uint64_t orig = 0, nv;
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
		if (ok)
			soft_sge_scatter(wqe->sge, wqe->num_sge, 0, &orig, 8);
		else
			st = TF_WC_REM_OP_ERR;
		break;
	}
	default:
		if (tgt)
			soft_wqe_gather(wqe, 0, tgt, len);
		else if (len && !vm_copy(p->pid, wqe, NULL, addr, len, true))
			st = TF_WC_REM_OP_ERR;
		break;
	}
out:
	atomic_store_explicit(&rs->active, 0, memory_order_release);
	return st;
}

/* ------------------------------------------------------------ messages */

/* Append a message for @wqe to the peer's ring; -EAGAIN when full. */
static int ring_send(struct soft_qp *qp, struct shm_qp *s,
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
	atomic_store_explicit(
		&((struct shm_ctx *)qp->ctx->shm_priv)->any_pending, true,
		memory_order_release);
	ring_doorbell(s);
	return 0;
}

static int shm_submit(struct soft_qp *qp, struct soft_swqe *wqe)
{
	struct shm_qp *s = qp->tp_priv;
	enum tf_wc_status st;

	if (atomic_load_explicit(&s->peer->dead, memory_order_relaxed)) {
		soft_engine_send_done(qp, wqe, TF_WC_RETRY_EXC_ERR);
		return 0;
	}
	switch (wqe->opcode) {
	case TF_WR_SEND:
	case TF_WR_SEND_WITH_IMM:
	case TF_WR_SEND_WITH_INV:
		return ring_send(qp, s, wqe);
	default:
		break;
	}
	/* One-sided: RC ordering says earlier messages are placed first. */
	if (s->n_inflight)
		return -EAGAIN;
	st = shm_one_sided(qp, s, wqe);
	if (st == TF_WC_SUCCESS && wqe->opcode == TF_WR_RDMA_WRITE_WITH_IMM)
		return ring_send(qp, s, wqe); /* completes on the ack */
	soft_engine_send_done(qp, wqe, st);
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
		ring_doorbell(s);
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

/* Receiver side, and then a wake-up for a sender asleep on its CQ fd
 * waiting for our acknowledgements. */
static int rx_progress(struct soft_qp *qp, struct shm_qp *s)
{
	int n = rx_progress_one(qp, s);

	if (n &&
	    atomic_load_explicit(&s->peer->ctl->armed, memory_order_seq_cst))
		wake_peer(s->peer);
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

static int qp_progress(struct soft_qp *qp, struct shm_qp *s, bool check_peer)
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
	if (check_peer && peer_dead(s->peer)) {
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

/* Liveness costs a syscall per peer: every few ms only, and the clock is
 * read every 64 progress calls. */
static bool liveness_due(struct soft_ctx *ctx, struct shm_ctx *sc)
{
	return !(atomic_load_explicit(&ctx->tick, memory_order_relaxed) & 63) &&
	       tf__now_ns() >= atomic_load_explicit(&sc->next_check_ns,
						    memory_order_relaxed);
}

/*
 * The test every poll makes before taking any lock: an idle context with
 * nothing in flight costs a few loads of lines that stay in this core's
 * cache, which is what keeps a polling loop from slowing its peer.
 */
bool soft_shm_need_progress(struct soft_ctx *ctx)
{
	struct shm_ctx *sc = atomic_load_explicit(
		(void *_Atomic *)&ctx->shm_priv, memory_order_acquire);

	if (!sc)
		return false;
	return atomic_load_explicit(&ctx->tpt_ctl->doorbell,
				    memory_order_relaxed) !=
		       atomic_load_explicit(&sc->db_seen,
					    memory_order_relaxed) ||
	       atomic_load_explicit(&sc->any_pending, memory_order_relaxed) ||
	       liveness_due(ctx, sc);
}

static int shm_progress(struct soft_ctx *ctx)
{
	struct shm_ctx *sc = ctx->shm_priv;
	bool check = false, pending = false;
	int n = 0;

	if (liveness_due(ctx, sc)) {
		atomic_store_explicit(&sc->next_check_ns,
				      tf__now_ns() + SHM_LIVENESS_NS,
				      memory_order_relaxed);
		check = true;
	}
	/* Read the doorbell before looking at the QPs, so that a ring
	 * after our look is never lost; clear the pending flag before the
	 * walk, which sets it again if needed (a post racing with us sets
	 * it after queueing). */
	atomic_store_explicit(&sc->db_seen,
			      atomic_load_explicit(&ctx->tpt_ctl->doorbell,
						   memory_order_acquire),
			      memory_order_relaxed);
	atomic_store_explicit(&sc->any_pending, false, memory_order_relaxed);
	/* Order the flag's clearing before our reads of the QPs (a store
	 * then loads: only a full fence does that). */
	atomic_thread_fence(memory_order_seq_cst);
	for (uint32_t i = 0; i < ctx->n_qps; i++) {
		struct soft_qp *qp = ctx->qps[i];

		struct shm_qp *h;
		struct shm_seg *seg;

		if (SOFT_READ_ONCE(qp->tp) != &soft_shm_transport ||
		    !SOFT_READ_ONCE(qp->connected) ||
		    SOFT_READ_ONCE(qp->base.state) != TF_QPS_RTS)
			continue;
		/* Look before taking the lock: polling an idle QP must cost
		 * a few loads of lines that stay in this core's cache.  The
		 * reads race with the QP's owner; they are hints only and
		 * everything is read again under the lock. */
		h = __atomic_load_n(&qp->tp_priv, __ATOMIC_ACQUIRE);
		seg = own_seg(qp);
		if (!check && h && !READ_ONCE(h->n_inflight) &&
		    atomic_load_explicit(&seg->tail, memory_order_relaxed) ==
			    READ_ONCE(h->rx_head) &&
		    !atomic_load_explicit(&seg->peer_err, memory_order_relaxed))
			continue;
		if (!soft_qp_trylock(qp)) {
			pending = true;
			continue;
		}
		if (h) {
			n += qp_progress(qp, h, check);
			if (h->n_inflight || h->rnr_stalled)
				pending = true;
		}
		soft_qp_unlock(qp);
	}
	if (pending)
		atomic_store_explicit(&sc->any_pending, true,
				      memory_order_relaxed);
	return n;
}

const struct soft_transport_ops soft_shm_transport = {
	.name = "shm",
	.ctx_init = shm_ctx_init,
	.ctx_fini = shm_ctx_fini,
	.qp_addr = shm_qp_addr,
	.connect = shm_connect,
	.submit = shm_submit,
	.progress = shm_progress,
	.qp_fini = shm_qp_fini,
};
