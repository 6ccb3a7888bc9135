/* SPDX-License-Identifier: MIT */
/*
 * soft_mr.c - registration, the TPT, memory windows and the access checks
 * of the soft provider.
 *
 * Registration does what a kernel driver does for a NIC: it pins the pages
 * (mlock) and reads their physical frames from /proc/self/pagemap into the
 * region's translation array, then writes the key into the TPT.  mlock is
 * not reference counted by the kernel (one munlock undoes any number of
 * mlocks), so a process-wide hash counts the registrations that cover each
 * page and a page is unlocked only when its last registration goes.
 *
 * Revocation (dereg, LOCAL_INV, SEND_WITH_INV, QP destroy) must be safe
 * against accesses in flight, because shm initiators access this process's
 * memory directly after a lock-free TPT lookup.  Every accessor publishes
 * the slot it uses (a word in the target QP's shared segment for shm,
 * ctx->local_active for target-side accesses), fences, and then re-reads
 * the key; the revoker clears the key, fences, and waits until no word
 * names the slot (soft_tpt_revoke).  This is Dekker's pattern: either the
 * accessor sees the cleared key, or the revoker sees the published slot.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "soft_int.h"

/* ------------------------------------------------------------ page pins */

/* Process-wide: mlock state belongs to the process, not to a context. */
static pthread_mutex_t pin_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pin_ent {
	uint64_t page; /* page number + 1; 0 unused */
	uint32_t count;
	bool external; /* locked by the application before we pinned it:
			 * never munlock()ed by us */
} * pin_tab;
static uint64_t pin_mask, pin_used;
static uint64_t pin_ours; /* pages we locked (count > 0, !external) */

static inline uint64_t pin_hash(uint64_t page)
{
	return (page * 0x9E3779B97F4A7C15ull) >> 20;
}

/* pin_lock held; inserting needs room (pin_reserve). */
static struct pin_ent *pin_find(uint64_t key, bool insert)
{
	uint64_t h = pin_hash(key) & pin_mask;

	if (!pin_tab) /* freed when the last page was unpinned */
		return NULL;
	for (;;) {
		if (pin_tab[h].page == key)
			return &pin_tab[h];
		if (!pin_tab[h].page) {
			if (!insert)
				return NULL;
			pin_tab[h].page = key;
			pin_tab[h].count = 0;
			pin_used++;
			return &pin_tab[h];
		}
		h = (h + 1) & pin_mask;
	}
}

/* pin_lock held; backward-shift deletion keeps probe chains intact. */
static void pin_del(struct pin_ent *e)
{
	uint64_t i = (uint64_t)(e - pin_tab), j = i;

	for (;;) {
		uint64_t k;

		j = (j + 1) & pin_mask;
		if (!pin_tab[j].page)
			break;
		k = pin_hash(pin_tab[j].page) & pin_mask;
		if ((j > i && (k <= i || k > j)) ||
		    (j < i && (k <= i && k > j))) {
			pin_tab[i] = pin_tab[j];
			i = j;
		}
	}
	pin_tab[i].page = 0;
	pin_used--;
}

/* pin_lock held: make room for @n more pages at load <= 1/2. */
static int pin_reserve(uint64_t n)
{
	uint64_t size = pin_mask + 1, nsize = size;
	struct pin_ent *old = pin_tab, *nt;

	if (pin_tab && (pin_used + n) * 2 <= size)
		return 0;
	if (!pin_tab)
		nsize = 1024;
	while ((pin_used + n) * 2 > nsize)
		nsize <<= 1;
	nt = tf__calloc(nsize, sizeof(*nt));
	if (!nt)
		return -ENOMEM;
	pin_tab = nt;
	pin_mask = nsize - 1;
	pin_used = 0;
	if (old) {
		for (uint64_t i = 0; i < size; i++)
			if (old[i].page)
				*pin_find(old[i].page, true) = old[i];
		tf__free(old);
	}
	return 0;
}

/* Unlock the pages of [start, start + npages) whose count dropped to 0,
 * in maximal runs.  pin_lock held. */
static void unpin_pages(uintptr_t start, size_t npages)
{
	size_t run = 0;

	for (size_t i = 0; i <= npages; i++) {
		struct pin_ent *e = NULL;
		bool freed = false;

		if (i < npages) {
			e = pin_find(start / SOFT_PAGE_SIZE + i + 1, false);
			if (e && --e->count == 0) {
				freed = !e->external;
				if (freed)
					pin_ours--;
				pin_del(e);
			}
		}
		if (freed) {
			run++;
			continue;
		}
		if (run) {
			uintptr_t a = start + (i - run) * SOFT_PAGE_SIZE;

			/* ENOMEM: already unmapped (a cache deregisters
			 * lazily, after the user's munmap). */
			if (munlock((void *)a, run * SOFT_PAGE_SIZE) &&
			    errno != ENOMEM)
				tf_log_warn(SOFT_SUBSYS,
					    "munlock(%#lx, %zu pages): %m",
					    (unsigned long)a, run);
			run = 0;
		}
	}
}

