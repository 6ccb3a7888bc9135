/* SPDX-License-Identifier: MIT */
/*
 * stats_pub.c - a context's statistics as name/value records: published
 * live in /dev/shm/tollfree.<pid>.<n> (TOLLFREE_STATS_PUBLISH=y) and
 * dumped at close (TOLLFREE_STATS).  See stats_int.h for when the live
 * snapshot is refreshed and stats_fmt.h for the record.
 *
 * Liveness: the owner holds a POSIX write lock (fcntl F_SETLK) on its
 * segment for as long as the context is open.  The kernel drops it when
 * the process dies, so a reader that finds no write lock knows the segment
 * is stale, whatever happened to the pid since.  Not flock(): a child
 * forked without exec shares the open file description and with it a
 * flock, so the segment of a parent killed by SIGKILL would look live as
 * long as the child runs.  A POSIX lock is not inherited by fork(), but it
 * goes when its process closes ANY descriptor of the file: nothing in the
 * library opens a segment it owns but pub_open() (the descriptor kept in
 * pub->fd until pub_close()).  A TOLLFREE_STATS=file: path naming a live
 * segment of the same process would break that; nobody has a reason to.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "provider.h"
#include "stats_fmt.h"
#include "stats_int.h"

#define S "stats"

/* Room for the context's counters and those of about eight nodes; what
 * does not fit is counted in the header's dropped field. */
#define SEG_CAPACITY 512
#define SEG_SIZE     (TF_STATS_HDR_SIZE + SEG_CAPACITY * TF_STATS_ENTRY_SIZE)
/* A refresh costs a full collect(); whoever bumps req in a loop gets at
 * most one per millisecond. */
#define REFRESH_MIN_NS 1000000ull

struct tf__stats_pub {
	/* Protects the source list and the build buffer, and serializes
	 * writers of the segment. */
	pthread_mutex_t lock;
	struct tf_stats_hdr *seg; /* the shared mapping, SEG_SIZE bytes */
	uint8_t *build;		  /* the next record, assembled privately */
	int fd;			  /* holds the write lock */
	pid_t pid;		  /* owner; a forked child never writes */
	atomic_bool forked;	  /* set in a forked child, read unlocked */
	atomic_uint served;	  /* the last req answered */
	/* When the last refresh ended (tf__now_ns). */
	_Atomic uint64_t refreshed_ns;
	/* The segment's seqlock word, kept here: what is in the segment
	 * is anyone's who can write it (an odd value stored there must not
	 * make every later snapshot look torn).  Under lock. */
	uint32_t seq;
	struct tf__stats_source *sources;
	unsigned next_source_id;
	char path[64];
};

static atomic_uint next_ctx_id;

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------- records */

/* Plain copies rather than snprintf: a refresh writes about a hundred
 * names. */
void tf__stats_add_named(void *rec, const char *prefix, const char *name,
			 uint64_t v)
{
	char full[TF_STATS_NAME_MAX];
	/* Our own prefixes and field names, terminated and short; clamped
	 * anyway so that a long one is cut, not overflowed. */
	size_t pl = strlen(prefix);
	size_t nl;

	if (pl > sizeof(full) - 1)
		pl = sizeof(full) - 1;
	nl = strnlen(name, sizeof(full) - 1 - pl);

	memcpy(full, prefix, pl);
	memcpy(full + pl, name, nl);
	full[pl + nl] = '\0';
	tf__stats_add(rec, full, v);
}

void tf__stats_add_fields(void *rec, const char *prefix, const void *st,
			  const struct tf__stats_field *f, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const uint8_t *p = (const uint8_t *)st + f[i].off;
		uint64_t v = 0;
		int iv;

		if (f[i].size == sizeof(uint64_t)) {
			memcpy(&v, p, sizeof(v));
		} else {
			memcpy(&iv, p, sizeof(iv));
			v = (uint64_t)(int64_t)iv;
		}
		tf__stats_add_named(rec, prefix, f[i].name, v);
	}
}

