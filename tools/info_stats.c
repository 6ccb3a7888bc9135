/* SPDX-License-Identifier: MIT */
/*
 * info_stats.c - tollfree-info -s: the statistics of running processes
 * (their published segments, TOLLFREE_STATS_PUBLISH=y) or of a dump
 * (TOLLFREE_STATS=file:FILE), as text or JSON.  The record is parsed by
 * the library's own pure parser (stats_fmt.c, compiled in).
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <tollfree/tollfree.h>

#include "info.h"
#include "stats_fmt.h"

#define ARRAY_SIZE(_a) (sizeof(_a) / sizeof((_a)[0]))

/* ------------------------------------------------------------ -s */

/* Largest dump file and live segment read: far above any honest one. */
#define MAX_DUMP_BYTES	  (64u << 20)
#define MAX_SEGMENT_BYTES (1u << 20)

struct stats_out {
	bool json;
	unsigned shown; /* records printed */
};

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Seconds between two CLOCK_REALTIME stamps; 0 if the clock went back. */
static double secs_since(uint64_t then, uint64_t now)
{
	return now > then ? (double)(now - then) / 1e9 : 0.0;
}

/* A JSON string: quotes, backslashes and control bytes escaped. */
static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

/* A copy of @s safe to print on a terminal: a record or a process may
 * name itself with escape sequences. */
static const char *printable(const char *s, char *buf, size_t len)
{
	size_t i;

	for (i = 0; s[i] && i + 1 < len; i++)
		buf[i] = (char)((s[i] < ' ' || s[i] > '~') ? '?' : s[i]);
	buf[i] = '\0';
	return buf;
}

/* The process name of a live pid from /proc/<pid>/comm, else @fallback
 * (the name the record carries). */
static void proc_comm(uint32_t pid, const char *fallback, char *buf, size_t len)
{
	char path[64];
	FILE *f;

	snprintf(buf, len, "%s", fallback);
	snprintf(path, sizeof(path), "/proc/%" PRIu32 "/comm", pid);
	f = fopen(path, "r");
	if (!f)
		return;
	if (fgets(buf, (int)len, f))
		buf[strcspn(buf, "\n")] = '\0';
	fclose(f);
}

/* Print one validated record.  @live: read from a running process;
 * @refreshed: it answered the refresh request. */
static void print_record(struct stats_out *o, const struct tf_stats_rec *r,
			 bool live, bool refreshed)
{
	uint64_t now = realtime_ns();
	char comm[64], pc[64], pp[16], pd[64], pt[16];
	const char *name;
	uint64_t v;

	if (live)
		proc_comm(r->pid, r->comm, comm, sizeof(comm));
	else
		snprintf(comm, sizeof(comm), "%s", r->comm);
	if (o->json) {
		printf("%s\n    {\"pid\": %" PRIu32 ", \"comm\": ",
		       o->shown ? "," : "", r->pid);
		json_str(comm);
		printf(", \"context\": %" PRIu32 ", \"provider\": ", r->ctx_id);
		json_str(r->provider);
		printf(", \"device\": ");
		json_str(r->device);
		printf(", \"transport\": ");
		json_str(r->transport);
		printf(",\n     \"live\": %s, \"refreshed\": %s, "
		       "\"start_ns\": %" PRIu64 ", \"update_ns\": %" PRIu64
		       ", \"dropped\": %" PRIu32 ",\n     \"counters\": {",
		       live ? "true" : "false", refreshed ? "true" : "false",
		       r->start_ns, r->update_ns, r->dropped);
		for (uint32_t i = 0; i < r->n_entries; i++) {
			tf__stats_entry(r, i, &name, &v);
			printf("%s\n       ", i ? "," : "");
			json_str(name);
			printf(": %" PRIu64, v);
		}
		printf("}}");
		o->shown++;
		return;
	}
	if (o->shown)
		putchar('\n');
	printf("pid %" PRIu32 " (%s) context %" PRIu32 ": provider %s, "
	       "device %s%s%s\n",
	       r->pid, printable(comm, pc, sizeof(pc)), r->ctx_id,
	       printable(r->provider, pp, sizeof(pp)),
	       printable(r->device, pd, sizeof(pd)),
	       r->transport[0] ? ", transport " : "",
	       printable(r->transport, pt, sizeof(pt)));
	if (live) {
		printf("  open for %.1f s; snapshot taken %.3f s ago%s\n",
		       secs_since(r->start_ns, now),
		       secs_since(r->update_ns, now),
		       refreshed ? ""
				 : " (not refreshed: the process made no "
				   "tollfree call meanwhile)");
	} else {
		printf("  closed after %.1f s\n",
		       secs_since(r->start_ns, r->update_ns));
	}
	for (uint32_t i = 0; i < r->n_entries; i++) {
		tf__stats_entry(r, i, &name, &v);
		printf("  %-36s %" PRIu64 "\n", name, v);
	}
	if (r->dropped)
		printf("  (%" PRIu32 " counters did not fit the record)\n",
		       r->dropped);
	o->shown++;
}