/* Locked memory of this process (VmLck), in bytes; -1 if unknown. */
static long vmlck_bytes(void)
{
	char buf[4096], *p;
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	p = strstr(buf, "\nVmLck:");
	return p ? strtol(p + 7, NULL, 10) * 1024 : -1;
}

/*
 * Mark the new pages of [start, end) that lie in VMAs the application
 * locked itself (VmFlags "lo" in /proc/self/smaps), so that deregistration
 * leaves them locked.  Slow, hence only called when VmLck shows locked
 * memory that is not ours.  pin_lock held.
 */
static void mark_external(uintptr_t start, uintptr_t end)
{
	FILE *f = fopen("/proc/self/smaps", "re");
	char line[512];
	unsigned long vs = 0, ve = 0;

	if (!f) {
		tf_log_warn(SOFT_SUBSYS, "mr_reg: /proc/self/smaps: %m");
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		unsigned long a, b;

		if (sscanf(line, "%lx-%lx ", &a, &b) == 2 &&
		    strchr(line, '-') < strchr(line, ' ')) {
			vs = a;
			ve = b;
			continue;
		}
		if (strncmp(line, "VmFlags:", 8) || !strstr(line, " lo"))
			continue;
		if (ve <= start || vs >= end)
			continue;
		for (uintptr_t pg = vs > start ? vs : start;
		     pg < (ve < end ? ve : end); pg += SOFT_PAGE_SIZE) {
			struct pin_ent *e =
				pin_find(pg / SOFT_PAGE_SIZE + 1, false);

			if (e && e->count == 1 && !e->external) {
				e->external = true;
				pin_ours--;
			}
		}
	}
	fclose(f);
}

/* A forked child inherits the table but none of the locks (mlock is not
 * inherited), and possibly a held pin_lock: start over. */
static void pin_atfork_child(void)
{
	pthread_mutex_init(&pin_lock, NULL);
	tf__free(pin_tab);
	pin_tab = NULL;
	pin_mask = pin_used = pin_ours = 0;
}

static pthread_once_t pin_once = PTHREAD_ONCE_INIT;

static void pin_init_once(void)
{
	pthread_atfork(NULL, NULL, pin_atfork_child);
}

static int pin_range(uintptr_t start, size_t npages)
{
	size_t fresh = 0;
	int ret;

	pthread_once(&pin_once, pin_init_once);
	pthread_mutex_lock(&pin_lock);
	ret = pin_reserve(npages);
	if (ret)
		goto out;
	for (size_t i = 0; i < npages; i++) {
		struct pin_ent *e =
			pin_find(start / SOFT_PAGE_SIZE + i + 1, true);

		if (!e->count++) {
			e->external = false;
			fresh++;
		}
	}
	pin_ours += fresh;
	/* mlock is not nestable: pages the application locked itself must
	 * stay locked after we deregister.  When all locked memory is ours
	 * (the usual case) none of the fresh pages can be, nor when none is
	 * locked at all (a sanitizer makes every mlock a no-op: reading
	 * smaps at each registration made them milliseconds); otherwise
	 * ask the kernel which VMAs are locked. */
	if (fresh) {
		long lck = vmlck_bytes();

		if (lck != 0 &&
		    lck != (long)((pin_ours - fresh) * SOFT_PAGE_SIZE))
			mark_external(start, start + npages * SOFT_PAGE_SIZE);
	}
	if (mlock((void *)start, npages * SOFT_PAGE_SIZE)) {
		int err = errno;
		unsigned char vec;

		/* mlock says ENOMEM both for unmapped ranges and for the
		 * locked-memory limit; mincore tells them apart. */
		if (err == ENOMEM &&
		    mincore((void *)start, npages * SOFT_PAGE_SIZE, &vec) &&
		    errno == ENOMEM) {
			ret = -EFAULT;
			tf_log_error(SOFT_SUBSYS,
				     "mr_reg: range %#lx+%zu pages is not "
				     "mapped",
				     (unsigned long)start, npages);
		} else {
			ret = err == EAGAIN ? -EAGAIN : -ENOMEM;
			tf_log_error(SOFT_SUBSYS,
				     "mr_reg: mlock of %zu bytes failed: %s "
				     "(check RLIMIT_MEMLOCK, ulimit -l)",
				     npages * SOFT_PAGE_SIZE, strerror(err));
		}
		/* Undo: pages that were pinned before keep their lock
		 * (mlock never unlocks), the new ones are unlocked. */
		unpin_pages(start, npages);
	}
out:
	pthread_mutex_unlock(&pin_lock);
	return ret;
}

static void unpin_range(uintptr_t start, size_t npages)
{
	pthread_mutex_lock(&pin_lock);
	unpin_pages(start, npages);
	/* Nothing pinned any more: give the table back, so that a process
	 * that closed every context holds no memory of ours. */
	if (!pin_used) {
		tf__free(pin_tab);
		pin_tab = NULL;
		pin_mask = 0;
	}
	pthread_mutex_unlock(&pin_lock);
}

