/* SPDX-License-Identifier: MIT */
/*
 * soft.c - the soft provider: a NIC in software.  This file holds the
 * context (TPT, translation model, progress and its optional thread), PDs,
 * tf_mem_alloc, capabilities, and the QP address blob and connection
 * (transport choice).  See soft_int.h for the map of the other files.
 *
 * Address blob (SOFT_ADDR_VERSION 1), all integers little-endian:
 *   off len field
 *     0   4 magic "TFSB"
 *     4   2 version
 *     6   2 length of the blob (SOFT_ADDR_LEN)
 *     8   4 flags: 1 shm part present, 2 tcp part present
 *    12   4 QP number          16  4 PD id        20  4 QP access flags
 *    24   8 context nonce      32 16 host id (boot id)
 *    48   4 shm: pid           52  4 shm: TPT memfd  56  4 shm: QP memfd
 *    60   1 tcp: family (0, 4 or 6)   61  1 reserved (0)
 *    62   2 tcp: port          64 16 tcp: address (IPv4 in the first 4)
 * Every field is checked on decode: a wrong magic is -TF_EPEER (not ours),
 * a version we do not speak -TF_EVERSION, anything malformed -TF_EWIRE.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "soft_int.h"

#define SOFT_ADDR_LEN 80

/* ------------------------------------------------------------ context */

/* The boot id names this kernel instance: peers with the same one share
 * the host (and can use shm). */
static void read_host_id(uint8_t id[16])
{
	char buf[64];
	int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	int k = 0;

	if (fd >= 0)
		close(fd);
	if (n > 0) {
		buf[n] = 0;
		for (char *p = buf; *p && k < 32; p++) {
			int v;

			if (*p >= '0' && *p <= '9')
				v = *p - '0';
			else if (*p >= 'a' && *p <= 'f')
				v = *p - 'a' + 10;
			else
				continue;
			if (k & 1)
				id[k / 2] |= (uint8_t)v;
			else
				id[k / 2] = (uint8_t)(v << 4);
			k++;
		}
	}
	if (k != 32) {
		/* A unique id: never equal to a peer's, so tcp is used. */
		tf_log_info(SOFT_SUBSYS, "no boot id; shm peers not detected");
		tf__random(id, 16);
	}
}

static void *progress_thread(void *arg)
{
	struct soft_ctx *ctx = arg;
	uint32_t idle = 0;
	long sleep_ns = 1000;

	/* Bounded spin while there is traffic, then sleep with a backoff up
	 * to 1 ms, so that an idle context costs almost nothing and a
	 * passive peer still serves requests and CQ fd waiters wake. */
	while (!atomic_load_explicit(&ctx->progress_stop,
				     memory_order_relaxed)) {
		if (soft_progress(&ctx->base) > 0) {
			idle = 0;
			sleep_ns = 1000;
			continue;
		}
		if (++idle < 2000) {
			tf__cpu_relax();
			continue;
		}
		struct timespec ts = {0, sleep_ns};

		nanosleep(&ts, NULL);
		if (sleep_ns < 1000000)
			sleep_ns *= 2;
	}
	return NULL;
}

static int soft_context_open(const struct tf_config *cfg,
			     struct tf_context **ctx_p)
{
	struct soft_ctx *ctx;
	int ret;