static void out_begin(struct stats_out *o)
{
	if (o->json)
		printf("{\"contexts\": [");
}

static void out_end(struct stats_out *o)
{
	if (o->json)
		printf("%s]}\n", o->shown ? "\n  " : "");
}

/* ---------------------------------------------------- -s FILE (a dump) */

/* Read all of @path into a fresh buffer; 0 or -errno (-EFBIG past
 * MAX_DUMP_BYTES). */
static int read_file(const char *path, uint8_t **buf_p, size_t *len_p)
{
	uint8_t *buf = NULL, *nb;
	size_t len = 0, cap = 0;
	ssize_t n;
	int fd, ret = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	for (;;) {
		if (len == cap) {
			if (cap >= MAX_DUMP_BYTES) {
				ret = -EFBIG;
				break;
			}
			cap = cap ? cap * 2 : 65536;
			nb = realloc(buf, cap);
			if (!nb) {
				ret = -ENOMEM;
				break;
			}
			buf = nb;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = -errno;
			break;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	if (ret) {
		free(buf);
		return ret;
	}
	*buf_p = buf;
	*len_p = len;
	return 0;
}

static int stats_file(struct stats_out *o, const char *path)
{
	struct tf_stats_rec r;
	uint8_t *buf = NULL;
	size_t len = 0, off;
	int ret;

	ret = read_file(path, &buf, &len);
	if (ret) {
		fprintf(stderr, "tollfree-info: %s: %s\n", path,
			strerror(-ret));
		return 1;
	}
	if (!len) {
		fprintf(stderr,
			"tollfree-info: %s is empty: no context was closed "
			"with TOLLFREE_STATS=file:%s yet\n",
			path, path);
		free(buf);
		return 1;
	}
	/* Everything is checked before anything is printed: a damaged file
	 * gives an error, not half a report. */
	for (off = 0; off < len; off += r.size) {
		ret = tf__stats_parse(buf + off, len - off, &r);
		if (ret) {
			fprintf(stderr,
				"tollfree-info: %s: record at byte %zu: %s\n",
				path, off, tf__stats_parse_error(ret));
			free(buf);
			return 1;
		}
	}
	out_begin(o);
	for (off = 0; off < len; off += r.size) {
		tf__stats_parse(buf + off, len - off, &r);
		print_record(o, &r, false, false);
	}
	out_end(o);
	free(buf);
	return 0;
}

/* ------------------------------------------------ -s [PID] (live ones) */

/* "tollfree.<pid>.<n>" exactly: the ".new" files of contexts still
 * opening, and anything else, are not ours to read. */
static bool segment_name(const char *name, uint32_t *pid_p, uint32_t *id_p)
{
	const char *p = name + strlen(TF_STATS_PREFIX);
	unsigned long long pid, id;
	char *end;

	if (strncmp(name, TF_STATS_PREFIX, strlen(TF_STATS_PREFIX)) ||
	    !isdigit((unsigned char)*p))
		return false;
	errno = 0;
	pid = strtoull(p, &end, 10);
	if (errno || *end != '.' || pid == 0 || pid > INT32_MAX ||
	    !isdigit((unsigned char)end[1]))
		return false;
	id = strtoull(end + 1, &end, 10);
	if (errno || *end || id > UINT32_MAX)
		return false;
	*pid_p = (uint32_t)pid;
	*id_p = (uint32_t)id;
	return true;
}

/* A live segment being read: opened and asked for a snapshot first, all
 * of them, so that the processes refresh in parallel and one --wait
 * covers them all.  Never mapped: whoever can write the file can truncate
 * it, and a mapping turns that into SIGBUS; pread() and pwrite() only
 * come up short. */
struct seg {
	uint32_t pid, id;
	int fd; /* -1: skip (stale, gone, foreign or failed) */
	size_t size;
	bool asked;    /* req bumped (the file was writable) */
	uint32_t want; /* the req value to see acknowledged */
};

static int cmp_seg(const void *a, const void *b)
{
	const struct seg *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

static void seg_path(const struct seg *s, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s%" PRIu32 ".%" PRIu32, TF_STATS_DIR,
		 TF_STATS_PREFIX, s->pid, s->id);
}

static void seg_close(struct seg *s)
{
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
}

/* One of the protocol words (seq, req, ack) of the segment at @fd, in
 * native order.  0, or -1 if the file is shorter now. */
static int seg_word(int fd, size_t off, uint32_t *v)
{
	if (pread(fd, v, sizeof(*v), (off_t)off) != (ssize_t)sizeof(*v))
		return -1;
	/* The read completes before whatever we read next. */
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return 0;
}

#define SEQ_OFF offsetof(struct tf_stats_hdr, seq)
#define REQ_OFF offsetof(struct tf_stats_hdr, req)
#define ACK_OFF offsetof(struct tf_stats_hdr, ack)

/* Copy the live record out of the segment under its seqlock, so that the
 * parser sees one consistent snapshot.  0, -EAGAIN if the owner kept
 * rewriting it, -ENODATA if the file shrank. */
static int snapshot(int fd, size_t len, uint8_t *copy)
{
	for (int tries = 0; tries < 1000; tries++) {
		uint32_t s1, s2;

		if (seg_word(fd, SEQ_OFF, &s1))
			return -ENODATA;
		if (s1 & 1) {
			usleep(100);
			continue;
		}
		if (pread(fd, copy, len, 0) != (ssize_t)len)
			return -ENODATA;
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (seg_word(fd, SEQ_OFF, &s2))
			return -ENODATA;
		if (s2 == s1)
			return 0;
	}
	return -EAGAIN;
}

/* Whether the owner acknowledged our request.  Serial-number arithmetic:
 * other readers bump req too. */
static bool seg_answered(const struct seg *s)
{
	uint32_t ack;

	return s->asked && !seg_word(s->fd, ACK_OFF, &ack) &&
	       (int32_t)(ack - s->want) >= 0;
}

/* Whether a process holds a write lock on the segment open at @fd: its
 * owner.  When we cannot tell, it is not stale. */
static bool seg_locked(int fd)
{
	struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET};

	if (fcntl(fd, F_GETLK, &fl))
		return true;
	return fl.l_type != F_UNLCK;
}

/* Whether the file @st could be an honest segment of s->pid that we may
 * trust: an owner creates it 0600, as its effective uid.  Anyone can
 * create files in /dev/shm, so a file with group or other bits, or
 * another user's (for root: not the uid of s->pid), is not read: it could
 * be forged, or truncated under us.  1: ours; 0: foreign; -1 (root only):
 * s->pid is gone, so it has no owner to compare with. */
static int seg_trusted(const struct seg *s, const struct stat *st)
{
	char proc[32];
	struct stat ps;
	uid_t me = geteuid();

	if (st->st_mode & (S_IRWXG | S_IRWXO))
		return 0;
	if (me)
		return st->st_uid == me;
	snprintf(proc, sizeof(proc), "/proc/%" PRIu32, s->pid);
	if (stat(proc, &ps))
		return -1;
	return st->st_uid == ps.st_uid;
}

/* Open and check one segment and ask its owner for a snapshot.  Returns
 * 0 (open), 1 (stale or gone: removed or ignored; or foreign while
 * listing all: skipped silently; s->fd -1) or -1 (an error, reported).
 * @quiet: listing all, not looking for one pid. */
static int seg_open(struct seg *s, bool quiet)
{
	char path[128];
	struct stat st, st2;
	bool writable = true;
	uint32_t req;
	int trust;

	s->fd = -1;
	s->asked = false;
	seg_path(s, path, sizeof(path));
	/* O_NONBLOCK: a FIFO (or a device) named like a segment must not
	 * block the open; fstat() below rejects anything but a file. */
	s->fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (s->fd < 0 && errno == EACCES) {
		writable = false;
		s->fd = open(path,
			     O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	}
	if (s->fd < 0) {
		if (errno == ENOENT)
			return 1; /* closed meanwhile */
		if (errno == EACCES && quiet)
			return 1; /* another user's */
		fprintf(stderr, "tollfree-info: %s: %s\n", path,
			strerror(errno));
		return -1;
	}
	if (fstat(s->fd, &st)) {
		fprintf(stderr, "tollfree-info: %s: %s\n", path,
			strerror(errno));
		seg_close(s);
		return -1;
	}
	trust = seg_trusted(s, &st);
	/* A segment whose pid is gone is stale if nobody holds its lock; if
	 * somebody does, it is not the owner. */
	if (!trust || (trust < 0 && seg_locked(s->fd))) {
		if (!quiet)
			fprintf(stderr,
				"tollfree-info: %s: ignored: owner uid %u and "
				"mode %04o, not those of a segment of pid "
				"%" PRIu32 "\n",
				path, (unsigned)st.st_uid,
				(unsigned)(st.st_mode & 07777), s->pid);
		seg_close(s);
		return quiet ? 1 : -1;
	}
	if (!S_ISREG(st.st_mode) || st.st_size < TF_STATS_HDR_SIZE ||
	    st.st_size > MAX_SEGMENT_BYTES) {
		fprintf(stderr, "tollfree-info: %s: not a statistics segment\n",
			path);
		seg_close(s);
		return -1;
	}
	/* The owner holds a POSIX write lock while the context is open (not
	 * a flock: see stats_pub.c); if none is held, nobody owns it. */
	if (!seg_locked(s->fd)) {
		/* Only the file found stale: a new owner with the same pid
		 * may have linked its segment to the name meanwhile. */
		if (stat(path, &st2) || st2.st_dev != st.st_dev ||
		    st2.st_ino != st.st_ino)
			; /* replaced or gone: not ours to remove */
		else if (!unlink(path))
			fprintf(stderr,
				"tollfree-info: removed stale %s (pid %" PRIu32
				" exited without closing its context)\n",
				path, s->pid);
		else if (errno != ENOENT)
			fprintf(stderr,
				"tollfree-info: ignoring stale %s (pid %" PRIu32
				" exited without closing its context): "
				"cannot remove it: %s\n",
				path, s->pid, strerror(errno));
		seg_close(s);
		return 1;
	}
	s->size = (size_t)st.st_size;
	/* Read and write back rather than an atomic add: two readers may
	 * store the same value, which one refresh answers for both. */
	if (writable && !seg_word(s->fd, REQ_OFF, &req)) {
		req++;
		if (pwrite(s->fd, &req, sizeof(req), (off_t)REQ_OFF) ==
		    (ssize_t)sizeof(req)) {
			s->want = req;
			s->asked = true;
		}
	}
	return 0;
}

/* Print an open segment.  0 or -1 (reported). */
static int seg_show(struct stats_out *o, struct seg *s)
{
	char path[128];
	struct tf_stats_rec r;
	bool refreshed = seg_answered(s);
	uint8_t *copy;
	int ret = -1;

	seg_path(s, path, sizeof(path));
	copy = malloc(s->size);
	if (!copy) {
		fprintf(stderr, "tollfree-info: out of memory\n");
		return -1;
	}
	ret = snapshot(s->fd, s->size, copy);
	if (ret) {
		fprintf(stderr, "tollfree-info: %s: %s\n", path,
			ret == -EAGAIN ? "no stable snapshot"
				       : "truncated while read");
		ret = -1;
		goto out;
	}
	ret = tf__stats_parse(copy, s->size, &r);
	if (ret) {
		fprintf(stderr, "tollfree-info: %s: %s\n", path,
			tf__stats_parse_error(ret));
		ret = -1;
		goto out;
	}
	/* An owner writes its own pid and context number; a record that
	 * names another process is not shown as that process. */
	if (r.pid != s->pid || r.ctx_id != s->id) {
		fprintf(stderr,
			"tollfree-info: %s: ignored: record of pid %" PRIu32
			" context %" PRIu32 "\n",
			path, r.pid, r.ctx_id);
		ret = -1;
		goto out;
	}
	print_record(o, &r, true, refreshed);
out:
	free(copy);
	return ret;
}

/* Wait until every asked owner answered or @wait_ms passed. */
static void wait_answers(struct seg *v, size_t n, int wait_ms)
{
	for (int waited = 0;; waited++) {
		size_t pending = 0;

		for (size_t i = 0; i < n; i++)
			if (v[i].fd >= 0 && v[i].asked && !seg_answered(&v[i]))
				pending++;
		if (!pending || waited >= wait_ms)
			return;
		usleep(1000);
	}
}

/* All live segments, or those of @pid (0: all). */
static int stats_live(struct stats_out *o, uint32_t pid, int wait_ms)
{
	struct seg *v = NULL, *nv;
	size_t n = 0, cap = 0;
	struct dirent *de;
	unsigned errors = 0;
	DIR *d;

	d = opendir(TF_STATS_DIR);
	if (!d) {
		fprintf(stderr, "tollfree-info: %s: %s\n", TF_STATS_DIR,
			strerror(errno));
		return 1;
	}
	while ((de = readdir(d))) {
		struct seg s = {0};

		if (!segment_name(de->d_name, &s.pid, &s.id) ||
		    (pid && s.pid != pid))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			nv = realloc(v, cap * sizeof(*v));
			if (!nv) {
				fprintf(stderr,
					"tollfree-info: out of memory\n");
				closedir(d);
				free(v);
				return 1;
			}
			v = nv;
		}
		v[n++] = s;
	}
	closedir(d);
	if (n)
		qsort(v, n, sizeof(*v), cmp_seg);
	for (size_t i = 0; i < n; i++)
		if (seg_open(&v[i], !pid) < 0)
			errors++;
	wait_answers(v, n, wait_ms);
	out_begin(o);
	for (size_t i = 0; i < n; i++) {
		if (v[i].fd >= 0 && seg_show(o, &v[i]))
			errors++;
		seg_close(&v[i]);
	}
	out_end(o);
	free(v);
	if (!o->shown && !errors) {
		/* Segments of a dead pid were stale (and are gone now). */
		if (pid && kill((pid_t)pid, 0) && errno == ESRCH)
			fprintf(stderr,
				"tollfree-info: no process with pid %" PRIu32
				"\n",
				pid);
		else if (pid)
			fprintf(stderr,
				"tollfree-info: pid %" PRIu32 " publishes no "
				"statistics (start it with "
				"TOLLFREE_STATS_PUBLISH=y)\n",
				pid);
		else
			fprintf(stderr,
				"tollfree-info: no running process publishes "
				"tollfree statistics (start them with "
				"TOLLFREE_STATS_PUBLISH=y)\n");
		return pid ? 1 : 0;
	}
	return errors ? 1 : 0;
}

/* An operand of digits only is a pid; anything else is a dump file
 * (write ./123 for a file named 123). */
int info_show_stats(const char *what, bool json, int wait_ms)
{
	struct stats_out o = {.json = json};
	unsigned long long pid;
	char *end;

	if (!what)
		return stats_live(&o, 0, wait_ms);
	if (isdigit((unsigned char)*what)) {
		errno = 0;
		pid = strtoull(what, &end, 10);
		if (!*end) {
			if (errno || pid == 0 || pid > INT32_MAX) {
				fprintf(stderr, "tollfree-info: bad pid '%s'\n",
					what);
				return 1;
			}
			return stats_live(&o, (uint32_t)pid, wait_ms);
		}
	}
	return stats_file(&o, what);
}
