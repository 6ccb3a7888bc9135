/* SPDX-License-Identifier: MIT */
/*
 * soft_shm_seg.c - transport "shm", segments: the context's transport
 * state, each QP's segment (created with the QP, published by its
 * address), the peer contexts a QP connects to (their TPT and the
 * tf_mem_alloc regions we map), connect and teardown, and waking a peer
 * asleep on a CQ fd.  See soft_shm_int.h for the layout.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "soft_shm_int.h"

static bool pid_alive(pid_t pid)
{
	return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

static void peer_free(struct shm_peer *p);

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
	sc->ctx = ctx;
	sc->segs = tf__calloc(SOFT_MAX_QP, sizeof(*sc->segs));
	if (!sc->segs) {
		tf__free(sc);
		return -ENOMEM;
	}
	sc->seg_cache = ctx->base.cfg.soft_shm_seg_cache < SOFT_MAX_QP
				? (uint32_t)ctx->base.cfg.soft_shm_seg_cache
				: SOFT_MAX_QP;
	if (sc->seg_cache) {
		sc->spare = tf__calloc(sc->seg_cache, sizeof(*sc->spare));
		if (!sc->spare) {
			tf__free(sc->segs);
			tf__free(sc);
			return -ENOMEM;
		}
	}
	pthread_mutex_init(&sc->seg_lock, NULL);
	sc->stash_fd = -1;
	atomic_store_explicit((void *_Atomic *)&ctx->shm_priv, sc,
			      memory_order_release);
	return 0;
}

int soft_shm_ctx_init(struct soft_ctx *ctx)
{
	return shm_ctx_alloc(ctx);
}

void soft_shm_ctx_fini(struct soft_ctx *ctx)
{
	struct shm_ctx *sc = ctx->shm_priv;

	if (!sc)
		return;
	/* Peers with QPs are released with their last QP; the kept ones
	 * go here. */
	while (sc->peers) {
		struct shm_peer *p = sc->peers;

		sc->peers = p->next;
		if (p->refs)
			tf_log_warn(SOFT_SUBSYS,
				    "shm: peer %d still has %d queue pairs at "
				    "context close",
				    (int)p->pid, p->refs);
		else
			peer_free(p);
	}
	if (sc->stash_fd >= 0)
		close(sc->stash_fd);
	for (uint32_t i = 0; i < sc->n_spare; i++) {
		munmap(sc->spare[i].seg, sc->spare[i].size);
		close(sc->spare[i].fd);
	}
	tf__free(sc->spare);
	pthread_mutex_destroy(&sc->seg_lock);
	tf__free(sc->segs);
	tf__free(sc);
	ctx->shm_priv = NULL;
}

/* ------------------------------------------------------------ segments */

/*
 * A kept segment of @size for a new QP, its header reset as a new one's,
 * or NULL.  Only one whose last initiator has given up its claim: that
 * peer QP is destroyed, so nothing of it reaches the segment any more.
 * A claim that comes after (a connect with a stale address) fails its
 * check of the QP number, which stays 0 until soft_shm_qp_addr.
 */
static struct shm_seg *spare_take(struct shm_ctx *sc, size_t size, int *fd_p)
{
	struct shm_seg *seg = NULL;

	pthread_mutex_lock(&sc->seg_lock);
	for (uint32_t i = 0; i < sc->n_spare; i++) {
		struct shm_spare *sp = &sc->spare[i];

		if (sp->size != size ||
		    atomic_load(&sp->seg->claim_state) != SHM_CLAIM_FREE)
			continue;
		seg = sp->seg;
		*fd_p = sp->fd;
		memmove(sp, sp + 1, (sc->n_spare - i - 1) * sizeof(*sp));
		sc->n_spare--;
		break;
	}
	pthread_mutex_unlock(&sc->seg_lock);
	if (!seg)
		return NULL;
	seg->qpn = 0;
	atomic_store(&seg->conn_set, 0);
	atomic_store(&seg->conn_qpn, 0);
	atomic_store(&seg->conn_nonce, 0);
	atomic_store(&seg->ack_seq, 0);
	atomic_store(&seg->nak_seq, 0);
	atomic_store(&seg->nak_status, 0);
	atomic_store(&seg->nak_gen, 0);
	atomic_store(&seg->tx_wait, 0);
	atomic_store(&seg->active, 0);
	atomic_store(&seg->peer_pid, 0);
	atomic_store(&seg->peer_err, 0);
	atomic_store(&seg->rnr_go, 0);
	atomic_store(&seg->tail, 0);
	atomic_store(&seg->head, 0);
	atomic_store(&seg->state, SEG_LIVE);
	return seg;
}

/* Whether peer context @nonce is attached or kept.  ctx->lock held. */
static bool peer_known(struct shm_ctx *sc, uint64_t nonce)
{
	for (struct shm_peer *p = sc->peers; p; p = p->next)
		if (p->nonce == nonce && !atomic_load(&p->dead))
			return true;
	return false;
}

/* Keep the segment of a destroyed QP that served peer context @nonce (0:
 * none) for a new QP (the oldest kept goes if there are too many), or
 * unmap and close it: it is only worth keeping for a peer that may map
 * it again. */