	ctx = tf__calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	ctx->base.cfg = *cfg;
	snprintf(ctx->base.device, sizeof(ctx->base.device), "soft");
	ctx->tpt_fd = -1;
	ctx->pagemap_fd = -1;
	ctx->wake_efd = -1;
	ctx->ev_epfd = -1;
	ctx->prog_epfd = -1;
	ctx->waker_efd = -1;
	if (!strcmp(cfg->soft_transport, "auto")) {
		ctx->want_shm = true;
		ctx->want_tcp = true;
	} else if (!strcmp(cfg->soft_transport, "shm")) {
		ctx->want_shm = true;
	} else if (!strcmp(cfg->soft_transport, "tcp")) {
		ctx->want_tcp = true;
	} else {
		tf_log_error(SOFT_SUBSYS,
			     "TOLLFREE_SOFT_TRANSPORT='%s': expected auto, shm "
			     "or tcp",
			     cfg->soft_transport);
		ret = -EINVAL;
		goto err_free;
	}
	tf__fork_init();
	ctx->fork_gen = tf__fork_gen();
	ctx->pid = getpid();
	ret = tf__random(&ctx->nonce, sizeof(ctx->nonce));
	if (ret)
		goto err_free;
	read_host_id(ctx->host_id);
	ctx->pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	if (ctx->pagemap_fd < 0) {
		ret = -errno;
		tf_log_error(SOFT_SUBSYS, "open /proc/self/pagemap: %m");
		goto err_free;
	}
	ctx->qp_tab = tf__calloc(SOFT_MAX_QP, sizeof(*ctx->qp_tab));
	ctx->qps = tf__calloc(SOFT_MAX_QP, sizeof(*ctx->qps));
	if (!ctx->qp_tab || !ctx->qps) {
		ret = -ENOMEM;
		goto err_tabs;
	}
	pthread_mutex_init(&ctx->lock, NULL);
	pthread_mutex_init(&ctx->progress_lock, NULL);
	soft_qmem_init(ctx);
	ret = soft_tpt_init(ctx);
	if (ret)
		goto err_locks;
	ret = soft_xlate_init(ctx);
	if (ret)
		goto err_tpt;
	ctx->wake_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ctx->waker_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ctx->ev_epfd = epoll_create1(EPOLL_CLOEXEC);
	ctx->prog_epfd = epoll_create1(EPOLL_CLOEXEC);
	if (ctx->wake_efd < 0 || ctx->waker_efd < 0 || ctx->ev_epfd < 0 ||
	    ctx->prog_epfd < 0) {
		ret = -errno;
		tf_log_error(SOFT_SUBSYS, "eventfd/epoll_create1: %m");
		goto err_wake;
	}
	{
		struct epoll_event ev = {.events = EPOLLIN};

		if (epoll_ctl(ctx->ev_epfd, EPOLL_CTL_ADD, ctx->wake_efd,
			      &ev) ||
		    epoll_ctl(ctx->ev_epfd, EPOLL_CTL_ADD, ctx->waker_efd,
			      &ev)) {
			ret = -errno;
			tf_log_error(SOFT_SUBSYS, "epoll_ctl(wake): %m");
			goto err_wake;
		}
	}
	ctx->tpt->wake_fd = ctx->wake_efd;
	if (cfg->soft_progress_thread) {
		ret = -pthread_create(&ctx->progress_thread, NULL,
				      progress_thread, ctx);
		if (ret) {
			tf_log_error(SOFT_SUBSYS,
				     "cannot start the progress thread: %s",
				     strerror(-ret));
			goto err_wake;
		}
		ctx->progress_running = true;
	}
	*ctx_p = &ctx->base;
	return 0;

err_wake:
	if (ctx->prog_epfd >= 0)
		close(ctx->prog_epfd);
	if (ctx->ev_epfd >= 0)
		close(ctx->ev_epfd);
	if (ctx->waker_efd >= 0)
		close(ctx->waker_efd);
	if (ctx->wake_efd >= 0)
		close(ctx->wake_efd);
	soft_xlate_fini(ctx);
err_tpt:
	soft_tpt_fini(ctx);
err_locks:
	soft_qmem_fini(ctx);
	pthread_mutex_destroy(&ctx->progress_lock);
	pthread_mutex_destroy(&ctx->lock);
err_tabs:
	tf__free(ctx->qps);
	tf__free(ctx->qp_tab);
	close(ctx->pagemap_fd);
err_free:
	tf__free(ctx);
	return ret;
}

static void waker_stop(struct soft_ctx *ctx);

static void soft_context_close(struct tf_context *base)
{
	struct soft_ctx *ctx = soft_ctx_of(base);

	if (ctx->progress_running) {
		atomic_store(&ctx->progress_stop, true);
		pthread_join(ctx->progress_thread, NULL);
	}
	waker_stop(ctx);
	if (ctx->tcp_up)
		soft_tcp_transport.ctx_fini(ctx);
	/* QP creation may have set up shm state before any address. */
	if (ctx->shm_up || ctx->shm_priv)
		soft_shm_transport.ctx_fini(ctx);
	close(ctx->ev_epfd);
	close(ctx->prog_epfd);
	close(ctx->waker_efd);
	close(ctx->wake_efd);
	soft_xlate_fini(ctx);
	soft_tpt_fini(ctx);
	soft_qmem_fini(ctx);
	pthread_mutex_destroy(&ctx->progress_lock);
	pthread_mutex_destroy(&ctx->lock);
	tf__free(ctx->qps);
	tf__free(ctx->qp_tab);
	close(ctx->pagemap_fd);
	tf__free(ctx);
}