static const struct tf__stats_field ctx_fields[] = {
	TF__STATS_FIELD(tf_context_stats_t, mr_reg),
	TF__STATS_FIELD(tf_context_stats_t, mr_dereg),
	TF__STATS_FIELD(tf_context_stats_t, mr_reg_fail),
	TF__STATS_FIELD(tf_context_stats_t, pinned_bytes),
	TF__STATS_FIELD(tf_context_stats_t, mw_bind),
	TF__STATS_FIELD(tf_context_stats_t, mw_inval),
	TF__STATS_FIELD(tf_context_stats_t, qp_created),
	TF__STATS_FIELD(tf_context_stats_t, qp_errors),
	TF__STATS_FIELD(tf_context_stats_t, send_posted),
	TF__STATS_FIELD(tf_context_stats_t, recv_posted),
	TF__STATS_FIELD(tf_context_stats_t, cqe_ok),
	TF__STATS_FIELD(tf_context_stats_t, cqe_err),
	TF__STATS_FIELD(tf_context_stats_t, bytes_out),
	TF__STATS_FIELD(tf_context_stats_t, remote_access_denied),
	TF__STATS_FIELD(tf_context_stats_t, xlate_hits),
	TF__STATS_FIELD(tf_context_stats_t, xlate_misses),
	TF__STATS_FIELD(tf_context_stats_t, xlate_evictions),
	TF__STATS_FIELD(tf_context_stats_t, cq_wakes_direct),
	TF__STATS_FIELD(tf_context_stats_t, wake_fds),
	TF__STATS_FIELD(tf_context_stats_t, queue_cache_bytes),
	TF__STATS_FIELD(tf_context_stats_t, wakes_owed_paid),
	TF__STATS_FIELD(tf_context_stats_t, max_pinned),
	TF__STATS_FIELD(tf_context_stats_t, pinned_refused),
};

/* Lay out a full record of @ctx in @rec (room for @cap entries).  With
 * publication on, pub->lock must be held (the node list). */
static uint32_t collect(struct tf_context *ctx, void *rec, uint32_t cap,
			uint32_t flags)
{
	struct tf__stats_pub *pub = ctx->stats_pub;
	tf_context_stats_t s;
	char comm[17] = "";
	tf_caps_t caps;

	/* The comm is read each time: a process may rename itself. */
	prctl(PR_GET_NAME, comm);
	tf__stats_init(rec, cap, flags, (uint32_t)getpid(), ctx->stats_id,
		       ctx->stats_start_ns, ctx->prov_name, ctx->device, comm);
	/* So is the transport: the soft provider's "auto" says what it
	 * chose once QPs connected. */
	if (!tf_context_query_caps(ctx, &caps))
		tf__stats_set_transport(rec, caps.transport);
	tf_context_query_stats(ctx, &s);
	tf__stats_add_fields(rec, "ctx.", &s, ctx_fields,
			     TF__ARRAY_SIZE(ctx_fields));
	tf__stats_add_named(rec, "ctx.", "live_pd",
			    (uint64_t)atomic_load(&ctx->n_pd));
	tf__stats_add_named(rec, "ctx.", "live_mr",
			    (uint64_t)atomic_load(&ctx->n_mr));
	tf__stats_add_named(rec, "ctx.", "live_mw",
			    (uint64_t)atomic_load(&ctx->n_mw));
	tf__stats_add_named(rec, "ctx.", "live_cq",
			    (uint64_t)atomic_load(&ctx->n_cq));
	tf__stats_add_named(rec, "ctx.", "live_qp",
			    (uint64_t)atomic_load(&ctx->n_qp));
	if (pub)
		for (struct tf__stats_source *src = pub->sources; src;
		     src = src->next)
			src->collect(src, rec);
	return tf__stats_seal(rec, realtime_ns());
}

/* ---------------------------------------------------------- publishing */

/* Copy the built record into the segment under its seqlock.  seq, req
 * and ack are not part of the copy: they belong to the protocol.
 * pub->lock must be held: it makes this the only writer. */