static void spare_put(struct soft_ctx *ctx, struct shm_seg *seg, size_t size,
		      int fd, uint64_t nonce)
{
	struct shm_ctx *sc = ctx->shm_priv;
	struct shm_spare old = {.seg = NULL};

	pthread_mutex_lock(&ctx->lock);
	pthread_mutex_lock(&sc->seg_lock);
	if (sc->seg_cache && nonce && peer_known(sc, nonce)) {
		if (sc->n_spare == sc->seg_cache) {
			old = sc->spare[0];
			memmove(sc->spare, sc->spare + 1,
				(sc->n_spare - 1) * sizeof(*sc->spare));
			sc->n_spare--;
		}
		sc->spare[sc->n_spare++] =
			(struct shm_spare){.seg = seg,
					   .size = size,
					   .fd = fd,
					   .peer_nonce = nonce};
		seg = old.seg;
		size = old.size;
		fd = old.fd;
	}
	pthread_mutex_unlock(&sc->seg_lock);
	pthread_mutex_unlock(&ctx->lock);
	if (seg) {
		munmap(seg, size);
		close(fd);
	}
}

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
	seg = spare_take(sc, size, &fd);
	if (seg)
		goto have_seg;
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
	seg->owner_pid = soft_self_pid(ctx);
have_seg:
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
	uint64_t nonce;

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
	/* Unpublished: a peer that keeps it mapped, or connects with a
	 * stale address, no longer takes it for this QP. */
	__atomic_store_n(&seg->magic, 0, __ATOMIC_RELEASE);
	nonce = atomic_load(&seg->conn_set) ? atomic_load(&seg->conn_nonce) : 0;
	spare_put(qp->ctx, seg, qp->shm_seg_size, qp->shm_seg_fd, nonce);
	qp->shm_seg = NULL;
	qp->shm_seg_fd = -1;
}

void soft_shm_quiesce(struct soft_ctx *ctx, uint32_t slot, struct soft_qp *qp)
{
	struct shm_ctx *sc = atomic_load_explicit(
		(void *_Atomic *)&ctx->shm_priv, memory_order_acquire);

	if (!sc)
		return;
	pthread_mutex_lock(&sc->seg_lock);
	if (qp) {
		/* Its segment is in segs[] until soft_shm_qp_destroy, which
		 * a QP's destroy calls after it unbound its windows; a QP
		 * of the tcp transport has none (no shm accessor). */
		if (qp->shm_seg)
			wait_active(own_seg(qp), slot + 1);
	} else {
		for (uint32_t i = 0; i < sc->n_segs; i++)
			wait_active(own_seg(sc->segs[i]), slot + 1);
	}
	pthread_mutex_unlock(&sc->seg_lock);
}

/* @cq's slot, generation and eventfd number, for a peer's direct
 * wake-up (soft_shm_wake_cq). */
static void publish_cq(_Atomic uint32_t *slot, _Atomic uint32_t *gen,
		       _Atomic int32_t *efd, const struct soft_cq *cq)
{
	atomic_store(slot, cq && cq->wake_slot >= 0 ? (uint32_t)cq->wake_slot
						    : UINT32_MAX);
	atomic_store(gen, cq ? cq->wake_gen : 0);
	atomic_store(efd, cq ? cq->efd : -1);
}

int soft_shm_qp_addr(struct soft_qp *qp, struct soft_peer_addr *me)
{
	struct shm_seg *seg = own_seg(qp);
	const struct soft_cq *rcq = (const struct soft_cq *)qp->base.recv_cq;
	const struct soft_cq *scq = (const struct soft_cq *)qp->base.send_cq;

	if (!seg)
		return -EINVAL;
	/* Before the magic (release below) of a new segment; a reused one
	 * is renamed here for its new QP before the address goes out. */
	publish_cq(&seg->rcq_slot, &seg->rcq_gen, &seg->rcq_efd, rcq);
	publish_cq(&seg->scq_slot, &seg->scq_gen, &seg->scq_efd, scq);
	if (!seg->magic) {
		seg->qpn = qp->base.qpn;
		atomic_thread_fence(memory_order_release);
		seg->magic = SHM_SEG_MAGIC;
	}
	me->pid = soft_self_pid(qp->ctx);
	me->tpt_fd = qp->ctx->tpt_fd;
	me->qp_fd = qp->shm_seg_fd;
	return 0;
}

/* ------------------------------------------------------------ peers */

/*
 * A descriptor of fd @fd of peer @p, with its stat: duplicated with
 * pidfd_getfd (one call, bound to the process the pidfd names, so a
 * reused pid cannot answer), or opened through /proc/<pid>/fd/<fd> where
 * that is refused (ENOSYS, or EPERM under Yama's ptrace_scope).
 */