/* Bring a transport's context part up on first use. */
static int tp_up(struct soft_ctx *ctx, const struct soft_transport_ops *tp)
{
	_Atomic bool *up =
		tp == &soft_shm_transport ? &ctx->shm_up : &ctx->tcp_up;
	int ret = 0;

	pthread_mutex_lock(&ctx->lock);
	if (!*up) {
		ret = tp->ctx_init ? tp->ctx_init(ctx) : 0;
		if (!ret && tp->wait_fd) {
			struct epoll_event ev = {.events = EPOLLIN};
			int fd = tp->wait_fd(ctx);

			if (fd >= 0 &&
			    (epoll_ctl(ctx->ev_epfd, EPOLL_CTL_ADD, fd, &ev) ||
			     epoll_ctl(ctx->prog_epfd, EPOLL_CTL_ADD, fd, &ev)))
				tf_log_warn(SOFT_SUBSYS,
					    "%s: cannot watch its fd for CQ "
					    "and progress events: %m",
					    tp->name);
		}
		if (!ret)
			*up = true;
	}
	pthread_mutex_unlock(&ctx->lock);
	return ret;
}

_Thread_local bool soft_in_progress;

/* @woken: the wait set fired, so the sockets are worth a look. */
static int progress_ctx(struct soft_ctx *ctx, bool woken)
{
	int n = 0;

	uint32_t tick = atomic_load_explicit(&ctx->tick, memory_order_relaxed);
	bool shm, tcp, eng;

	/* Racy increment: it only paces rare work. */
	atomic_store_explicit(&ctx->tick, tick + 1, memory_order_relaxed);
	shm = ctx->shm_up && soft_shm_need_progress(ctx);
	/* tcp progress polls sockets (a system call): only while some QP
	 * uses tcp, and now and then for connections still lingering. */
	tcp = ctx->tcp_up &&
	      (woken ||
	       atomic_load_explicit(&ctx->n_tcp_qps, memory_order_relaxed) ||
	       !(tick & 63));
	eng = atomic_load_explicit(&ctx->n_kick, memory_order_relaxed);
	if (!shm && !tcp && !eng)
		return 0;
	/* One progressor at a time; the others have nothing to add. */
	if (pthread_mutex_trylock(&ctx->progress_lock))
		return 0;
	if (shm)
		n += soft_shm_transport.progress(ctx);
	if (tcp) {
		soft_in_progress = true;
		n += soft_tcp_transport.progress(ctx);
		soft_in_progress = false;
		/* Target-side accesses are over once progress returns. */
		soft_tpt_access_done(ctx);
	}
	n += soft_engine_progress(ctx);
	pthread_mutex_unlock(&ctx->progress_lock);
	return n;
}

int soft_progress(struct tf_context *base)
{
	return progress_ctx(soft_ctx_of(base), false);
}

/* ------------------------------------------------------------- waker */

/*
 * The waker makes tf_cq_fd work for an application that sleeps on it and
 * calls nothing: while some CQ of the context is armed, it sleeps in
 * epoll_wait on the context's one wait set (ev_epfd: the eventfd that
 * shm peers write after ringing the doorbell, the tcp transport's
 * sockets) and makes progress when it fires.  A completion that lands in
 * an armed CQ then writes that CQ's eventfd (soft_cq_push), which is what
 * tf_cq_fd returns.
 *
 * Why a thread: before it, each CQ's fd was an epoll set nesting the
 * context's set, so that any remote event woke the sleeper, who then
 * polled.  Every such nesting is a wakeup path the kernel counts for each
 * source below it, and it refuses more than 500 paths at depth 2 and 100
 * at depth 3 (tcp sockets sit one level deeper): tf_cq_create failed with
 * EINVAL after about 250 QPs over shm and 50 over tcp per context.  A CQ
 * is now one eventfd and nothing nests, so the QP limit is max_qp
 * (SOFT_MAX_QP) and the descriptor limit.
 *
 * While no CQ is armed the waker parks on waker_efd alone: the wait set is
 * level-triggered, and a socket with unread data would otherwise keep it
 * busy while the application polls.  It starts at the first arm (contexts
 * that never wait on a CQ fd have none) and stops at close.  It takes only
 * what a progress call takes (progress_lock with trylock).
 */