static void publish(struct tf__stats_pub *pub, uint32_t size)
{
	uint8_t *seg = (uint8_t *)pub->seg;
	const size_t proto = offsetof(struct tf_stats_hdr, seq);
	const size_t proto_end = offsetof(struct tf_stats_hdr, flags);
	uint32_t seq = pub->seq;

	/* Odd seq first, then the data: the release fence keeps the stores
	 * of the copy from becoming visible before the odd value, so a
	 * reader that sees the same even seq before and after its copy
	 * copied no half-written record. */
	__atomic_store_n(&pub->seg->seq, seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	memcpy(seg, pub->build, proto);
	memcpy(seg + proto_end, pub->build + proto_end, size - proto_end);
	pub->seq = seq + 2;
	__atomic_store_n(&pub->seg->seq, seq + 2, __ATOMIC_RELEASE);
}

/* Refresh the snapshot if a reader asked and nobody else is on it. */
void tf__stats_pub_poll(struct tf_context *ctx)
{
	struct tf__stats_pub *pub = ctx->stats_pub;
	uint32_t req = __atomic_load_n(&pub->seg->req, __ATOMIC_RELAXED);

	if (req == atomic_load_explicit(&pub->served, memory_order_relaxed) ||
	    atomic_load_explicit(&pub->forked, memory_order_relaxed))
		return;
	/* A request is pending: only now is the clock read. */
	if (tf__now_ns() - atomic_load_explicit(&pub->refreshed_ns,
						memory_order_relaxed) <
	    REFRESH_MIN_NS)
		return;
	/* Another thread publishing will answer, or the next call will: a
	 * poller never waits here. */
	if (pthread_mutex_trylock(&pub->lock))
		return;
	if (getpid() != pub->pid) {
		/* A forked child inherited the mapping; only the parent
		 * speaks for the context. */
		atomic_store_explicit(&pub->forked, true, memory_order_relaxed);
		goto out_unlock;
	}
	req = __atomic_load_n(&pub->seg->req, __ATOMIC_ACQUIRE);
	publish(pub, collect(ctx, pub->build, SEG_CAPACITY, 0));
	atomic_store_explicit(&pub->served, req, memory_order_relaxed);
	__atomic_store_n(&pub->seg->ack, req, __ATOMIC_RELEASE);
	/* From the end of the refresh: the owner spends at most a share of
	 * its time on them, however long one takes. */
	atomic_store_explicit(&pub->refreshed_ns, tf__now_ns(),
			      memory_order_relaxed);
out_unlock:
	pthread_mutex_unlock(&pub->lock);
}

/* Whether @st and @st2 are the same file. */
static bool same_file(const struct stat *st, const struct stat *st2)
{
	return st->st_dev == st2->st_dev && st->st_ino == st2->st_ino;
}

/* Remove the file at @path if it is a stale segment: a regular file on
 * which no process holds the owner's write lock.  0 if nothing is there
 * any more, a negative errno if something stays (live, another user's,
 * not a file, or replaced while we looked).  Opening and closing it does
 * not drop our own segment's lock: that file has no name but its
 * temporary one yet, so this is another file. */
static int remove_stale(const char *path)
{
	struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET};
	struct stat st, st2;
	int fd, ret = -EBUSY;

	/* O_NONBLOCK: a FIFO put there must not block the open. */
	fd = open(path,
		  O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	/* Unlinked only if the name still leads to the file checked: a new
	 * owner may have put its segment there meanwhile. */
	if (!fstat(fd, &st) && S_ISREG(st.st_mode) &&
	    !fcntl(fd, F_GETLK, &fl) && fl.l_type == F_UNLCK &&
	    !stat(path, &st2) && same_file(&st, &st2))
		ret = unlink(path) && errno != ENOENT ? -errno : 0;
	close(fd);
	return ret;
}

/* Give the segment built at @tmp its name: with link(), which unlike
 * rename() never replaces a file.  What is already there belongs to a
 * process that reused our pid and died (stale: removed) or to a live one
 * with our pid (two containers sharing /dev/shm, both pid 1), which keeps
 * its name while we take the next context number. */
static int pub_link(struct tf_context *ctx, struct tf__stats_pub *pub,
		    const char *tmp)
{
	for (int tries = 0; tries < 64; tries++) {
		snprintf(pub->path, sizeof(pub->path), "%s/%s%d.%u",
			 TF_STATS_DIR, TF_STATS_PREFIX, (int)pub->pid,
			 ctx->stats_id);
		/* The first snapshot (all zero) is there before anyone can
		 * look; written again for each name, which it holds. */
		publish(pub, collect(ctx, pub->build, SEG_CAPACITY, 0));
		if (!link(tmp, pub->path))
			return 0;
		if (errno != EEXIST) {
			tf_log_warn(S, "TOLLFREE_STATS_PUBLISH: link %s: %m",
				    pub->path);
			return -errno;
		}
		if (remove_stale(pub->path))
			ctx->stats_id = atomic_fetch_add(&next_ctx_id, 1);
	}
	tf_log_warn(S, "TOLLFREE_STATS_PUBLISH: %s and others exist",
		    pub->path);
	return -EEXIST;
}

static int pub_open(struct tf_context *ctx)
{
	/* The whole file, for as long as the context is open. */
	struct flock wrlock = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
	struct tf__stats_pub *pub;
	char tmp[80];
	void *seg;
	int ret;

	pub = tf__calloc(1, sizeof(*pub));
	if (!pub)
		return -ENOMEM;
	pub->build = tf__malloc(SEG_SIZE);
	if (!pub->build) {
		ret = -ENOMEM;
		goto err_free;
	}
	pub->pid = getpid();
	/* Built under a name readers ignore and linked to its own once
	 * complete, so that no reader finds a file without its lock or its
	 * header.  The random part keeps a process with our pid in another
	 * pid namespace off it. */
	snprintf(tmp, sizeof(tmp), "%s/%s%d.new.%08" PRIx32, TF_STATS_DIR,
		 TF_STATS_PREFIX, (int)pub->pid, tf__random_u32());
	pub->fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
		       0600);
	if (pub->fd < 0) {
		ret = -errno;
		tf_log_warn(S, "TOLLFREE_STATS_PUBLISH: cannot create %s: %m",
			    tmp);
		goto err_build;
	}
	if (fcntl(pub->fd, F_SETLK, &wrlock) || ftruncate(pub->fd, SEG_SIZE)) {
		ret = -errno;
		tf_log_warn(S, "TOLLFREE_STATS_PUBLISH: %s: %m", tmp);
		goto err_unlink;
	}
	seg = mmap(NULL, SEG_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, pub->fd,
		   0);
	if (seg == MAP_FAILED) {
		ret = -errno;
		tf_log_warn(S, "TOLLFREE_STATS_PUBLISH: mmap %s: %m", tmp);
		goto err_unlink;
	}
	pub->seg = seg;
	pthread_mutex_init(&pub->lock, NULL);
	ret = pub_link(ctx, pub, tmp);
	if (ret)
		goto err_unmap;
	unlink(tmp);
	ctx->stats_pub = pub;
	tf_log_debug(S, "publishing statistics in %s", pub->path);
	return 0;

err_unmap:
	pthread_mutex_destroy(&pub->lock);
	munmap(seg, SEG_SIZE);
err_unlink:
	unlink(tmp);
	close(pub->fd);
err_build:
	tf__free(pub->build);
err_free:
	tf__free(pub);
	return ret;
}