/* Read the physical frames of the pinned range, as a driver fills its
 * MTT.  Without CAP_SYS_ADMIN the kernel reports frame 0: the cost of the
 * walk is the same, only the numbers are hidden. */
static int read_pfns(struct soft_ctx *ctx, uintptr_t start, size_t npages,
		     uint64_t *pfns)
{
	size_t done = 0;

	while (done < npages) {
		ssize_t n = pread(ctx->pagemap_fd, pfns + done,
				  (npages - done) * sizeof(uint64_t),
				  (off_t)((start / SOFT_PAGE_SIZE + done) *
					  sizeof(uint64_t)));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int ret = n < 0 ? -errno : -EFAULT;

			tf_log_error(SOFT_SUBSYS,
				     "mr_reg: reading /proc/self/pagemap: %s",
				     n < 0 ? strerror(errno) : "short read");
			return ret;
		}
		done += (size_t)n / sizeof(uint64_t);
	}
	for (size_t i = 0; i < npages; i++)
		pfns[i] = (pfns[i] >> 63) ? pfns[i] & ((1ull << 55) - 1) : 0;
	return 0;
}

/* ------------------------------------------------------------ TPT */

/* Fault in @len bytes at @p (zeroed memory, left zero): a store to each
 * page, which the compiler must keep. */
static void populate(void *p, size_t len)
{
	volatile char *c = p;

	for (size_t off = 0; off < len; off += SOFT_PAGE_SIZE)
		c[off] = 0;
}

int soft_tpt_init(struct soft_ctx *ctx)
{
	uint64_t max = ctx->base.cfg.soft_max_mr;
	uint32_t nslots = 64;
	size_t size;
	void *map;
	pthread_mutexattr_t ma;
	int ret;

	if (!max || max > (1u << 24)) {
		tf_log_error(SOFT_SUBSYS,
			     "TOLLFREE_SOFT_MAX_MR=%llu out of range 1..%u",
			     (unsigned long long)max, 1u << 24);
		return -EINVAL;
	}
	/* At most half full, so that drawing a random key with a free slot
	 * takes two tries on average. */
	while (nslots < 2 * max)
		nslots <<= 1;
	size = SOFT_PAGE_SIZE + sizeof(struct soft_tpt_hdr) +
	       (size_t)nslots * sizeof(struct soft_tpt_entry);
	size = (size + SOFT_PAGE_SIZE - 1) & ~(SOFT_PAGE_SIZE - 1);

	ctx->slot_owner = tf__calloc(nslots, sizeof(void *));
	if (!ctx->slot_owner)
		return -ENOMEM;
	/* The table's private twin, faulted in now for the same reason as
	 * the table below (1 MiB by default): over a young context's first
	 * 1,500 window binds, a bind's post took 0.8-1.1 us on average,
	 * 0.55 with it resident. */
	if (size <= SOFT_TPT_POPULATE_MAX)
		populate(ctx->slot_owner, (size_t)nslots * sizeof(void *));
	ctx->tpt_fd = memfd_create("tollfree-tpt", MFD_CLOEXEC);
	if (ctx->tpt_fd < 0) {
		ret = -errno;
		tf_log_error(SOFT_SUBSYS, "memfd_create(tpt): %m");
		goto err_owner;
	}
	if (ftruncate(ctx->tpt_fd, (off_t)size)) {
		ret = -errno;
		tf_log_error(SOFT_SUBSYS, "ftruncate(tpt, %zu): %m", size);
		goto err_close;
	}
	/* Populated now, as a NIC's key tables are allocated up front: keys
	 * land in random slots, so otherwise nearly every bind of a young
	 * context faults in (and zeroes) a fresh page of the table, a few
	 * microseconds on the path of a session's first access, until all
	 * of it (nslots * 64 bytes: 8 MiB by default) is resident anyway.
	 * Only up to SOFT_TPT_POPULATE_MAX: a table sized for millions of
	 * keys grows as it is used (population cannot fail cleanly: under a
	 * memory limit it would meet the OOM killer, not -ENOMEM). */
	map = mmap(NULL, size, PROT_READ | PROT_WRITE,
		   MAP_SHARED |
			   (size <= SOFT_TPT_POPULATE_MAX ? MAP_POPULATE : 0),
		   ctx->tpt_fd, 0);
	if (map == MAP_FAILED) {
		ret = -errno;
		tf_log_error(SOFT_SUBSYS, "mmap(tpt, %zu): %m", size);
		goto err_close;
	}
	ctx->tpt_map_size = size;
	ctx->tpt_ctl = map;
	ctx->tpt = (struct soft_tpt_hdr *)((char *)map + SOFT_PAGE_SIZE);
	ctx->tpt_mask = nslots - 1;

	pthread_mutexattr_init(&ma);
	pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
	ret = -pthread_mutex_init(&ctx->tpt_ctl->atomic_lock, &ma);
	pthread_mutexattr_destroy(&ma);
	if (ret) {
		tf_log_error(SOFT_SUBSYS, "atomic mutex init: %s",
			     strerror(-ret));
		goto err_unmap;
	}
	ctx->tpt->version = SOFT_TPT_VERSION;
	ctx->tpt->nslots = nslots;
	ctx->tpt->ctx_nonce = ctx->nonce;
	ctx->tpt->pid = ctx->pid;
	for (uint32_t i = 0; i < SOFT_MAX_SHMEM; i++)
		ctx->tpt->shmem[i].fd = -1;
	/* Peers check the magic last: publish it after the rest. */
	atomic_thread_fence(memory_order_release);
	ctx->tpt->magic = SOFT_TPT_MAGIC;
	return 0;

err_unmap:
	munmap(map, size);
err_close:
	close(ctx->tpt_fd);
	ctx->tpt_fd = -1;
err_owner:
	tf__free(ctx->slot_owner);
	ctx->slot_owner = NULL;
	return ret;
}