static void *waker_main(void *arg)
{
	struct soft_ctx *ctx = arg;
	long backoff_ns = 0;
	bool again = false;
	uint64_t v;

	while (!atomic_load(&ctx->waker_stop)) {
		struct epoll_event ev[8];
		int done = 0;

		if (!atomic_load(&ctx->n_armed)) {
			struct pollfd pfd = {.fd = ctx->waker_efd,
					     .events = POLLIN};

			/* Announce the park, then look again: an arm either
			 * sees the flag (and writes waker_efd) or is seen
			 * here (both sequentially consistent). */
			atomic_store(&ctx->waker_parked, true);
			if (!atomic_load(&ctx->n_armed) &&
			    !atomic_load(&ctx->waker_stop))
				(void)poll(&pfd, 1, -1);
			atomic_store(&ctx->waker_parked, false);
			(void)!read(ctx->waker_efd, &v, sizeof(v));
			continue;
		}
		if (!again && epoll_wait(ctx->ev_epfd, ev, 8, -1) < 0 &&
		    errno != EINTR) {
			/* Cannot happen with a valid set; do not spin. */
			tf_log_error(SOFT_SUBSYS, "waker: epoll_wait: %m");
			backoff_ns = 1000000;
		}
		/* Consumed before progress: a doorbell rung after the
		 * progress below writes it again and wakes us again. */
		(void)!read(ctx->wake_efd, &v, sizeof(v));
		(void)!read(ctx->waker_efd, &v, sizeof(v));
		for (int i = 0; i < 64; i++) {
			int k = progress_ctx(ctx, true);

			if (k <= 0)
				break;
			done += k;
		}
		if (done) {
			backoff_ns = 0;
			continue;
		}
		/* Fired, nothing to do: another thread is making that
		 * progress, or a socket stays writable.  Let it, briefly. */
		backoff_ns = backoff_ns ? backoff_ns * 2 : 1000;
		if (backoff_ns > 100000)
			backoff_ns = 100000;
		{
			struct timespec ts = {0, backoff_ns};

			nanosleep(&ts, NULL);
		}
		/* That other thread's pass may have read the doorbell
		 * before the ring that woke us (its progress lock made ours
		 * a no-op): then nobody would read the message, and nothing
		 * would wake us again.  Look again instead of sleeping while
		 * a doorbell is unseen. */
		again = ctx->shm_up && soft_shm_doorbell_unseen(ctx);
	}
	return NULL;
}