static int peer_fd(struct shm_peer *p, int fd, struct stat *st)
{
	struct shm_ctx *sc = p->sc;
	char path[64];
	int f = -1, ret;

	if (p->pidfd >= 0 &&
	    !atomic_load_explicit(&sc->no_getfd, memory_order_relaxed)) {
		f = (int)syscall(SYS_pidfd_getfd, p->pidfd, fd, 0);
		if (f < 0 && errno != ENOSYS && errno != EPERM) {
			ret = -errno;
			/* The process is gone: the caller says so. */
			if (errno == ESRCH) {
				atomic_store(&p->dead, true);
				return ret;
			}
			tf_log_error(SOFT_SUBSYS,
				     "shm: pidfd_getfd(peer %d, fd %d): %m",
				     (int)p->pid, fd);
			return ret;
		}
		if (f < 0) {
			tf_log_debug(SOFT_SUBSYS,
				     "shm: pidfd_getfd refused (%m); peer fds "
				     "are opened through /proc");
			atomic_store(&sc->no_getfd, true);
		}
	}
	if (f < 0) {
		snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)p->pid, fd);
		f = open(path, O_RDWR | O_CLOEXEC);
		if (f < 0) {
			ret = -errno;
			tf_log_error(SOFT_SUBSYS, "shm: open %s: %m", path);
			return ret;
		}
	}
	if (fstat(f, st)) {
		ret = -errno;
		close(f);
		return ret;
	}
	/* The peer's word: a memfd is a regular file. */
	if (!S_ISREG(st->st_mode)) {
		close(f);
		return -TF_EPEER;
	}
	return f;
}

/* Close a peer's eventfd taken by peer_eventfd. */
static void wake_fd_close(struct soft_ctx *ctx, int fd)
{
	close(fd);
	atomic_fetch_sub_explicit(&ctx->base.wake_fds, 1, memory_order_relaxed);
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
	for (uint32_t i = 0; i < p->n_seg_maps; i++)
		if (p->seg_maps[i].seg)
			munmap(p->seg_maps[i].seg, p->seg_maps[i].size);
	tf__free(p->seg_maps);
	if (p->ctl)
		munmap(p->ctl, SOFT_PAGE_SIZE);
	if (p->tpt)
		munmap((void *)p->tpt, p->tpt_size);
	if (p->pidfd >= 0)
		close(p->pidfd);
	if (atomic_load(&p->wake_fd) >= 0)
		wake_fd_close(p->sc->ctx, atomic_load(&p->wake_fd));
	pthread_mutex_destroy(&p->map_lock);
	tf__free(p);
}

/* Bytes @p has mapped (no QP uses it: the maps do not change). */
static size_t peer_bytes(const struct shm_peer *p)
{
	size_t n = SOFT_PAGE_SIZE + p->tpt_size;

	for (uint32_t i = 0; i < SOFT_MAX_SHMEM; i++)
		if (p->map[i].base)
			n += p->map[i].size;
	for (const struct shm_old_map *o = p->old_maps; o; o = o->next)
		n += o->size;
	for (uint32_t i = 0; i < p->n_seg_maps; i++)
		if (p->seg_maps[i].seg)
			n += p->seg_maps[i].size;
	return n;
}

/* Whether the peer context closed (it clears its TPT's magic). */
static bool peer_closed(const struct shm_peer *p)
{
	return __atomic_load_n(&p->tpt->magic, __ATOMIC_ACQUIRE) !=
		       SOFT_TPT_MAGIC ||
	       p->tpt->ctx_nonce != p->nonce;
}

/* Let go of the kept segments that served peer context @nonce.
 * ctx->lock held. */
static void spare_drop(struct shm_ctx *sc, uint64_t nonce)
{
	struct shm_spare drop[64];
	uint32_t n, j;

	do {
		n = j = 0;
		pthread_mutex_lock(&sc->seg_lock);
		for (uint32_t i = 0; i < sc->n_spare; i++) {
			if (sc->spare[i].peer_nonce == nonce && n < 64)
				drop[n++] = sc->spare[i];
			else
				sc->spare[j++] = sc->spare[i];
		}
		sc->n_spare = j;
		pthread_mutex_unlock(&sc->seg_lock);
		for (uint32_t i = 0; i < n; i++) {
			munmap(drop[i].seg, drop[i].size);
			close(drop[i].fd);
		}
	} while (n == 64);
}

/* Unlink kept peer @p and free it.  ctx->lock held. */
static void idle_drop(struct shm_ctx *sc, struct shm_peer *p)
{
	for (struct shm_peer **pp = &sc->peers; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	}
	sc->idle_bytes -= p->bytes;
	atomic_fetch_sub_explicit(&sc->n_idle, 1, memory_order_relaxed);
	spare_drop(sc, p->nonce);
	peer_free(p);
}

/* Let go of kept peers that closed or died: one poll for up to 32
 * pidfds.  ctx->lock held. */
static void idle_sweep(struct shm_ctx *sc)
{
	struct shm_peer *batch[32], *p, *next;
	struct pollfd pfd[32];
	unsigned n;

	for (p = sc->peers; p; p = next) {
		next = p->next;
		if (!p->refs && (atomic_load(&p->dead) || peer_closed(p)))
			idle_drop(sc, p);
	}
	p = sc->peers;
	while (p) {
		for (n = 0; p && n < 32; p = p->next) {
			if (p->refs || p->pidfd < 0)
				continue;
			batch[n] = p;
			pfd[n].fd = p->pidfd;
			pfd[n].events = POLLIN;
			pfd[n].revents = 0;
			n++;
		}
		if (!n || poll(pfd, n, 0) <= 0)
			continue;
		for (unsigned i = 0; i < n; i++)
			if (pfd[i].revents)
				idle_drop(sc, batch[i]);
	}
}