void soft_tpt_fini(struct soft_ctx *ctx)
{
	if (ctx->tpt_ctl) {
		/* Peers that keep this context attached (soft_shm_seg.c)
		 * see that it is gone and let it go. */
		if (ctx->tpt && ctx->fork_gen == tf__fork_gen())
			__atomic_store_n(&ctx->tpt->magic, 0, __ATOMIC_RELEASE);
		pthread_mutex_destroy(&ctx->tpt_ctl->atomic_lock);
		munmap(ctx->tpt_ctl, ctx->tpt_map_size);
	}
	if (ctx->tpt_fd >= 0)
		close(ctx->tpt_fd);
	tf__free(ctx->slot_owner);
}

/* Draw a random key whose slot is free and reserve the slot for @owner.
 * Returns the key, or 0 when TOLLFREE_SOFT_MAX_MR keys are live or no
 * randomness can be had (then logged by tf__random).
 * ctx->lock held. */
static uint32_t tpt_alloc(struct soft_ctx *ctx, void *owner)
{
	uint32_t key, slot;

	if (atomic_load(&ctx->n_keys) >= ctx->base.cfg.soft_max_mr)
		return 0;
	do {
		key = tf__random_u32();
		if (!key)
			return 0; /* no randomness (logged) */
		slot = key & ctx->tpt_mask;
	} while (ctx->slot_owner[slot]);
	ctx->slot_owner[slot] = owner;
	ctx->tpt->slots[slot].type = SOFT_TPT_RESERVED;
	atomic_fetch_add(&ctx->n_keys, 1);
	return key;
}

/* Release a reserved or revoked slot.  ctx->lock held. */
static void tpt_free(struct soft_ctx *ctx, uint32_t slot)
{
	ctx->tpt->slots[slot].type = SOFT_TPT_FREE;
	ctx->slot_owner[slot] = NULL;
	atomic_fetch_sub(&ctx->n_keys, 1);
}

/* Publish @e's contents under @key (seqlock write). */
static void tpt_write(struct soft_ctx *ctx, uint32_t key,
		      const struct soft_tpt_entry *e)
{
	struct soft_tpt_entry *s = &ctx->tpt->slots[key & ctx->tpt_mask];
	uint32_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);

	atomic_store_explicit(&s->seq, seq + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	s->type = e->type;
	s->pd_id = e->pd_id;
	s->access = e->access;
	s->qpn = e->qpn;
	s->addr = e->addr;
	s->length = e->length;
	s->shmem_idx = e->shmem_idx;
	s->shmem_gen = e->shmem_gen;
	s->shmem_off = e->shmem_off;
	atomic_store_explicit(&s->key, key, memory_order_relaxed);
	atomic_store_explicit(&s->seq, seq + 2, memory_order_release);
}

/*
 * Revoke the key in @slot: after this returns no access through it can
 * still land.  The key is cleared (seqlock write, seq_cst), then the
 * revoker waits for every published accessor word that names the slot:
 * of every QP for a region, of the one QP @qp for a window bound to it
 * (soft_shm_quiesce).
 */
static void tpt_revoke(struct soft_ctx *ctx, uint32_t slot, struct soft_qp *qp)
{
	struct soft_tpt_entry *s = &ctx->tpt->slots[slot];
	uint32_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
	uint64_t t0 = 0;

	atomic_store_explicit(&s->seq, seq + 1, memory_order_relaxed);
	atomic_store_explicit(&s->key, 0, memory_order_seq_cst);
	atomic_store_explicit(&s->seq, seq + 2, memory_order_release);
	atomic_thread_fence(memory_order_seq_cst);
	/* Target-side accesses run inside transport progress; when this
	 * thread is that progress (SEND_WITH_INV), its accesses are over. */
	while (!soft_in_progress &&
	       atomic_load(&ctx->local_active) == slot + 1) {
		/* Only a target-side access of this process can hold it, and
		 * for a bounded time (one copy). */
		if (!t0)
			t0 = tf__now_ns();
		else if (tf__now_ns() - t0 > 5000000000ull) {
			tf_log_error(SOFT_SUBSYS,
				     "revoke: target-side access on slot %u "
				     "never ended (missing "
				     "soft_tpt_access_done?)",
				     slot);
			break;
		}
		sched_yield();
	}
	soft_shm_quiesce(ctx, slot, qp);
}