static void pub_close(struct tf_context *ctx)
{
	struct tf__stats_pub *pub = ctx->stats_pub;
	struct stat st, st2;

	if (!pub)
		return;
	ctx->stats_pub = NULL;
	if (pub->sources)
		tf_log_warn(S, "context closed with stats sources (nodes) "
			       "still listed");
	/* Unlink before the lock goes with the fd: a reader never finds
	 * the file of a live context unlocked.  Only if the name still
	 * leads to our file: what someone put there is not ours to remove.
	 * A forked child leaves the parent's file alone. */
	if (getpid() == pub->pid) {
		if (fstat(pub->fd, &st) || stat(pub->path, &st2) ||
		    !same_file(&st, &st2))
			tf_log_warn(S, "%s is no longer ours; left alone",
				    pub->path);
		else if (unlink(pub->path))
			tf_log_warn(S, "cannot remove %s: %m", pub->path);
	}
	munmap(pub->seg, SEG_SIZE);
	close(pub->fd);
	pthread_mutex_destroy(&pub->lock);
	tf__free(pub->build);
	tf__free(pub);
}

void tf__stats_source_add(struct tf_context *ctx, struct tf__stats_source *src)
{
	struct tf__stats_pub *pub = ctx->stats_pub;
	struct tf__stats_source **pp;

	if (!pub)
		return;
	pthread_mutex_lock(&pub->lock);
	src->id = pub->next_source_id++;
	src->next = NULL;
	for (pp = &pub->sources; *pp; pp = &(*pp)->next)
		;
	*pp = src;
	pthread_mutex_unlock(&pub->lock);
}