void soft_shm_sweep_idle(struct soft_ctx *ctx)
{
	struct shm_ctx *sc = ctx->shm_priv;

	if (pthread_mutex_trylock(&ctx->lock))
		return;
	idle_sweep(sc);
	pthread_mutex_unlock(&ctx->lock);
}

/* The pidfd of @pid: the one soft_shm_reachable opened, or a new one.
 * -1 without pidfds (old kernel: liveness falls back to kill(0)).
 * ctx->lock held. */
static int peer_pidfd(struct shm_ctx *sc, pid_t pid)
{
	int fd;

	if (sc->stash_fd >= 0 && sc->stash_pid == pid) {
		fd = sc->stash_fd;
		sc->stash_fd = -1;
		return fd;
	}
	fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd < 0 && errno == ESRCH)
		return -2;
	return fd < 0 ? -1 : fd;
}

/* Find or attach the peer context of @a.  ctx->lock held. */
static int peer_get(struct soft_ctx *ctx, const struct soft_peer_addr *a,
		    struct shm_peer **peer_p)
{
	struct shm_ctx *sc = ctx->shm_priv;
	struct shm_peer *p, *next;
	struct stat st;
	bool stashed;
	void *m;
	int fd = -1, ret;

	/* The nonce names one context of one process: a kept peer that
	 * matches is the context that sent the address, alive when it did
	 * (its death is seen by the QPs' liveness checks). */
	for (p = sc->peers; p; p = next) {
		next = p->next;
		if (p->nonce != a->ctx_nonce || p->pid != a->pid)
			continue;
		if (atomic_load(&p->dead) || peer_closed(p)) {
			if (!p->refs)
				idle_drop(sc, p);
			continue;
		}
		if (!p->refs++) {
			sc->idle_bytes -= p->bytes;
			atomic_fetch_sub_explicit(&sc->n_idle, 1,
						  memory_order_relaxed);
		}
		*peer_p = p;
		return 0;
	}
	/* A new peer: a good moment to let dead kept ones go. */
	if (atomic_load_explicit(&sc->n_idle, memory_order_relaxed))
		idle_sweep(sc);
	p = tf__calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->sc = sc;
	atomic_init(&p->wake_fd, -1);
	pthread_mutex_init(&p->map_lock, NULL);
	p->pid = a->pid;
	p->nonce = a->ctx_nonce;
	/* The pidfd first: the TPT is then fetched from the process it
	 * names and checked against the nonce, so the pidfd is the peer's
	 * even if its pid has been reused meanwhile. */
	stashed = sc->stash_fd >= 0 && sc->stash_pid == a->pid;
	p->pidfd = peer_pidfd(sc, a->pid);
	if (p->pidfd == -2) {
		p->pidfd = -1;
		ret = -TF_EPEER;
		goto err_free;
	}
	fd = peer_fd(p, a->tpt_fd, &st);
	if (fd < 0 && stashed && atomic_load(&p->dead)) {
		/* A pidfd left from an earlier check may name a process
		 * that has gone and whose pid is in use again: ask anew. */
		close(p->pidfd);
		atomic_store(&p->dead, false);
		p->pidfd = peer_pidfd(sc, a->pid);
		if (p->pidfd == -2) {
			p->pidfd = -1;
			ret = -TF_EPEER;
			goto err_free;
		}
		fd = peer_fd(p, a->tpt_fd, &st);
	}
	if (fd < 0) {
		if (fd == -ESRCH)
			tf_log_error(SOFT_SUBSYS, "shm: peer %d has exited",
				     (int)a->pid);
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
	    p->tpt->version != SOFT_TPT_VERSION ||
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
	uint64_t cap = ctx->base.cfg.soft_shm_peer_cache;
	uint64_t cap_bytes = ctx->base.cfg.soft_shm_peer_cache_bytes;

	if (--p->refs)
		return;
	/* Kept for the next connection, unless it cannot serve one. */
	p->bytes = peer_bytes(p);
	p->last_use = ++sc->use_clock;
	sc->idle_bytes += p->bytes;
	atomic_fetch_add_explicit(&sc->n_idle, 1, memory_order_relaxed);
	if (atomic_load(&p->dead) || peer_closed(p)) {
		idle_drop(sc, p);
		return;
	}
	while (sc->idle_bytes > cap_bytes ||
	       atomic_load_explicit(&sc->n_idle, memory_order_relaxed) > cap) {
		struct shm_peer *lru = NULL;

		for (struct shm_peer *q = sc->peers; q; q = q->next)
			if (!q->refs && (!lru || q->last_use < lru->last_use))
				lru = q;
		if (!lru) /* every kept peer is in use again */
			break;
		idle_drop(sc, lru);
	}
}

bool soft_shm_reachable(struct soft_ctx *ctx, const struct soft_peer_addr *a)
{
	struct shm_ctx *sc = atomic_load_explicit(
		(void *_Atomic *)&ctx->shm_priv, memory_order_acquire);
	int fd;

	if (!sc)
		return pid_alive(a->pid);
	pthread_mutex_lock(&ctx->lock);
	for (struct shm_peer *p = sc->peers; p; p = p->next) {
		if (p->nonce == a->ctx_nonce && p->pid == a->pid &&
		    !atomic_load(&p->dead)) {
			pthread_mutex_unlock(&ctx->lock);
			return true;
		}
	}
	pthread_mutex_unlock(&ctx->lock);
	/* A pidfd tells as much as kill(0) does (the pid is visible here),
	 * and the connect that follows needs one. */
	fd = (int)syscall(SYS_pidfd_open, a->pid, 0);
	if (fd < 0)
		return errno == ESRCH ? false : pid_alive(a->pid);
	pthread_mutex_lock(&ctx->lock);
	if (sc->stash_fd >= 0)
		close(sc->stash_fd);
	sc->stash_fd = fd;
	sc->stash_pid = a->pid;
	pthread_mutex_unlock(&ctx->lock);
	return true;
}

bool soft_shm_peer_dead(struct shm_peer *p)
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

bool soft_shm_peer_dead_pass(struct shm_peer *p, uint64_t pass)
{
	if (p->checked_pass == pass)
		return atomic_load_explicit(&p->dead, memory_order_relaxed);
	p->checked_pass = pass;
	return soft_shm_peer_dead(p);
}

/* Mapping a region on first use: see soft_shm_int.h. */
uint8_t *soft_shm_peer_map(struct shm_peer *p, int32_t idx, uint32_t gen,
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
	fd = peer_fd(p, pfd, &st);
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

/* ------------------------------------------------------------ one peer */

/* @seg's claim once it is not being written (a claimer is between its
 * three stores); still SHM_CLAIM_BUSY only if the claimer died there. */
static uint32_t claim_wait(struct shm_seg *seg)
{
	for (uint32_t spins = 0;; spins++) {
		uint32_t st = atomic_load(&seg->claim_state);

		if (st != SHM_CLAIM_BUSY || spins == (1u << 20))
			return st;
		if ((spins & 1023) == 1023)
			sched_yield();
		else
			tf__cpu_relax();
	}
}

/* Whether @seg is claimed by QP @qpn of context @nonce (or free, when
 * @free_ok). */
static bool claim_is(struct shm_seg *seg, uint64_t nonce, uint32_t qpn,
		     bool free_ok)
{
	uint32_t st = claim_wait(seg);

	if (st == SHM_CLAIM_FREE)
		return free_ok;
	return st == SHM_CLAIM_SET &&
	       atomic_load_explicit(&seg->claim_nonce, memory_order_relaxed) ==
		       nonce &&
	       atomic_load_explicit(&seg->claim_qpn, memory_order_relaxed) ==
		       qpn;
}

/* Attach @qp to the peer's segment @rs as its one initiator: 0, or
 * -EISCONN when another QP holds it.  The exchange is a full barrier:
 * the caller reads the owner's conn_* after it (Dekker). */
static int claim(struct shm_seg *rs, struct soft_qp *qp)
{
	uint32_t st = SHM_CLAIM_FREE;

	if (atomic_compare_exchange_strong(&rs->claim_state, &st,
					   SHM_CLAIM_BUSY)) {
		atomic_store_explicit(&rs->claim_nonce, qp->ctx->nonce,
				      memory_order_relaxed);
		atomic_store_explicit(&rs->claim_qpn, qp->base.qpn,
				      memory_order_relaxed);
		atomic_store_explicit(&rs->claim_state, SHM_CLAIM_SET,
				      memory_order_release);
		return 0;
	}
	return claim_is(rs, qp->ctx->nonce, qp->base.qpn, false) ? 0 : -EISCONN;
}

/* Give up @qp's claim of @rs (destroyed, or its connect failed).  Only
 * the holder changes a set claim, so the check and the store need no
 * atomic pair. */
static void unclaim(struct shm_seg *rs, struct soft_qp *qp)
{
	if (claim_is(rs, qp->ctx->nonce, qp->base.qpn, false))
		atomic_store_explicit(&rs->claim_state, SHM_CLAIM_FREE,
				      memory_order_release);
}

/* Record in our segment the one peer QP we connect to, then check that
 * no other QP has attached to us meanwhile: the store is seq_cst and the
 * claim is read after it (Dekker with claim() of an initiator). */
static int own_conn_set(struct soft_qp *qp)
{
	struct shm_seg *seg = own_seg(qp);
	const struct soft_peer_addr *a = &qp->peer;

	atomic_store_explicit(&seg->conn_qpn, a->qpn, memory_order_relaxed);
	atomic_store_explicit(&seg->conn_nonce, a->ctx_nonce,
			      memory_order_relaxed);
	atomic_store(&seg->conn_set, 1);
	if (claim_is(seg, a->ctx_nonce, a->qpn, true))
		return 0;
	atomic_store(&seg->conn_set, 0);
	tf_log_error(SOFT_SUBSYS,
		     "shm: qp %#x: qp %#x of context %#llx is attached to it "
		     "as its peer; connecting it to qp %#x (pid %d) is "
		     "refused",
		     qp->base.qpn, atomic_load(&seg->claim_qpn),
		     (unsigned long long)atomic_load(&seg->claim_nonce), a->qpn,
		     (int)a->pid);
	return -EISCONN;
}

/* ------------------------------------------------------------ connect */

/* Whether @rs, mapped with @size bytes, is the published segment of the
 * peer QP of @a. */
static bool seg_matches(const struct shm_seg *rs, size_t size,
			const struct soft_peer_addr *a)
{
	return __atomic_load_n(&rs->magic, __ATOMIC_ACQUIRE) == SHM_SEG_MAGIC &&
	       rs->version == SHM_SEG_VERSION && rs->qpn == a->qpn &&
	       rs->ctx_nonce == a->ctx_nonce && rs->hdr_size == SHM_HDR_SIZE &&
	       rs->ring_size >= 4096 &&
	       !(rs->ring_size & (rs->ring_size - 1)) &&
	       (size_t)rs->ring_size + SHM_HDR_SIZE == size;
}

/*
 * The peer's segment at its fd @a->qp_fd if we keep it mapped and it now
 * serves the peer QP of @a (the peer reused it: the header names that QP,
 * whose number no earlier QP of the context had).  A kept mapping that
 * does not is unmapped: the peer has given that fd to another file, or to
 * none.  ctx->lock held.
 */
static struct shm_seg_map *seg_map_find(struct shm_peer *p,
					const struct soft_peer_addr *a)
{
	for (uint32_t i = 0; i < p->n_seg_maps; i++) {
		struct shm_seg_map *m = &p->seg_maps[i];

		if (!m->seg || m->fd != a->qp_fd)
			continue;
		if (m->busy)
			return NULL;
		if (seg_matches(m->seg, m->size, a)) {
			m->busy = true;
			m->last_use = ++p->sc->use_clock;
			return m;
		}
		munmap(m->seg, m->size);
		m->seg = NULL;
		return NULL;
	}
	return NULL;
}

/* Keep the mapping @rs of the peer's fd @fd for later QPs, if there is
 * room (the least recently used idle one goes): its entry, busy, or NULL.
 * ctx->lock held. */
static struct shm_seg_map *seg_map_add(struct shm_peer *p, struct shm_seg *rs,
				       size_t size, int32_t fd)
{
	uint32_t cap = p->sc->seg_cache;
	struct shm_seg_map *m = NULL;

	if (!cap)
		return NULL;
	if (!p->seg_maps) {
		p->seg_maps = tf__calloc(cap, sizeof(*p->seg_maps));
		if (!p->seg_maps)
			return NULL;
	}
	for (uint32_t i = 0; i < p->n_seg_maps && !m; i++)
		if (!p->seg_maps[i].seg)
			m = &p->seg_maps[i];
	if (!m && p->n_seg_maps < cap)
		m = &p->seg_maps[p->n_seg_maps++];
	for (uint32_t i = 0; i < p->n_seg_maps && !m; i++) {
		struct shm_seg_map *q = &p->seg_maps[i];

		if (!q->busy && (!m || q->last_use < m->last_use))
			m = q;
	}
	if (!m)
		return NULL;
	if (m->seg)
		munmap(m->seg, m->size);
	*m = (struct shm_seg_map){.seg = rs,
				  .size = size,
				  .fd = fd,
				  .busy = true,
				  .last_use = ++p->sc->use_clock};
	return m;
}

/* Done with the peer's segment: kept mapped, or unmapped. */
static void seg_unmap(struct soft_ctx *ctx, struct shm_qp *s)
{
	if (s->rmap) {
		pthread_mutex_lock(&ctx->lock);
		s->rmap->busy = false;
		pthread_mutex_unlock(&ctx->lock);
		s->rmap = NULL;
	} else {
		munmap(s->rseg, s->rseg_size);
	}
}

/* A peer CQ as its QP's segment names it: none unless it is a slot with
 * a generation and an eventfd number. */
static void peer_cq_init(struct shm_peer_cq *cq, uint32_t slot, uint32_t gen,
			 int32_t efd_num)
{
	cq->slot = slot;
	cq->gen = gen;
	cq->efd_num = efd_num;
	cq->fd = slot < SOFT_CQ_WAKE_SLOTS && gen && efd_num >= 0 ? -1 : -2;
}

int soft_shm_connect(struct soft_qp *qp)
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

		soft_shm_qp_addr(qp, &me);
	}
	s = tf__calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->rqpn = a->qpn;
	ret = own_conn_set(qp);
	if (ret)
		goto err_free;
	pthread_mutex_lock(&ctx->lock);
	ret = peer_get(ctx, a, &s->peer);
	if (!ret)
		s->rmap = seg_map_find(s->peer, a);
	pthread_mutex_unlock(&ctx->lock);
	if (ret)
		goto err_conn;
	if (s->rmap) {
		rs = s->rmap->seg;
		s->rseg = rs;
		s->rseg_size = s->rmap->size;
		goto have_seg;
	}
	fd = peer_fd(s->peer, a->qp_fd, &st);
	if (fd < 0) {
		if (fd == -ESRCH)
			tf_log_error(SOFT_SUBSYS, "shm: peer %d has exited",
				     (int)a->pid);
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
	if (!seg_matches(rs, s->rseg_size, a)) {
		tf_log_error(SOFT_SUBSYS,
			     "shm: peer qp %#x segment does not match its "
			     "address",
			     a->qpn);
		ret = -TF_EPEER;
		goto err_unmap;
	}
	pthread_mutex_lock(&ctx->lock);
	s->rmap = seg_map_add(s->peer, rs, s->rseg_size, a->qp_fd);
	pthread_mutex_unlock(&ctx->lock);
have_seg:
	/* One initiator per QP, and its peer must be us: claim first, then
	 * read the owner's record (Dekker with own_conn_set of the owner).
	 * Then the header must still name the QP: the owner reuses a
	 * segment only once no claim is left, and unpublishes it before. */
	ret = claim(rs, qp);
	if (!ret && (!shm_peer_is_us(rs, qp, false) ||
		     !seg_matches(rs, s->rseg_size, a))) {
		unclaim(rs, qp);
		ret = -EISCONN;
	}
	if (ret) {
		tf_log_error(SOFT_SUBSYS,
			     "shm: qp %#x: peer qp %#x (pid %d) is connected "
			     "to another queue pair; a queue pair has one peer",
			     qp->base.qpn, a->qpn, (int)a->pid);
		goto err_unmap;
	}
	s->rring = (uint8_t *)rs + SHM_HDR_SIZE;
	s->rring_mask = rs->ring_size - 1;
	/* We are the only producer of the peer's ring. */
	s->tx_tail = atomic_load(&rs->tail);
	s->tx_seq = s->acked = atomic_load(&rs->ack_seq);
	s->nak_gen_seen = atomic_load(&rs->nak_gen);
	atomic_store(&rs->peer_pid, (int32_t)soft_self_pid(ctx));
	s->rx_head = atomic_load(&own_seg(qp)->head);
	s->rx_seq = atomic_load(&own_seg(qp)->ack_seq);
	s->my_nak_gen = atomic_load(&own_seg(qp)->nak_gen);
	/* The peer's word, checked where it is used. */
	peer_cq_init(&s->rcq, atomic_load(&rs->rcq_slot),
		     atomic_load(&rs->rcq_gen), atomic_load(&rs->rcq_efd));
	peer_cq_init(&s->scq, atomic_load(&rs->scq_slot),
		     atomic_load(&rs->scq_gen), atomic_load(&rs->scq_efd));
	soft_qp_lock(qp);
	/* Release: the hint reads of progress see an initialized state. */
	__atomic_store_n(&qp->tp_priv, s, __ATOMIC_RELEASE);
	soft_qp_unlock(qp);
	return 0;

err_unmap:
	seg_unmap(ctx, s);
err_peer:
	pthread_mutex_lock(&ctx->lock);
	peer_put(ctx, s->peer);
	pthread_mutex_unlock(&ctx->lock);
err_conn:
	atomic_store(&own_seg(qp)->conn_set, 0);
err_free:
	tf__free(s);
	return ret;
}

void soft_shm_qp_fini(struct soft_qp *qp)
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
	/* The peer QP may take another initiator now (it still refuses
	 * any but us: its conn_* record stays). */
	unclaim(s->rseg, qp);
	if (s->rcq.fd >= 0)
		wake_fd_close(ctx, s->rcq.fd);
	if (s->scq.fd >= 0)
		wake_fd_close(ctx, s->scq.fd);
	seg_unmap(ctx, s);
	pthread_mutex_lock(&ctx->lock);
	peer_put(ctx, s->peer);
	pthread_mutex_unlock(&ctx->lock);
	tf__free(s);
	qp->tp_priv = NULL;
}