/* Index of the tf_mem_alloc region that holds [addr, addr+len), or -1. */
static int shmem_lookup(struct soft_ctx *ctx, uint64_t addr, uint64_t len,
			uint32_t *gen_p, uint64_t *off_p)
{
	for (uint32_t i = 0; i < SOFT_MAX_SHMEM; i++) {
		typeof(ctx->tpt->shmem[0]) *m = &ctx->tpt->shmem[i];

		if (m->fd < 0 || addr < m->addr || len > m->size ||
		    addr - m->addr > m->size - len)
			continue;
		*gen_p = atomic_load(&m->gen);
		*off_p = addr - m->addr;
		return (int)i;
	}
	return -1;
}

int soft_shmem_register(struct soft_ctx *ctx, int fd, void *addr, uint64_t size)
{
	int ret = -ENOSPC;

	pthread_mutex_lock(&ctx->lock);
	for (uint32_t i = 0; i < SOFT_MAX_SHMEM; i++) {
		typeof(ctx->tpt->shmem[0]) *m = &ctx->tpt->shmem[i];

		if (m->fd >= 0)
			continue;
		/* A new generation first, so that a peer never pairs the
		 * new memfd with a stale cached mapping. */
		atomic_fetch_add(&m->gen, 1);
		m->addr = (uint64_t)(uintptr_t)addr;
		m->size = size;
		atomic_thread_fence(memory_order_release);
		m->fd = fd;
		ret = 0;
		break;
	}
	pthread_mutex_unlock(&ctx->lock);
	return ret;
}

void soft_shmem_unregister(struct soft_ctx *ctx, void *addr)
{
	pthread_mutex_lock(&ctx->lock);
	for (uint32_t i = 0; i < SOFT_MAX_SHMEM; i++) {
		typeof(ctx->tpt->shmem[0]) *m = &ctx->tpt->shmem[i];

		if (m->fd >= 0 && m->addr == (uint64_t)(uintptr_t)addr) {
			m->fd = -1;
			atomic_fetch_add(&m->gen, 1);
			break;
		}
	}
	pthread_mutex_unlock(&ctx->lock);
}

/* ------------------------------------------------------------ MR */

int soft_mr_reg(struct tf_pd *pd, void *addr, size_t length, unsigned access,
		struct tf_mr **mr_p)
{
	struct soft_ctx *ctx = soft_ctx_of(pd->ctx);
	uintptr_t a = (uintptr_t)addr;
	struct soft_tpt_entry e = {0};
	struct soft_mr *mr;
	uint32_t key;
	int ret;

	if (length > (1ull << 40)) {
		tf_log_debug(SOFT_SUBSYS, "mr_reg: %zu bytes too large",
			     length);
		return -EINVAL;
	}
	mr = tf__calloc(1, sizeof(*mr));
	if (!mr)
		return -ENOMEM;
	mr->pin_start = a & ~(SOFT_PAGE_SIZE - 1);
	mr->pin_len =
		((a + length + SOFT_PAGE_SIZE - 1) & ~(SOFT_PAGE_SIZE - 1)) -
		mr->pin_start;
	mr->npages = mr->pin_len / SOFT_PAGE_SIZE;
	mr->pd_id = ((struct soft_pd *)pd)->pd_id;
	mr->pfns = tf__malloc(mr->npages * sizeof(uint64_t));
	if (!mr->pfns) {
		ret = -ENOMEM;
		goto err_free;
	}
	ret = pin_range(mr->pin_start, mr->npages);
	if (ret)
		goto err_pfns;
	ret = read_pfns(ctx, mr->pin_start, mr->npages, mr->pfns);
	if (ret)
		goto err_unpin;

	pthread_mutex_lock(&ctx->lock);
	key = tpt_alloc(ctx, mr);
	if (!key) {
		pthread_mutex_unlock(&ctx->lock);
		if (atomic_load(&ctx->n_keys) < ctx->base.cfg.soft_max_mr) {
			ret = -EIO; /* no randomness for a key (logged) */
			goto err_unpin;
		}
		tf_log_warn(SOFT_SUBSYS,
			    "mr_reg: TOLLFREE_SOFT_MAX_MR=%llu keys in use",
			    (unsigned long long)ctx->base.cfg.soft_max_mr);
		ret = -ENOSPC;
		goto err_unpin;
	}
	mr->slot = key & ctx->tpt_mask;
	mr->shmem_idx =
		shmem_lookup(ctx, a, length, &mr->shmem_gen, &mr->shmem_off);
	e.type = SOFT_TPT_MR;
	e.pd_id = mr->pd_id;
	e.access = access;
	e.addr = a;
	e.length = length;
	e.shmem_idx = mr->shmem_idx;
	e.shmem_gen = mr->shmem_gen;
	e.shmem_off = mr->shmem_off;
	tpt_write(ctx, key, &e);
	pthread_mutex_unlock(&ctx->lock);