int soft_waker_armed(struct soft_ctx *ctx, bool first)
{
	uint64_t one = 1;
	int ret = 0;

	if (TF__UNLIKELY(!atomic_load_explicit(&ctx->waker_running,
					       memory_order_acquire))) {
		sigset_t all, old;

		pthread_mutex_lock(&ctx->lock);
		if (!atomic_load(&ctx->waker_running)) {
			/* The thread must never run a user's signal
			 * handler. */
			sigfillset(&all);
			pthread_sigmask(SIG_SETMASK, &all, &old);
			ret = -pthread_create(&ctx->waker, NULL, waker_main,
					      ctx);
			pthread_sigmask(SIG_SETMASK, &old, NULL);
			if (ret)
				tf_log_error(SOFT_SUBSYS,
					     "cannot start the CQ fd waker: "
					     "%s",
					     strerror(-ret));
			else
				ctx->waker_pid = getpid();
			atomic_store_explicit(&ctx->waker_running, !ret,
					      memory_order_release);
		}
		pthread_mutex_unlock(&ctx->lock);
		if (ret)
			return ret;
	}
	/* Only the first arm can find the waker parked (it parks only
	 * while nothing is armed). */
	if (first && atomic_load(&ctx->waker_parked) &&
	    write(ctx->waker_efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		tf_log_warn(SOFT_SUBSYS, "waker eventfd write: %m");
	return 0;
}

/* Before the transports go: the waker makes progress. */
static void waker_stop(struct soft_ctx *ctx)
{
	uint64_t one = 1;

	/* A forked child has the flag but not the thread. */
	if (!ctx->waker_running || ctx->waker_pid != getpid())
		return;
	atomic_store(&ctx->waker_stop, true);
	if (write(ctx->waker_efd, &one, sizeof(one)) < 0)
		tf_log_warn(SOFT_SUBSYS, "waker eventfd write: %m");
	pthread_join(ctx->waker, NULL);
	ctx->waker_running = false;
}

/* The transports' wait set (soft_int.h, prog_epfd): tcp's sockets, the
 * only ones whose peers wait on this side's progress. */
static int soft_progress_fd(struct tf_context *base)
{
	return soft_ctx_of(base)->prog_epfd;
}

static int soft_query_caps(struct tf_context *base, tf_caps_t *caps)
{
	struct soft_ctx *ctx = soft_ctx_of(base);
	const struct tf_config *cfg = &base->cfg;

	caps->flags = TF_CAP_MW_TYPE2 | TF_CAP_ATOMIC | TF_CAP_SEND_WITH_INV |
		      TF_CAP_MEM_ALLOC | TF_CAP_CQ_FD | TF_CAP_INLINE |
		      TF_CAP_IMM_DATA | TF_CAP_REMOTE_ACK;
	if (ctx->progress_running)
		caps->flags |= TF_CAP_AUTO_PROGRESS;
	caps->max_mr_size = 1ull << 40;
	caps->max_mr = (uint32_t)cfg->soft_max_mr;
	caps->max_mw = (uint32_t)cfg->soft_max_mr;
	caps->max_qp = SOFT_MAX_QP;
	caps->max_qp_wr = (uint32_t)cfg->qp_max_wr;
	caps->max_cqe = (uint32_t)cfg->cq_max_depth;
	caps->max_sge = 64;
	caps->max_sge_rd = 64;
	caps->max_inline_data = 65536;
	caps->max_msg_size = cfg->soft_max_msg > UINT32_MAX
				     ? UINT32_MAX
				     : (uint32_t)cfg->soft_max_msg;
	snprintf(caps->device, sizeof(caps->device), "soft");
	if (ctx->want_shm && ctx->want_tcp) {
		/* "auto" chooses per peer at connect: say what it has
		 * chosen so far, "auto" alone before the first connect. */
		static const char *const chosen[] = {
			"auto", "auto:shm", "auto:tcp", "auto:shm+tcp"};
		unsigned tp = atomic_load_explicit(&ctx->tp_chosen,
						   memory_order_relaxed);

		snprintf(caps->transport, sizeof(caps->transport), "%s",
			 chosen[tp & 3]);
	} else {
		snprintf(caps->transport, sizeof(caps->transport), "%s",
			 ctx->want_shm ? "shm" : "tcp");
	}
	return 0;
}

/* ------------------------------------------------------------ memory */

/*
 * tf_mem_alloc memory is a memfd mapped MAP_SHARED, listed in the TPT's
 * shared-memory table: a same-host initiator maps it too (through
 * /proc/<pid>/fd/<fd>), so its WRITE/READ/atomics on it are plain loads
 * and stores.  When the table is full, plain anonymous memory is returned
 * (peers then use process_vm_readv/writev).
 */
static int soft_mem_alloc(struct tf_context *base, size_t size, void **addr_p)
{
	struct soft_ctx *ctx = soft_ctx_of(base);
	size_t len = (size + SOFT_PAGE_SIZE - 1) & ~(SOFT_PAGE_SIZE - 1);
	void *p;
	int fd, ret;

	if (len < size)
		return -EINVAL;
	fd = memfd_create("tollfree-mem", MFD_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		tf_log_error(SOFT_SUBSYS, "mem_alloc: memfd_create: %m");
		return ret;
	}
	if (ftruncate(fd, (off_t)len)) {
		ret = -errno;
		tf_log_error(SOFT_SUBSYS, "mem_alloc: ftruncate(%zu): %m", len);
		close(fd);
		return ret == -EFBIG || ret == -ENOSPC ? -ENOMEM : ret;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		tf_log_error(SOFT_SUBSYS, "mem_alloc: mmap(%zu): %m", len);
		close(fd);
		return -ENOMEM;
	}
	if (soft_shmem_register(ctx, fd, p, len)) {
		tf_log_info(SOFT_SUBSYS,
			    "mem_alloc: %u shared regions in use; this one "
			    "is private",
			    SOFT_MAX_SHMEM);
		close(fd); /* the mapping stays valid */
	}
	*addr_p = p;
	return 0;
}

static void soft_mem_free(struct tf_context *base, void *addr, size_t size)
{
	struct soft_ctx *ctx = soft_ctx_of(base);
	size_t len = (size + SOFT_PAGE_SIZE - 1) & ~(SOFT_PAGE_SIZE - 1);
	int fd = -1;

	pthread_mutex_lock(&ctx->lock);
	for (uint32_t i = 0; i < SOFT_MAX_SHMEM; i++)
		if (ctx->tpt->shmem[i].fd >= 0 &&
		    ctx->tpt->shmem[i].addr == (uintptr_t)addr) {
			fd = ctx->tpt->shmem[i].fd;
			len = ctx->tpt->shmem[i].size;
			break;
		}
	pthread_mutex_unlock(&ctx->lock);
	if (fd >= 0) {
		soft_shmem_unregister(ctx, addr);
		close(fd);
	}
	if (munmap(addr, len))
		tf_log_warn(SOFT_SUBSYS, "mem_free(%p, %zu): %m", addr, size);
}

/* ------------------------------------------------------------ PD */

/* A PD is a random id: TPT entries and QP addresses carry it, and an
 * access is allowed only when the key's PD is the target QP's. */
static int soft_pd_alloc(struct tf_context *ctx, struct tf_pd **pd_p)
{
	struct soft_pd *pd = tf__calloc(1, sizeof(*pd));

	(void)ctx;
	if (!pd)
		return -ENOMEM;
	/* The PD id is checked on every remote access: never guessable. */
	pd->pd_id = tf__random_u32();
	if (!pd->pd_id) {
		tf__free(pd);
		return -EIO;
	}
	*pd_p = &pd->base;
	return 0;
}

static int soft_pd_free(struct tf_pd *pd)
{
	tf__free(pd);
	return 0;
}

/* ------------------------------------------------------------ address blob */

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;

	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void addr_encode(const struct soft_peer_addr *a, uint8_t *b)
{
	memset(b, 0, SOFT_ADDR_LEN);
	memcpy(b, "TFSB", 4);
	put16(b + 4, SOFT_ADDR_VERSION);
	put16(b + 6, SOFT_ADDR_LEN);
	put32(b + 8, a->flags);
	put32(b + 12, a->qpn);
	put32(b + 16, a->pd_id);
	put32(b + 20, a->access);
	put64(b + 24, a->ctx_nonce);
	memcpy(b + 32, a->host_id, 16);
	if (a->flags & SOFT_ADDR_F_SHM) {
		put32(b + 48, (uint32_t)a->pid);
		put32(b + 52, (uint32_t)a->tpt_fd);
		put32(b + 56, (uint32_t)a->qp_fd);
	}
	if (a->flags & SOFT_ADDR_F_TCP) {
		b[60] = a->family;
		put16(b + 62, a->port);
		memcpy(b + 64, a->ip, 16);
	}
}

/* Decode and check every field. */
static int addr_decode(const uint8_t *b, size_t len, struct soft_peer_addr *a)
{
	static const uint8_t zero[16];

	memset(a, 0, sizeof(*a));
	if (len < 8)
		return -TF_EWIRE;
	if (memcmp(b, "TFSB", 4))
		return -TF_EPEER;
	a->version = get16(b + 4);
	if (a->version != SOFT_ADDR_VERSION)
		return -TF_EVERSION;
	if (get16(b + 6) != SOFT_ADDR_LEN || len != SOFT_ADDR_LEN)
		return -TF_EWIRE;
	a->flags = get32(b + 8);
	a->qpn = get32(b + 12);
	a->pd_id = get32(b + 16);
	a->access = get32(b + 20);
	a->ctx_nonce = get64(b + 24);
	memcpy(a->host_id, b + 32, 16);
	if (!a->flags || (a->flags & ~(SOFT_ADDR_F_SHM | SOFT_ADDR_F_TCP)) ||
	    !a->qpn || !a->pd_id || !a->ctx_nonce ||
	    (a->access &
	     ~(uint32_t)(TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_WRITE |
			 TF_ACCESS_REMOTE_ATOMIC)) ||
	    b[61])
		return -TF_EWIRE;
	a->pid = (int32_t)get32(b + 48);
	a->tpt_fd = (int32_t)get32(b + 52);
	a->qp_fd = (int32_t)get32(b + 56);
	if (a->flags & SOFT_ADDR_F_SHM) {
		if (a->pid <= 0 || a->tpt_fd < 0 || a->qp_fd < 0)
			return -TF_EWIRE;
	} else if (a->pid || a->tpt_fd || a->qp_fd) {
		return -TF_EWIRE;
	}
	a->family = b[60];
	a->port = get16(b + 62);
	memcpy(a->ip, b + 64, 16);
	if (a->flags & SOFT_ADDR_F_TCP) {
		if ((a->family != 4 && a->family != 6) || !a->port ||
		    (a->family == 4 && memcmp(a->ip + 4, zero, 12)))
			return -TF_EWIRE;
	} else if (a->family || a->port || memcmp(a->ip, zero, 16)) {
		return -TF_EWIRE;
	}
	return 0;
}

/* The blob carries every part this context can serve (both in "auto"),
 * so that the peer can choose; transports come up on first use. */
static int soft_qp_get_addr(struct tf_qp *base, void *buf, size_t *len_p)
{
	struct soft_qp *qp = soft_qp_of(base);
	struct soft_ctx *ctx = qp->ctx;
	struct soft_peer_addr me = {0};
	int ret;

	if (*len_p < SOFT_ADDR_LEN)
		return -ENOSPC;
	me.version = SOFT_ADDR_VERSION;
	me.qpn = qp->base.qpn;
	me.pd_id = qp->pd_id;
	me.access = qp->base.access;
	me.ctx_nonce = ctx->nonce;
	memcpy(me.host_id, ctx->host_id, 16);
	if (ctx->want_shm) {
		ret = tp_up(ctx, &soft_shm_transport);
		if (!ret)
			ret = soft_shm_transport.qp_addr(qp, &me);
		if (ret)
			return ret;
		me.flags |= SOFT_ADDR_F_SHM;
	}
	if (ctx->want_tcp) {
		ret = tp_up(ctx, &soft_tcp_transport);
		if (!ret)
			ret = soft_tcp_transport.qp_addr(qp, &me);
		if (ret && !(me.flags & SOFT_ADDR_F_SHM))
			return ret;
		if (ret) {
			/* auto: shm alone still reaches same-host peers. */
			tf_log_info(SOFT_SUBSYS,
				    "tcp part of the address unavailable: %s",
				    tf_strerror(ret));
			me.family = 0;
			me.port = 0;
			memset(me.ip, 0, sizeof(me.ip));
		} else {
			me.flags |= SOFT_ADDR_F_TCP;
		}
	}
	addr_encode(&me, buf);
	*len_p = SOFT_ADDR_LEN;
	return 0;
}

/* Same host and the peer's process visible from here: shm can work.
 * Both sides decide with the same rule on each other's blob, so they agree,
 * except across pid namespaces where only one side sees the other's pid;
 * force TOLLFREE_SOFT_TRANSPORT=tcp there. */
static bool shm_reachable(struct soft_ctx *ctx, const struct soft_peer_addr *p)
{
	if (!(p->flags & SOFT_ADDR_F_SHM) ||
	    memcmp(p->host_id, ctx->host_id, 16))
		return false;
	return soft_shm_reachable(ctx, p);
}

/* Choose the transport from the peer's blob (shm when reachable, else
 * tcp), connect it, and move the QP to RTS.  Work can be posted as soon as
 * this returns; a transport that connects asynchronously queues it. */
static int soft_qp_connect(struct tf_qp *base, const void *addr, size_t len)
{
	struct soft_qp *qp = soft_qp_of(base);
	struct soft_ctx *ctx = qp->ctx;
	const struct soft_transport_ops *tp = NULL;
	struct soft_peer_addr peer;
	int ret;

	ret = addr_decode(addr, len, &peer);
	if (ret) {
		tf_log_error(SOFT_SUBSYS, "qp %#x: bad peer address: %s",
			     qp->base.qpn, tf_strerror(ret));
		return ret;
	}
	if (qp->base.state != TF_QPS_INIT || qp->tp) {
		tf_log_debug(SOFT_SUBSYS, "qp %#x: connect in state %d",
			     qp->base.qpn, (int)qp->base.state);
		return -EINVAL;
	}
	if (ctx->want_shm && shm_reachable(ctx, &peer))
		tp = &soft_shm_transport;
	else if (ctx->want_tcp && (peer.flags & SOFT_ADDR_F_TCP))
		tp = &soft_tcp_transport;
	if (!tp) {
		tf_log_error(SOFT_SUBSYS,
			     "qp %#x: no common transport with the peer "
			     "(we: %s%s, peer offers:%s%s)",
			     qp->base.qpn, ctx->want_shm ? "shm " : "",
			     ctx->want_tcp ? "tcp" : "",
			     (peer.flags & SOFT_ADDR_F_SHM) ? " shm" : "",
			     (peer.flags & SOFT_ADDR_F_TCP) ? " tcp" : "");
		return -TF_EPEER;
	}
	ret = tp_up(ctx, tp);
	if (ret)
		return ret;
	soft_qp_lock(qp);
	qp->peer = peer;
	SOFT_WRITE_ONCE(qp->tp, tp);
	soft_qp_unlock(qp);
	ret = tp->connect(qp);
	soft_qp_lock(qp);
	if (ret) {
		SOFT_WRITE_ONCE(qp->tp, NULL);
		soft_qp_unlock(qp);
		return ret;
	}
	SOFT_WRITE_ONCE(qp->connected, true);
	if (tp == &soft_tcp_transport)
		atomic_fetch_add(&ctx->n_tcp_qps, 1);
	atomic_fetch_or_explicit(&ctx->tp_chosen,
				 tp == &soft_tcp_transport ? SOFT_TP_TCP
							   : SOFT_TP_SHM,
				 memory_order_relaxed);
	if (qp->base.state == TF_QPS_INIT)
		soft_qp_set_state(qp, TF_QPS_RTS); /* through RTR */
	soft_engine_kick(qp);
	soft_qp_unlock(qp);
	return 0;
}

/* ------------------------------------------------------------ ops */

static int soft_probe(const struct tf_config *cfg)
{
	(void)cfg;
	return 1;
}

static int soft_list_devices(const struct tf_config *cfg,
			     void (*fn)(const char *dev, const char *info,
					void *arg),
			     void *arg)
{
	(void)cfg;
	if (fn)
		fn("soft", "software RC provider (shm, tcp)", arg);
	return 1;
}

const struct tf_provider_ops tf_soft_provider_ops = {
	.size = sizeof(struct tf_provider_ops),
	.name = "soft",
	.probe = soft_probe,
	.list_devices = soft_list_devices,
	.context_open = soft_context_open,
	.context_close = soft_context_close,
	.query_caps = soft_query_caps,
	.progress = soft_progress,
	.progress_fd = soft_progress_fd,
	.mem_alloc = soft_mem_alloc,
	.mem_free = soft_mem_free,
	.pd_alloc = soft_pd_alloc,
	.pd_free = soft_pd_free,
	.mr_reg = soft_mr_reg,
	.mr_dereg = soft_mr_dereg,
	.mw_alloc = soft_mw_alloc,
	.mw_dealloc = soft_mw_dealloc,
	.cq_create = soft_cq_create,
	.cq_destroy = soft_cq_destroy,
	.cq_poll = soft_cq_poll,
	.cq_fd = soft_cq_fd,
	.cq_arm = soft_cq_arm,
	.qp_create = soft_qp_create,
	.qp_destroy = soft_qp_destroy,
	.qp_get_addr = soft_qp_get_addr,
	.qp_connect = soft_qp_connect,
	.qp_set_error = soft_qp_set_error,
	.post_send = soft_post_send,
	.post_recv = soft_post_recv,
};