/*
 * The peer's eventfd number @num (its word: its context's wake-up fd, or a
 * CQ's) as our descriptor, counted in wake_fds, if it is an eventfd: -2
 * otherwise.  pidfd_getfd only (an eventfd is no file, so /proc cannot
 * reopen it), with the same permission check as process_vm_writev.
 */
static int peer_eventfd(struct shm_peer *p, int num)
{
	char path[64], link[32];
	ssize_t n;
	int fd;

	if (p->pidfd < 0 || num < 0)
		return -2;
	fd = (int)syscall(SYS_pidfd_getfd, p->pidfd, num, 0);
	if (fd < 0) {
		tf_log_debug(SOFT_SUBSYS,
			     "shm: cannot get peer %d's eventfd %d: %m",
			     (int)p->pid, num);
		return -2;
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n >= 0)
		link[n] = 0;
	if (n < 0 || strcmp(link, "anon_inode:[eventfd]") != 0) {
		tf_log_debug(SOFT_SUBSYS, "shm: peer %d's fd %d is no eventfd",
			     (int)p->pid, num);
		close(fd);
		return -2;
	}
	TF_STAT_ADD(&p->sc->ctx->base, wake_fds, 1);
	return fd;
}

enum shm_cq_wake soft_shm_wake_cq(struct soft_qp *qp, struct shm_qp *s,
				  struct shm_peer_cq *cq)
{
	_Atomic uint32_t *w;
	uint64_t one = 1;
	uint32_t v;