	/* The NIC's MTT write: the new translations become resident. */
	soft_xlate_insert(ctx, a, length);
	mr->base.lkey = key;
	mr->base.rkey = key;
	*mr_p = &mr->base;
	return 0;

err_unpin:
	unpin_range(mr->pin_start, mr->npages);
err_pfns:
	tf__free(mr->pfns);
err_free:
	tf__free(mr);
	return ret;
}

int soft_mr_dereg(struct tf_mr *base)
{
	struct soft_mr *mr = (struct soft_mr *)base;
	struct soft_ctx *ctx = soft_ctx_of(base->pd->ctx);

	pthread_mutex_lock(&ctx->lock);
	if (atomic_load(&mr->mw_bound)) {
		pthread_mutex_unlock(&ctx->lock);
		tf_log_debug(SOFT_SUBSYS, "mr_dereg: %d windows bound",
			     atomic_load(&mr->mw_bound));
		return -EBUSY;
	}
	tpt_revoke(ctx, mr->slot, NULL);
	tpt_free(ctx, mr->slot);
	pthread_mutex_unlock(&ctx->lock);
	soft_xlate_remove(ctx, (uintptr_t)base->addr, base->length);
	unpin_range(mr->pin_start, mr->npages);
	tf__free(mr->pfns);
	tf__free(mr);
	return 0;
}

/* ------------------------------------------------------------ MW */

int soft_mw_alloc(struct tf_pd *pd, struct tf_mw **mw_p)
{
	struct soft_mw *mw = tf__calloc(1, sizeof(*mw));

	(void)pd;
	if (!mw)
		return -ENOMEM;
	/* Not in the TPT until bound: this key grants nothing. */
	mw->base.rkey = tf__random_u32();
	*mw_p = &mw->base;
	return 0;
}

/* Unbind @mw: revoke its key.  ctx->lock held. */
static void mw_unbind(struct soft_ctx *ctx, struct soft_mw *mw)
{
	if (!mw->bound)
		return;
	tpt_revoke(ctx, mw->slot, mw->qp);
	tpt_free(ctx, mw->slot);
	atomic_fetch_sub(&mw->mr->mw_bound, 1);
	if (mw->qp_prev)
		mw->qp_prev->qp_next = mw->qp_next;
	else
		mw->qp->bound_mws = mw->qp_next;
	if (mw->qp_next)
		mw->qp_next->qp_prev = mw->qp_prev;
	mw->qp_next = mw->qp_prev = NULL;
	mw->bound = false;
	mw->mr = NULL;
	mw->qp = NULL;
}

int soft_mw_dealloc(struct tf_mw *base)
{
	struct soft_mw *mw = (struct soft_mw *)base;
	struct soft_ctx *ctx = soft_ctx_of(base->pd->ctx);

	pthread_mutex_lock(&ctx->lock);
	mw_unbind(ctx, mw);
	/* Reserved keys of binds still queued keep pointing at @mw in
	 * slot_owner; drop those references (the bind or its flush frees
	 * the slot).  A walk of the whole TPT, hence only when there are
	 * any: it cost every dealloc tens of microseconds. */
	for (uint32_t i = 0; i <= ctx->tpt_mask && mw->n_reserved; i++)
		if (ctx->slot_owner[i] == mw &&
		    ctx->tpt->slots[i].type == SOFT_TPT_RESERVED) {
			ctx->slot_owner[i] = (void *)&ctx->slot_owner;
			mw->n_reserved--;
		}
	pthread_mutex_unlock(&ctx->lock);
	tf__free(mw);
	return 0;
}

uint32_t soft_mw_reserve_key(struct soft_qp *qp, struct soft_mw *mw)
{
	struct soft_ctx *ctx = qp->ctx;
	uint32_t key;

	pthread_mutex_lock(&ctx->lock);
	key = tpt_alloc(ctx, mw);
	if (key)
		mw->n_reserved++;
	pthread_mutex_unlock(&ctx->lock);
	return key;
}

void soft_mw_bind_cancel(struct soft_qp *qp, struct soft_swqe *wqe)
{
	struct soft_ctx *ctx = qp->ctx;
	uint32_t slot = wqe->rkey & ctx->tpt_mask;

	pthread_mutex_lock(&ctx->lock);
	if (ctx->tpt->slots[slot].type == SOFT_TPT_RESERVED) {
		/* Still the window's, unless a dealloc disowned it. */
		if (ctx->slot_owner[slot] == wqe->bind.wr.bind_mw.mw)
			((struct soft_mw *)wqe->bind.wr.bind_mw.mw)
				->n_reserved--;
		tpt_free(ctx, slot);
	}
	pthread_mutex_unlock(&ctx->lock);
}