void tf__stats_source_del(struct tf_context *ctx, struct tf__stats_source *src)
{
	struct tf__stats_pub *pub = ctx->stats_pub;

	if (!pub)
		return;
	pthread_mutex_lock(&pub->lock);
	for (struct tf__stats_source **pp = &pub->sources; *pp;
	     pp = &(*pp)->next)
		if (*pp == src) {
			*pp = src->next;
			break;
		}
	pthread_mutex_unlock(&pub->lock);
}

/* ------------------------------------------------------------- dumping */

/* The human-readable line of TOLLFREE_STATS=stdout|stderr. */
static void dump_text(FILE *f, void *rec)
{
	struct tf_stats_rec r;
	const char *name;
	uint64_t v;

	if (tf__stats_parse(rec, SEG_SIZE, &r))
		return; /* cannot happen: we wrote it */
	fprintf(f, "tollfree stats provider=%s device=%s transport=%s",
		r.provider, r.device, r.transport);
	for (uint32_t i = 0; i < r.n_entries; i++) {
		tf__stats_entry(&r, i, &name, &v);
		/* The context's own counters keep their historical names. */
		if (!strncmp(name, "ctx.", 4))
			name += 4;
		fprintf(f, " %s=%" PRIu64, name, v);
	}
	fputc('\n', f);
	fflush(f);
}

/* TOLLFREE_STATS=file:<path>: append one binary record in a single
 * write, so that records of processes sharing the file do not mix. */
static void dump_file(const char *path, const void *rec, uint32_t size)
{
	ssize_t n;
	int fd;

	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
	if (fd < 0) {
		tf_log_warn(S, "TOLLFREE_STATS: cannot open %s: %m", path);
		return;
	}
	n = write(fd, rec, size);
	if (n != (ssize_t)size)
		tf_log_warn(S, "TOLLFREE_STATS: short write to %s: %m", path);
	close(fd);
}

static void dump(struct tf_context *ctx)
{
	const char *dest = ctx->cfg.stats;
	struct tf__stats_pub *pub = ctx->stats_pub;
	uint32_t size;
	void *rec;

	if (!dest[0])
		return;
	if (strcmp(dest, "stdout") && strcmp(dest, "stderr") &&
	    strncmp(dest, "file:", 5)) {
		tf_log_warn(S, "TOLLFREE_STATS='%s' not understood", dest);
		return;
	}
	rec = tf__malloc(SEG_SIZE);
	if (!rec) {
		tf_log_warn(S, "TOLLFREE_STATS: out of memory");
		return;
	}
	if (pub)
		pthread_mutex_lock(&pub->lock);
	size = collect(ctx, rec, SEG_CAPACITY, TF_STATS_F_FINAL);
	if (pub)
		pthread_mutex_unlock(&pub->lock);
	if (!strcmp(dest, "stdout"))
		dump_text(stdout, rec);
	else if (!strcmp(dest, "stderr"))
		dump_text(stderr, rec);
	else
		dump_file(dest + 5, rec, size);
	tf__free(rec);
}

/* ------------------------------------------------------------ lifetime */

void tf__stats_ctx_init(struct tf_context *ctx)
{
	ctx->stats_pub = NULL;
	ctx->stats_id = atomic_fetch_add(&next_ctx_id, 1);
	ctx->stats_start_ns = realtime_ns();
	if (ctx->cfg.stats_publish)
		pub_open(ctx); /* logged; the context works without it */
}

void tf__stats_ctx_fini(struct tf_context *ctx)
{
	dump(ctx);
	pub_close(ctx);
}