	/* One CQ for both (a session's data QP): one eventfd. */
	if (cq == &s->scq && s->scq.slot == s->rcq.slot &&
	    s->scq.gen == s->rcq.gen)
		cq = &s->rcq;
	if (cq->fd == -2)
		return SHM_CQ_UNKNOWN;
	w = &s->peer->ctl->cq_wake[cq->slot];
	v = atomic_load(w);
	if (v >> 1 != cq->gen)
		return SHM_CQ_UNKNOWN; /* not that CQ any more */
	if (!(v & 1))
		return SHM_CQ_NOT_ARMED;
	if (cq->fd == -1) {
		cq->fd = peer_eventfd(s->peer, cq->efd_num);
		if (cq->fd < 0)
			return SHM_CQ_UNKNOWN;
	}
	/* Taken by another waker (who writes the eventfd) or consumed by
	 * the owner's completion (which did): woken either way. */
	if (!atomic_compare_exchange_strong(w, &v, v & ~1u)) {
		if (v >> 1 != cq->gen || (v & 1))
			return SHM_CQ_UNKNOWN;
		atomic_fetch_add(&s->peer->wakes, 1);
		return SHM_CQ_WOKEN;
	}
	if (write(cq->fd, &one, sizeof(one)) < 0 && errno != EAGAIN) {
		tf_log_debug(SOFT_SUBSYS, "shm: waking peer %d's CQ: %m",
			     (int)s->peer->pid);
		return SHM_CQ_UNKNOWN;
	}
	atomic_fetch_add(&s->peer->wakes, 1);
	TF_STAT_ADD(&qp->ctx->base, cq_wakes_direct, 1);
	return SHM_CQ_WOKEN;
}