/* Execute a BIND_MW WQE (its key was reserved at post time). */
enum tf_wc_status soft_mw_bind(struct soft_qp *qp, struct soft_swqe *wqe)
{
	struct soft_ctx *ctx = qp->ctx;
	const typeof(wqe->bind.wr.bind_mw) *b = &wqe->bind.wr.bind_mw;
	struct soft_mw *mw = (struct soft_mw *)b->mw;
	struct soft_mr *mr = (struct soft_mr *)b->mr;
	uint32_t slot = wqe->rkey & ctx->tpt_mask;
	struct soft_tpt_entry e = {0};
	const char *why = NULL;

	pthread_mutex_lock(&ctx->lock);
	if (ctx->slot_owner[slot] != mw)
		why = "window freed before the bind executed";
	else if (!mr)
		why = "no region";
	else if (mw->bound)
		why = "type 2 window already bound (invalidate it first)";
	else if (mw->base.pd != qp->base.pd || mr->base.pd != qp->base.pd)
		why = "window, region and QP are not in one PD";
	else if (!b->length)
		/* A type-2 window cannot be bound with zero length (IB
		 * o10-37.2.40). */
		why = "zero-length type-2 bind";
	else if (!(mr->base.access & TF_ACCESS_MW_BIND))
		why = "region lacks TF_ACCESS_MW_BIND";
	else if (b->access &
		 ~(unsigned)(TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_WRITE |
			     TF_ACCESS_REMOTE_ATOMIC))
		why = "invalid window access flags";
	else if ((b->access &
		  (TF_ACCESS_REMOTE_WRITE | TF_ACCESS_REMOTE_ATOMIC)) &&
		 !(mr->base.access & TF_ACCESS_LOCAL_WRITE))
		why = "remote write/atomic window over a region without "
		      "local write";
	else if (b->addr < (uintptr_t)mr->base.addr ||
		 b->length > mr->base.length ||
		 b->addr - (uintptr_t)mr->base.addr >
			 mr->base.length - b->length)
		why = "window range outside the region";
	/* The slot stops being a reservation, the window's unless a
	 * dealloc disowned it. */
	if (ctx->slot_owner[slot] == mw &&
	    ctx->tpt->slots[slot].type == SOFT_TPT_RESERVED)
		mw->n_reserved--;
	if (why) {
		if (ctx->tpt->slots[slot].type == SOFT_TPT_RESERVED)
			tpt_free(ctx, slot);
		pthread_mutex_unlock(&ctx->lock);
		tf_log_debug(SOFT_SUBSYS, "bind_mw: %s", why);
		return TF_WC_MW_BIND_ERR;
	}
	e.type = SOFT_TPT_MW;
	e.pd_id = qp->pd_id;
	e.access = b->access;
	e.qpn = qp->base.qpn;
	e.addr = b->addr;
	e.length = b->length;
	e.shmem_idx = mr->shmem_idx;
	e.shmem_gen = mr->shmem_gen;
	e.shmem_off = mr->shmem_off + (b->addr - (uintptr_t)mr->base.addr);
	tpt_write(ctx, wqe->rkey, &e);
	mw->bound = true;
	mw->slot = slot;
	mw->mr = mr;
	mw->qp = qp;
	mw->qp_prev = NULL;
	mw->qp_next = qp->bound_mws;
	if (qp->bound_mws)
		qp->bound_mws->qp_prev = mw;
	qp->bound_mws = mw;
	atomic_fetch_add(&mr->mw_bound, 1);
	pthread_mutex_unlock(&ctx->lock);
	TF_STAT_ADD(&ctx->base, mw_bind, 1);
	return TF_WC_SUCCESS;
}

/* Invalidate window key @key; @remote: SEND_WITH_INV on @qp (the window
 * must be bound to @qp).  ctx->lock held. */
static bool mw_inval(struct soft_qp *qp, uint32_t key, bool remote)
{
	struct soft_ctx *ctx = qp->ctx;
	uint32_t slot = key & ctx->tpt_mask;
	struct soft_tpt_entry *s = &ctx->tpt->slots[slot];
	struct soft_mw *mw;

	if (!key || atomic_load(&s->key) != key || s->type != SOFT_TPT_MW)
		return false;
	mw = ctx->slot_owner[slot];
	if (mw->base.pd != qp->base.pd || (remote && mw->qp != qp))
		return false;
	mw_unbind(ctx, mw);
	TF_STAT_ADD(&ctx->base, mw_inval, 1);
	return true;
}

enum tf_wc_status soft_local_inv(struct soft_qp *qp, uint32_t key)
{
	bool ok;

	pthread_mutex_lock(&qp->ctx->lock);
	ok = mw_inval(qp, key, false);
	pthread_mutex_unlock(&qp->ctx->lock);
	if (!ok)
		tf_log_debug(SOFT_SUBSYS,
			     "local_inv: key %#x is no bound "
			     "window of this PD",
			     key);
	return ok ? TF_WC_SUCCESS : TF_WC_LOC_QP_OP_ERR;
}

enum tf_wc_status soft_remote_inv(struct soft_qp *qp, uint32_t key)
{
	bool ok;

	pthread_mutex_lock(&qp->ctx->lock);
	ok = mw_inval(qp, key, true);
	pthread_mutex_unlock(&qp->ctx->lock);
	if (!ok)
		tf_log_debug(SOFT_SUBSYS,
			     "send_with_inv: key %#x is no "
			     "window bound to qp %#x",
			     key, qp->base.qpn);
	return ok ? TF_WC_SUCCESS : TF_WC_REM_OP_ERR;
}

void soft_mw_unbind_qp(struct soft_qp *qp)
{
	struct soft_ctx *ctx = qp->ctx;

	pthread_mutex_lock(&ctx->lock);
	while (qp->bound_mws)
		mw_unbind(ctx, qp->bound_mws);
	pthread_mutex_unlock(&ctx->lock);
}

/* ------------------------------------------------------------ checks */

enum tf_wc_status soft_tpt_check_local(struct soft_ctx *ctx, struct soft_qp *qp,
				       uint32_t rkey, uint64_t addr,
				       uint64_t len, unsigned access,
				       void **local_p)
{
	uint32_t slot = rkey & ctx->tpt_mask;
	struct soft_tpt_entry snap;

	atomic_exchange_explicit(&ctx->local_active, slot + 1,
				 memory_order_seq_cst);
	soft_tpt_read(&ctx->tpt->slots[slot], &snap);
	if (!soft_tpt_allows(&snap, rkey, qp->pd_id, qp->base.qpn,
			     qp->base.access, addr, len, access)) {
		atomic_store_explicit(&ctx->local_active, 0,
				      memory_order_release);
		TF_STAT_ADD(&ctx->base, remote_access_denied, 1);
		tf_log_debug(SOFT_SUBSYS,
			     "qp %#x: remote access denied (rkey %#x, addr "
			     "%#llx, len %llu, access %#x)",
			     qp->base.qpn, rkey, (unsigned long long)addr,
			     (unsigned long long)len, access);
		soft_engine_qp_error(qp, TF_WC_WR_FLUSH_ERR);
		return TF_WC_REM_ACCESS_ERR;
	}
	soft_xlate_touch(ctx, addr, len);
	*local_p = (void *)(uintptr_t)addr;
	return TF_WC_SUCCESS;
}

void soft_tpt_access_done(struct soft_ctx *ctx)
{
	atomic_store_explicit(&ctx->local_active, 0, memory_order_release);
}

enum tf_wc_status soft_sge_check(struct soft_qp *qp, const struct tf_sge *sge,
				 uint32_t n, unsigned access)
{
	struct soft_ctx *ctx = qp->ctx;

	for (uint32_t i = 0; i < n; i++) {
		struct soft_tpt_entry snap;

		if (!sge[i].length)
			continue;
		soft_tpt_read(&ctx->tpt->slots[sge[i].lkey & ctx->tpt_mask],
			      &snap);
		if (!sge[i].lkey ||
		    atomic_load_explicit(&snap.key, memory_order_relaxed) !=
			    sge[i].lkey ||
		    snap.type != SOFT_TPT_MR || snap.pd_id != qp->pd_id ||
		    (snap.access & access) != access ||
		    sge[i].addr < snap.addr || sge[i].length > snap.length ||
		    sge[i].addr - snap.addr > snap.length - sge[i].length) {
			tf_log_debug(SOFT_SUBSYS,
				     "qp %#x: sge %u (lkey %#x addr %#llx len "
				     "%u) fails the local check",
				     qp->base.qpn, i, sge[i].lkey,
				     (unsigned long long)sge[i].addr,
				     sge[i].length);
			return TF_WC_LOC_PROT_ERR;
		}
		soft_xlate_touch(ctx, sge[i].addr, sge[i].length);
	}
	return TF_WC_SUCCESS;
}

uint64_t soft_atomic_exec(struct soft_ctx *ctx, uint64_t *addr,
			  enum tf_wr_opcode op, uint64_t compare_add,
			  uint64_t swap)
{
	pthread_mutex_t *m = &ctx->tpt_ctl->atomic_lock;
	uint64_t orig;
	int r = pthread_mutex_lock(m);

	/* A peer died holding the lock: the 8-byte update it was doing
	 * either happened or not, both are consistent states. */
	if (r == EOWNERDEAD)
		pthread_mutex_consistent(m);
	orig = *(volatile uint64_t *)addr;
	if (op == TF_WR_ATOMIC_FETCH_ADD)
		*(volatile uint64_t *)addr = orig + compare_add;
	else if (orig == compare_add)
		*(volatile uint64_t *)addr = swap;
	pthread_mutex_unlock(m);
	return orig;
}