void soft_shm_owe(struct shm_qp *s)
{
	/* Nothing unacknowledged (a ring that only tells of an error): no
	 * sender waits for this peer. */
	if (s->acked >= s->tx_seq)
		return;
	/* After the count it is compared with, so that a wake-up between
	 * them is seen as one since the debt (a debt paid early, not lost). */
	atomic_store(&s->peer->debt, atomic_load(&s->peer->wakes) + 1);
	atomic_store(&s->peer->sc->owed, true);
	if (!s->owed_ns)
		s->owed_ns = tf__now_ns();
	s->owed_seq = s->tx_seq;
}

void soft_shm_owed_check(struct shm_qp *s)
{
	struct shm_peer *p = s->peer;

	if (s->acked >= s->owed_seq ||
	    atomic_load(&p->debt) != atomic_load(&p->wakes) + 1) {
		s->owed_ns = s->owed_seq = 0; /* acknowledged, or woken */
		return;
	}
	if (tf__now_ns() - s->owed_ns < SHM_OWED_NS)
		return;
	s->owed_ns = s->owed_seq = 0;
	if (soft_shm_wake_peer(p))
		TF_STAT_ADD(&p->sc->ctx->base, wakes_owed_paid, 1);
}

void soft_shm_pay_owed(struct soft_ctx *ctx)
{
	struct shm_ctx *sc = atomic_load_explicit(
		(void *_Atomic *)&ctx->shm_priv, memory_order_acquire);

	/* Taken before the walk: a debt made during it sets it again. */
	if (!sc || !atomic_load_explicit(&sc->owed, memory_order_relaxed) ||
	    !atomic_exchange(&sc->owed, false))
		return;
	pthread_mutex_lock(&ctx->lock);
	for (struct shm_peer *p = sc->peers; p; p = p->next) {
		if (atomic_load(&p->debt) == atomic_load(&p->wakes) + 1 &&
		    soft_shm_wake_peer(p))
			TF_STAT_ADD(&ctx->base, wakes_owed_paid, 1);
	}
	pthread_mutex_unlock(&ctx->lock);
}

void soft_shm_tx_wait(struct soft_qp *qp, bool waiting)
{
	qp->tx_wait_pub = waiting;
	/* Sequentially consistent, as the peer's look at it after it
	 * published its acknowledgements: either the peer sees the flag,
	 * or this side's next progress sees the acknowledgements. */
	atomic_store(&own_seg(qp)->tx_wait, waiting);
}

bool soft_shm_wake_peer(struct shm_peer *p)
{
	int fd = atomic_load_explicit(&p->wake_fd, memory_order_acquire);
	uint64_t one = 1;

	if (fd == -1) {
		int expect = -1, nfd = peer_eventfd(p, p->tpt->wake_fd);

		if (!atomic_compare_exchange_strong(&p->wake_fd, &expect,
						    nfd)) {
			if (nfd >= 0)
				wake_fd_close(p->sc->ctx, nfd);
			nfd = expect;
		}
		fd = nfd;
	}
	if (fd < 0)
		return false;
	if (write(fd, &one, sizeof(one)) < 0 && errno != EAGAIN) {
		tf_log_debug(SOFT_SUBSYS, "shm: waking peer %d: %m",
			     (int)p->pid);
		return false;
	}
	atomic_fetch_add(&p->wakes, 1);
	return true;
}
