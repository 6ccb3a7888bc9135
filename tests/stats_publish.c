/* SPDX-License-Identifier: MIT */
/*
 * stats_publish: live statistics (TOLLFREE_STATS_PUBLISH) and dumps
 * (TOLLFREE_STATS=file:) as `tollfree-info -s` shows them.
 *  - The record parser refuses every kind of damage with its own error.
 *  - A child publishes, does a known number of 1 KiB writes over the soft
 *    provider, and waits in tf_context_progress(); `tollfree-info -s PID`
 *    (and --json, and the listing of all) show exactly those counts, and
 *    show more after the child did more: the snapshot is live.  Its
 *    segment is 0600 and goes away when the context closes.  An odd seq
 *    written into it does not stop the next snapshot, and req bumped in
 *    a loop gets at most one refresh per millisecond.
 *  - The close-time dump of that context reads back with -s FILE; damaged
 *    copies of it (truncated, bad magic, huge counts, ...) give a clean
 *    error exit and no output.
 *  - A segment whose owner died, and one nobody holds the lock of although
 *    its pid lives, are recognised as stale and removed by the reader;
 *    so is one whose owner was killed while a child it forked without
 *    exec lives on.
 *  - A publisher whose pid is that of a live one (two containers sharing
 *    /dev/shm) takes the next free name and leaves the other's segment
 *    alone, at open and at close.
 *  - Files that no owner wrote are not shown: a record with another pid
 *    than its name's, a file with group or other bits (silently when
 *    listing all), one of another user; one truncated while the tool
 *    reads it gives no SIGBUS.
 *  - A FIFO named like a segment is reported, not opened for good (the
 *    tool runs under an alarm: a hang kills it).
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "stats_fmt.h"
#include "tf_test_unit.h"

#define N_WRITES 37
#define N_MORE	 5
#define MSG	 1024
#define WAIT	 "20000" /* ms for the child to answer (--wait) */

#define NOBODY 65534
/* Long enough for a loaded machine; a tool that hangs dies of it. */
#define TOOL_TIMEOUT_S 120

#define N_TRUNC 100
#define SPIN_NS 300000000ull
#define BUMP_NS 100000000ull

static char dir[64];
static char dump_path[128];
/* Run tollfree-info as this user when not 0 (we are root). */
static uid_t run_as;

/* ------------------------------------------------------------ parser */

static size_t make_record(uint8_t *buf, uint32_t cap)
{
	tf__stats_init(buf, cap, TF_STATS_F_FINAL, 42, 3, 1000, "soft", "dev",
		       "prog");
	tf__stats_add(buf, "ctx.a", 1);
	tf__stats_add(buf, "ctx.b", UINT64_MAX);
	tf__stats_add(buf, "node0.c", 7);
	return tf__stats_seal(buf, 2000);
}

static void parser_checks(void)
{
	uint8_t buf[TF_STATS_HDR_SIZE + 4 * TF_STATS_ENTRY_SIZE];
	uint8_t bad[sizeof(buf)] = {0};
	struct tf_stats_hdr *h = (struct tf_stats_hdr *)bad;
	struct tf_stats_rec r;
	const char *name;
	uint64_t v;
	size_t len = make_record(buf, 4);

	CHECK(len == TF_STATS_HDR_SIZE + 3 * TF_STATS_ENTRY_SIZE);
	CHECK_OK(tf__stats_parse(buf, len, &r));
	CHECK(r.size == len && r.n_entries == 3 && r.pid == 42 &&
	      r.ctx_id == 3 && r.start_ns == 1000 && r.update_ns == 2000 &&
	      r.flags == TF_STATS_F_FINAL && !strcmp(r.provider, "soft") &&
	      !strcmp(r.comm, "prog"));
	tf__stats_entry(&r, 1, &name, &v);
	CHECK(!strcmp(name, "ctx.b") && v == UINT64_MAX);
	/* Full: the fifth counter is dropped, not written past the end. */
	tf__stats_add(buf, "ctx.d", 4);
	tf__stats_add(buf, "ctx.e", 5);
	len = tf__stats_seal(buf, 3000);
	CHECK_OK(tf__stats_parse(buf, len, &r));
	CHECK(r.n_entries == 4 && r.dropped == 1);

	/* Every prefix is truncated, none is read past its length. */
	for (size_t n = 0; n < len; n++)
		CHECK_ERR(tf__stats_parse(buf, n, &r), -ENODATA);
	memcpy(bad, buf, len);
	bad[1] ^= 0x20;
	CHECK_ERR(tf__stats_parse(bad, len, &r), -EBADMSG);
	CHECK_ERR(tf__stats_parse(bad, 3, &r), -EBADMSG);
	memcpy(bad, buf, len);
	h->version = 2;
	CHECK_ERR(tf__stats_parse(bad, len, &r), -EPROTONOSUPPORT);
	memcpy(bad, buf, len);
	h->n_entries = UINT32_MAX;
	CHECK_ERR(tf__stats_parse(bad, len, &r), -EOVERFLOW);
	memcpy(bad, buf, len);
	h->n_entries = 3; /* total_size no longer matches */
	CHECK_ERR(tf__stats_parse(bad, len, &r), -EOVERFLOW);
	memcpy(bad, buf, len);
	h->entry_size = 0;
	CHECK_ERR(tf__stats_parse(bad, len, &r), -EOVERFLOW);
	memcpy(bad, buf, len);
	h->hdr_size = 100;
	CHECK_ERR(tf__stats_parse(bad, len, &r), -EOVERFLOW);
	memcpy(bad, buf, len);
	h->capacity = 2;
	CHECK_ERR(tf__stats_parse(bad, len, &r), -EOVERFLOW);
	memcpy(bad, buf, len);
	memset(bad + TF_STATS_HDR_SIZE, 'x', TF_STATS_NAME_MAX);
	CHECK_ERR(tf__stats_parse(bad, len, &r), -EILSEQ);
	memcpy(bad, buf, len);
	bad[TF_STATS_HDR_SIZE + TF_STATS_ENTRY_SIZE + 2] = '\n';
	CHECK_ERR(tf__stats_parse(bad, len, &r), -EILSEQ);
	memcpy(bad, buf, len);
	bad[TF_STATS_HDR_SIZE] = '\0';
	CHECK_ERR(tf__stats_parse(bad, len, &r), -EILSEQ);
	/* Unterminated text fields come back terminated. */
	memcpy(bad, buf, len);
	memset(h->provider, 'p', sizeof(h->provider));
	CHECK_OK(tf__stats_parse(bad, len, &r));
	CHECK(strlen(r.provider) == sizeof(r.provider) - 1);
}

/* ------------------------------------------------------ tollfree-info */

/* A whole file as a string (the tool's output). */
static char *read_text(const char *path)
{
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap);
	ssize_t n;
	int fd = open(path, O_RDONLY);

	CHECK(buf && fd >= 0);
	while ((n = read(fd, buf + len, cap - len - 1)) > 0) {
		len += (size_t)n;
		if (cap - len == 1) {
			char *nb = realloc(buf, cap * 2);

			CHECK(nb);
			buf = nb;
			cap *= 2;
		}
	}
	close(fd);
	buf[len] = '\0';
	return buf;
}

/* Run tollfree-info with @args (NULL-terminated); its stdout and stderr
 * land in the strings returned.  Returns the exit status, or -1 if it
 * died of a signal (a crash on bad input, or it hung). */
static int run_info(char **out_p, char **err_p, ...)
{
	char out_path[160], err_path[160];
	const char *argv[8] = {TF_TEST_INFO_BIN};
	int argc = 1, status;
	va_list ap;
	pid_t pid;

	va_start(ap, err_p);
	while (argc < 7 && (argv[argc] = va_arg(ap, const char *)))
		argc++;
	va_end(ap);
	argv[argc] = NULL;
	snprintf(out_path, sizeof(out_path), "%s/out", dir);
	snprintf(err_path, sizeof(err_path), "%s/err", dir);
	pid = fork();
	CHECK(pid >= 0);
	if (!pid) {
		int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
			_exit(126);
		if (run_as && (setgid(run_as) || setuid(run_as)))
			_exit(126);
		/* Kept across exec: a tool that hangs is killed. */
		alarm(TOOL_TIMEOUT_S);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	CHECK(waitpid(pid, &status, 0) == pid);
	*out_p = read_text(out_path);
	*err_p = read_text(err_path);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The value printed for counter @name in -s output ("  name  value"), or
 * -1 if it is not there. */
static long long counter(const char *out, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = out; (p = strstr(p, name)); p += n) {
		if (p[-1] == ' ' && p[n] == ' ')
			return strtoll(p + n, NULL, 10);
	}
	return -1;
}

/* ------------------------------------------------------------- child */

struct child {
	tf_context_t *ctx;
	tf_pd_t *pd;
	tf_cq_t *cq;
	tf_qp_t *a, *b;
	tf_mr_t *mr;
	tf_node_t *node;
	uint8_t *src, *dst;
};

static void child_open(struct child *c)
{
	tf_context_params_t cp = {
		.field_mask =
			TF_CONTEXT_PARAM_PROVIDER | TF_CONTEXT_PARAM_TRANSPORT,
		.provider = "soft",
		.transport = "shm",
	};
	tf_qp_params_t qpp;
	uint8_t ba[TF_QP_ADDR_MAX], bb[TF_QP_ADDR_MAX];
	size_t la = sizeof(ba), lb = sizeof(bb);

	CHECK_OK(tf_context_open(&cp, &c->ctx));
	CHECK_OK(tf_pd_create(c->ctx, &c->pd));
	CHECK_OK(tf_cq_create(c->ctx, NULL, &c->cq));
	qpp = (tf_qp_params_t){.send_cq = c->cq, .recv_cq = c->cq};
	CHECK_OK(tf_qp_create(c->pd, &qpp, &c->a));
	CHECK_OK(tf_qp_create(c->pd, &qpp, &c->b));
	CHECK_OK(tf_qp_get_addr(c->a, ba, &la));
	CHECK_OK(tf_qp_get_addr(c->b, bb, &lb));
	CHECK_OK(tf_qp_connect(c->a, bb, lb));
	CHECK_OK(tf_qp_connect(c->b, ba, la));
	c->src = calloc(1, 2 * MSG);
	CHECK(c->src);
	c->dst = c->src + MSG;
	CHECK_OK(tf_mr_reg(c->pd, c->src, 2 * MSG, TF_ACCESS_ALL, &c->mr));
	/* A node too, so that its counters are published. */
	CHECK_OK(tf_node_create(c->ctx, NULL, &c->node));
}

static void child_writes(struct child *c, int n)
{
	for (int i = 0; i < n; i++) {
		struct tf_sge sge = {(uintptr_t)c->src, MSG, tf_mr_lkey(c->mr)};
		struct tf_send_wr wr = {
			.wr_id = (uint64_t)i,
			.sg_list = &sge,
			.num_sge = 1,
			.opcode = TF_WR_RDMA_WRITE,
			.send_flags = TF_SEND_SIGNALED,
			.wr.rdma = {(uintptr_t)c->dst, tf_mr_rkey(c->mr)},
		};
		struct tf_wc wc;

		CHECK_OK(tf_post_send(c->a, &wr, NULL));
		CHECK(tf_cq_wait(c->cq, 1, &wc, 5000) == 1);
		CHECK(wc.status == TF_WC_SUCCESS);
	}
}

static void child_close(struct child *c)
{
	tf_node_destroy(c->node);
	CHECK_OK(tf_mr_dereg(c->mr));
	CHECK_OK(tf_qp_destroy(c->a));
	CHECK_OK(tf_qp_destroy(c->b));
	CHECK_OK(tf_cq_destroy(c->cq));
	CHECK_OK(tf_pd_destroy(c->pd));
	tf_context_close(c->ctx);
	free(c->src);
}

/* Wait for a command byte from the parent, making progress meanwhile
 * (that is when a reader's refresh request is answered). */
static char child_wait(struct child *c, int fd)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	char cmd = 0;

	for (;;) {
		CHECK(tf_context_progress(c->ctx) >= 0);
		if (poll(&pfd, 1, 1) == 1) {
			CHECK(read(fd, &cmd, 1) == 1);
			return cmd;
		}
	}
}

/* Commands: 'm' more writes, 'q' close and exit, 'k' exit without
 * closing (a crash), 's' call tf_context_progress() in a loop for
 * SPIN_NS, 'f' fork a child without exec that only waits for
 * its end, and send its pid. */
static void child_main(int cmd_fd, int ack_fd)
{
	struct child c;
	char cmd;

	tf_test_begin("stats_publish[child]");
	memset(&c, 0, sizeof(c));
	child_open(&c);
	child_writes(&c, N_WRITES);
	CHECK(write(ack_fd, "r", 1) == 1);
	for (;;) {
		cmd = child_wait(&c, cmd_fd);
		if (cmd == 'm') {
			child_writes(&c, N_MORE);
			CHECK(write(ack_fd, "r", 1) == 1);
		} else if (cmd == 'k') {
			_exit(0);
		} else if (cmd == 's') {
			uint64_t end = now_ns() + SPIN_NS;

			/* As fast as it can: a refresh per call if req
			 * moves each time and nothing limits them. */
			while (now_ns() < end)
				CHECK(tf_context_progress(c.ctx) >= 0);
			CHECK(write(ack_fd, "r", 1) == 1);
		} else if (cmd == 'f') {
			pid_t g = fork();

			CHECK(g >= 0);
			if (!g)
				for (;;)
					pause();
			CHECK(write(ack_fd, &g, sizeof(g)) == sizeof(g));
		} else {
			break;
		}
	}
	child_close(&c);
	_exit(tf_test_end() == TF_TEST_PASS ? 0 : 1);
}

struct kid {
	pid_t pid;
	int cmd, ack;
};

static struct kid start_child(void)
{
	int to[2], from[2];
	struct kid k;
	char r;

	CHECK(!pipe(to) && !pipe(from));
	k.pid = fork();
	CHECK(k.pid >= 0);
	if (!k.pid) {
		close(to[1]);
		close(from[0]);
		child_main(to[0], from[1]);
	}
	close(to[0]);
	close(from[1]);
	k.cmd = to[1];
	k.ack = from[0];
	CHECKF(read(k.ack, &r, 1) == 1, "child died before it was ready");
	return k;
}

static void stop_child(struct kid *k, char how)
{
	int status;

	CHECK(write(k->cmd, &how, 1) == 1);
	CHECK(waitpid(k->pid, &status, 0) == k->pid);
	CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	       "child status 0x%x", status);
	close(k->cmd);
	close(k->ack);
}

static void seg_path(char *buf, size_t len, pid_t pid, unsigned id)
{
	snprintf(buf, len, "%s/%s%d.%u", TF_STATS_DIR, TF_STATS_PREFIX,
		 (int)pid, id);
}

/* -------------------------------------------------------------- live */

/* What anyone who can write a segment can do to its owner: neither an
 * odd seq nor req bumped in a loop takes the snapshot or the owner down. */
static void tamper_checks(struct kid *k, const char *path, const char *pid_s)
{
	struct tf_stats_hdr *h;
	uint32_t req, ack, last, seen = 0;
	uint64_t t0, t1;
	char *out, *err, r;
	int fd;

	fd = open(path, O_RDWR);
	CHECK(fd >= 0);
	h = mmap(NULL, TF_STATS_HDR_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
		 fd, 0);
	CHECK(h != MAP_FAILED);
	close(fd);

	/* An odd seq: the owner's next snapshot is whole again. */
	__atomic_store_n(&h->seq, 12345, __ATOMIC_SEQ_CST);
	CHECK(run_info(&out, &err, "-s", "--wait", WAIT, pid_s, (char *)NULL) ==
	      0);
	CHECKF(!strstr(out, "not refreshed") &&
		       counter(out, "ctx.send_posted") == N_WRITES,
	       "after an odd seq:\n%s\n%s", out, err);
	free(out);
	free(err);

	/* req bumped every few microseconds while the owner polls as fast
	 * as it can: it answers, but at most once per millisecond.  (We
	 * sleep between bumps so that the owner gets a CPU on a busy
	 * machine: without the limit it would answer nearly every bump.) */
	CHECK(write(k->cmd, "s", 1) == 1);
	last = __atomic_load_n(&h->ack, __ATOMIC_SEQ_CST);
	t0 = now_ns();
	while ((t1 = now_ns()) - t0 < BUMP_NS) {
		__atomic_add_fetch(&h->req, 1, __ATOMIC_SEQ_CST);
		usleep(20);
		ack = __atomic_load_n(&h->ack, __ATOMIC_SEQ_CST);
		if (ack != last) {
			seen++;
			last = ack;
		}
	}
	CHECK(read(k->ack, &r, 1) == 1);
	tf_test_info("%u refreshes in %.1f ms of requests", seen,
		     (double)(t1 - t0) / 1e6);
	CHECKF(seen <= (t1 - t0) / 1000000 + 2, "%u refreshes in %llu ns", seen,
	       (unsigned long long)(t1 - t0));
	/* The last request is answered all the same. */
	req = __atomic_load_n(&h->req, __ATOMIC_SEQ_CST);
	for (int i = 0; i < 5000; i++) {
		if (__atomic_load_n(&h->ack, __ATOMIC_SEQ_CST) == req)
			break;
		usleep(1000);
	}
	CHECK(__atomic_load_n(&h->ack, __ATOMIC_SEQ_CST) == req);
	munmap(h, TF_STATS_HDR_SIZE);
}

static void live_checks(void)
{
	struct kid k = start_child();
	char pid_s[16], path[128], needle[64], *out, *err;
	struct stat st;
	char r;

	snprintf(pid_s, sizeof(pid_s), "%d", (int)k.pid);
	seg_path(path, sizeof(path), k.pid, 0);
	CHECKF(!stat(path, &st), "no segment %s", path);
	CHECKF((st.st_mode & 0777) == 0600, "segment mode %o",
	       st.st_mode & 0777);

	/* A long --wait: the tool returns as soon as the child answers, and
	 * a loaded machine may delay that past the default. */
	CHECK(run_info(&out, &err, "-s", "--wait", WAIT, pid_s, (char *)NULL) ==
	      0);
	tf_test_info("tollfree-info -s %s:\n%s", pid_s, out);
	CHECKF(!strstr(out, "not refreshed"), "owner did not answer");
	CHECK(counter(out, "ctx.send_posted") == N_WRITES);
	CHECK(counter(out, "ctx.cqe_ok") == N_WRITES);
	CHECK(counter(out, "ctx.bytes_out") == N_WRITES * MSG);
	CHECK(counter(out, "ctx.qp_created") == 2);
	CHECK(counter(out, "ctx.live_qp") == 2);
	/* The node's PD and MR count as well as ours. */
	CHECK(counter(out, "ctx.mr_reg") >= 1);
	CHECK(counter(out, "node0.sessions_opened") == 0);
	/* The server-side bounds' refusals and gauges (session_bounds
	 * makes them count). */
	CHECK(counter(out, "node0.sessions_refused") == 0);
	CHECK(counter(out, "node0.sessions_refused_peer") == 0);
	CHECK(counter(out, "node0.expose_refused") == 0);
	CHECK(counter(out, "node0.kept_refused") == 0);
	CHECK(counter(out, "node0.exposed_bytes") == 0);
	CHECK(counter(out, "node0.sessions_served") == 0);
	CHECK(counter(out, "node0.pool.max_bytes") > 0);
	CHECK(counter(out, "node0.rcache.max_regions") > 0);
	/* The transport the context runs (chosen by "auto", or as here
	 * configured). */
	CHECKF(strstr(out, "provider soft, device soft, transport shm\n"),
	       "no transport in\n%s", out);
	free(out);
	free(err);

	tamper_checks(&k, path, pid_s);

	/* Live: the next look sees what the child did since. */
	CHECK(write(k.cmd, "m", 1) == 1);
	CHECK(read(k.ack, &r, 1) == 1);
	CHECK(run_info(&out, &err, "-s", "--json", "--wait", WAIT, pid_s,
		       (char *)NULL) == 0);
	snprintf(needle, sizeof(needle), "\"ctx.send_posted\": %d",
		 N_WRITES + N_MORE);
	CHECKF(strstr(out, needle), "no %s in\n%s", needle, out);
	snprintf(needle, sizeof(needle), "\"pid\": %s,", pid_s);
	CHECK(strstr(out, needle) && strstr(out, "\"refreshed\": true"));
	CHECK(strstr(out, "\"transport\": \"shm\""));
	free(out);
	free(err);

	/* The listing of every publisher has it (no wait: other publishers
	 * on the host need not answer). */
	CHECK(run_info(&out, &err, "-s", "--wait", "0", (char *)NULL) == 0);
	snprintf(needle, sizeof(needle), "pid %s (", pid_s);
	CHECKF(strstr(out, needle), "listing lacks %s", needle);
	free(out);
	free(err);

	stop_child(&k, 'q');
	CHECKF(stat(path, &st) && errno == ENOENT, "%s left after close", path);
	CHECK(run_info(&out, &err, "-s", pid_s, (char *)NULL) == 1);
	CHECK(!*out && strstr(err, "no process"));
	free(out);
	free(err);
}

/* -------------------------------------------------------------- dump */

static void write_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	CHECK(fd >= 0);
	CHECK(write(fd, buf, len) == (ssize_t)len);
	close(fd);
}

static uint8_t *read_bytes(const char *path, size_t *len_p)
{
	struct stat st;
	uint8_t *buf;
	int fd = open(path, O_RDONLY);

	CHECK(fd >= 0 && !fstat(fd, &st) && st.st_size > 0);
	buf = malloc((size_t)st.st_size);
	CHECK(buf);
	CHECK(read(fd, buf, (size_t)st.st_size) == st.st_size);
	close(fd);
	*len_p = (size_t)st.st_size;
	return buf;
}

static void expect_refused(const char *what, const void *buf, size_t len)
{
	char path[160], *out, *err;
	int ret;

	snprintf(path, sizeof(path), "%s/bad", dir);
	write_file(path, buf, len);
	ret = run_info(&out, &err, "-s", path, (char *)NULL);
	CHECKF(ret == 1, "%s: exit %d", what, ret);
	CHECKF(!*out, "%s: printed\n%s", what, out);
	CHECKF(strstr(err, "tollfree-info: "), "%s: no message", what);
	tf_test_info("%s: %s", what, err);
	free(out);
	free(err);
}

static void dump_checks(void)
{
	struct tf_stats_hdr *h;
	uint8_t *buf, *bad;
	char *out, *err;
	size_t len;

	/* The live child's context appended its record when it closed. */
	CHECK(run_info(&out, &err, "-s", dump_path, (char *)NULL) == 0);
	CHECK(strstr(out, "closed after") && strstr(out, "transport shm"));
	CHECK(counter(out, "ctx.send_posted") == N_WRITES + N_MORE);
	CHECK(counter(out, "ctx.bytes_out") == (N_WRITES + N_MORE) * MSG);
	CHECK(counter(out, "ctx.live_qp") == 0);
	free(out);
	free(err);

	buf = read_bytes(dump_path, &len);
	CHECK(len > TF_STATS_HDR_SIZE);
	bad = malloc(len + 16);
	CHECK(bad);
	h = (struct tf_stats_hdr *)bad;

	expect_refused("empty file", buf, 0);
	expect_refused("truncated header", buf, 100);
	expect_refused("truncated entries", buf, len - 1);
	memcpy(bad, buf, len);
	bad[0] = 'X';
	expect_refused("bad magic", bad, len);
	memcpy(bad, buf, len);
	h->n_entries = UINT32_MAX;
	expect_refused("huge entry count", bad, len);
	memcpy(bad, buf, len);
	h->total_size = UINT32_MAX;
	expect_refused("huge total size", bad, len);
	memcpy(bad, buf, len);
	h->entry_size = 1u << 30;
	expect_refused("huge entry size", bad, len);
	memcpy(bad, buf, len);
	bad[TF_STATS_HDR_SIZE + 1] = 1;
	expect_refused("control byte in a name", bad, len);
	memcpy(bad, buf, len);
	memcpy(bad + len, "TFSTATS", 8);
	expect_refused("trailing partial record", bad, len + 8);
	free(bad);
	free(buf);
}

/* ------------------------------------------------------------- stale */

static void stale_checks(void)
{
	struct kid k = start_child();
	char pid_s[16], path[128], fake[128], *out, *err;
	uint8_t rec[TF_STATS_HDR_SIZE + 4 * TF_STATS_ENTRY_SIZE];
	struct stat st;
	size_t len;
	pid_t g;
	int ret;

	/* A process that dies without closing leaves its segment behind. */
	snprintf(pid_s, sizeof(pid_s), "%d", (int)k.pid);
	seg_path(path, sizeof(path), k.pid, 0);
	stop_child(&k, 'k');
	CHECKF(!stat(path, &st), "%s vanished with its owner", path);
	CHECK(run_info(&out, &err, "-s", pid_s, (char *)NULL) == 1);
	CHECKF(strstr(err, "removed stale") && strstr(err, "no process"),
	       "stale segment not reported:\n%s", err);
	CHECKF(stat(path, &st) && errno == ENOENT, "stale %s not removed",
	       path);
	free(out);
	free(err);

	/* A segment of a live pid (ours) that nobody holds locked is stale
	 * too: the pid was reused. */
	seg_path(fake, sizeof(fake), getpid(), 999);
	len = make_record(rec, 4);
	write_file(fake, rec, len);
	CHECK(run_info(&out, &err, "-s", (char *)NULL) == 0);
	CHECKF(strstr(err, "removed stale") && !strstr(out, "context 999"),
	       "unlocked segment shown:\n%s\n%s", out, err);
	CHECKF(stat(fake, &st) && errno == ENOENT, "stale %s not removed",
	       fake);
	free(out);
	free(err);

	/* The owner killed while a child it forked without exec runs: the
	 * child does not keep the segment looking live. */
	k = start_child();
	snprintf(pid_s, sizeof(pid_s), "%d", (int)k.pid);
	seg_path(path, sizeof(path), k.pid, 0);
	CHECK(write(k.cmd, "f", 1) == 1);
	CHECK(read(k.ack, &g, sizeof(g)) == sizeof(g) && g > 0);
	CHECK(!kill(k.pid, SIGKILL));
	CHECK(waitpid(k.pid, NULL, 0) == k.pid);
	close(k.cmd);
	close(k.ack);
	ret = run_info(&out, &err, "-s", pid_s, (char *)NULL);
	/* The forked child was still there; it goes before any check can
	 * end the test. */
	CHECK(!kill(g, SIGKILL));
	CHECK(ret == 1);
	CHECKF(strstr(err, "removed stale"),
	       "segment of a killed owner not stale:\n%s\n%s", out, err);
	CHECK(!strstr(out, "context 0"));
	CHECKF(stat(path, &st) && errno == ENOENT, "stale %s not removed",
	       path);
	free(out);
	free(err);
}

/* --------------------------------------------------------- same name */

/* A file locked the way an owner locks its segment, held by us. */
static int locked_file(const char *path, uint32_t pid, uint32_t id)
{
	struct flock wr = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
	uint8_t rec[TF_STATS_HDR_SIZE + 4 * TF_STATS_ENTRY_SIZE];
	size_t len;
	int fd;

	tf__stats_init(rec, 4, 0, pid, id, 1000, "soft", "dev", "fake");
	tf__stats_add(rec, "ctx.fake", 1);
	len = tf__stats_seal(rec, 2000);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
	CHECKF(fd >= 0, "create %s: %s", path, strerror(errno));
	CHECK(write(fd, rec, len) == (ssize_t)len);
	CHECK(!fcntl(fd, F_SETLK, &wr));
	return fd;
}

static bool same_file(const char *path, int fd)
{
	struct stat st, st2;

	return !stat(path, &st) && !fstat(fd, &st2) &&
	       st.st_dev == st2.st_dev && st.st_ino == st2.st_ino;
}

/* A process whose pid another live publisher has (two containers that
 * share /dev/shm): neither replaces nor removes the other's segment. */
static void same_name_checks(void)
{
	int to[2], from[2], status, live, stale, other;
	char p0[128], p1[128], p2[128], pid_s[16], c, *out, *err;
	uint8_t rec[TF_STATS_HDR_SIZE + 4 * TF_STATS_ENTRY_SIZE];
	pid_t pid;

	CHECK(!pipe(to) && !pipe(from));
	pid = fork();
	CHECK(pid >= 0);
	if (!pid) {
		tf_context_params_t cp = {
			.field_mask = TF_CONTEXT_PARAM_PROVIDER |
				      TF_CONTEXT_PARAM_TRANSPORT,
			.provider = "soft",
			.transport = "shm",
		};
		tf_context_t *ctx;

		tf_test_begin("stats_publish[same name]");
		CHECK(read(to[0], &c, 1) == 1);
		CHECK_OK(tf_context_open(&cp, &ctx));
		CHECK(write(from[1], "r", 1) == 1);
		CHECK(read(to[0], &c, 1) == 1);
		/* It says that it leaves the file alone. */
		tf_test_expect_log(1);
		tf_context_close(ctx);
		_exit(tf_test_end() == TF_TEST_PASS ? 0 : 1);
	}
	snprintf(pid_s, sizeof(pid_s), "%d", (int)pid);
	/* Context 0 of the child's pid is taken by a live process (us),
	 * context 1 is a leftover of a dead one. */
	seg_path(p0, sizeof(p0), pid, 0);
	seg_path(p1, sizeof(p1), pid, 1);
	seg_path(p2, sizeof(p2), pid, 2);
	live = locked_file(p0, (uint32_t)pid, 0);
	stale = open(p1, O_RDWR | O_CREAT | O_EXCL, 0600);
	CHECK(stale >= 0);
	CHECK(write(stale, rec, make_record(rec, 4)) > 0);
	CHECK(write(to[1], "g", 1) == 1);
	CHECKF(read(from[0], &c, 1) == 1, "child died opening its context");

	/* The child took the first free name; the stale one went. */
	CHECKF(same_file(p0, live), "live %s replaced", p0);
	CHECKF(!same_file(p1, stale), "stale %s not replaced", p1);
	CHECK(run_info(&out, &err, "-s", "--wait", "0", pid_s, (char *)NULL) ==
	      0);
	CHECKF(strstr(out, "context 1:") && strstr(out, "ctx.fake"),
	       "both contexts not shown:\n%s\n%s", out, err);
	free(out);
	free(err);
	close(stale);

	/* Its name taken from it (by hand) while it runs: at close it does
	 * not remove what is there now. */
	other = locked_file(p2, (uint32_t)pid, 1);
	CHECK(!rename(p2, p1));
	CHECK(write(to[1], "q", 1) == 1);
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	       "child status 0x%x", status);
	CHECKF(same_file(p1, other), "%s removed by its former owner", p1);
	CHECKF(same_file(p0, live), "live %s removed", p0);
	CHECK(!unlink(p0) && !unlink(p1));
	close(live);
	close(other);
	close(to[0]);
	close(to[1]);
	close(from[0]);
	close(from[1]);
}

/* ------------------------------------------------------------ forged */

/* Run the tool for our pid on the segment at @path (held locked as by an
 * owner) and expect it to be ignored, with a message naming @why. */
static void expect_ignored(const char *what, const char *path, const char *why)
{
	char pid_s[16], *out, *err;
	int ret;

	snprintf(pid_s, sizeof(pid_s), "%d", (int)getpid());
	ret = run_info(&out, &err, "-s", "--wait", "0", pid_s, (char *)NULL);
	CHECKF(ret == 1 && !strstr(out, "context 997") && strstr(err, path) &&
		       strstr(err, why),
	       "%s: exit %d\n%s\n%s", what, ret, out, err);
	tf_test_info("%s: %s", what, err);
	free(out);
	free(err);
}

/* Anyone can create a file in /dev/shm: the reader shows only segments
 * that an owner could have written. */
static void forged_checks(void)
{
	uint8_t buf[TF_STATS_HDR_SIZE + 4 * TF_STATS_ENTRY_SIZE];
	char path[128], pid_s[16], *out, *err;
	size_t len;
	int fd, ret;
	pid_t pid;

	snprintf(pid_s, sizeof(pid_s), "%d", (int)getpid());
	seg_path(path, sizeof(path), getpid(), 997);

	/* What an owner writes is shown. */
	fd = locked_file(path, (uint32_t)getpid(), 997);
	ret = run_info(&out, &err, "-s", "--wait", "0", pid_s, (char *)NULL);
	CHECKF(ret == 0 && strstr(out, "context 997:"),
	       "honest segment: exit %d\n%s\n%s", ret, out, err);
	free(out);
	free(err);
	close(fd);
	CHECK(!unlink(path));

	/* A record that names another process. */
	fd = locked_file(path, 1, 997);
	expect_ignored("record of another pid", path, "record of pid 1 ");
	close(fd);
	CHECK(!unlink(path));

	/* Group or other bits: not an owner's, reported when its pid is
	 * asked for, not when all are listed. */
	fd = locked_file(path, (uint32_t)getpid(), 997);
	CHECK(!fchmod(fd, 0644));
	expect_ignored("0644 segment", path, "mode 0644");
	ret = run_info(&out, &err, "-s", "--wait", "0", (char *)NULL);
	CHECKF(ret >= 0 && !strstr(out, "context 997") && !strstr(err, path),
	       "0644 segment in the listing: exit %d\n%s\n%s", ret, out, err);
	free(out);
	free(err);

	/* Root reads a segment only if the pid's owner owns it. */
	if (!geteuid()) {
		CHECK(!fchmod(fd, 0600) && !fchown(fd, NOBODY, NOBODY));
		expect_ignored("segment of another user", path, "uid 65534");
	}
	close(fd);
	CHECK(!unlink(path));

	/* One truncated and rewritten in a loop while the tool reads it: an
	 * error or a snapshot each time, never a signal (a mapping gave
	 * SIGBUS in about one run in twenty). */
	fd = locked_file(path, (uint32_t)getpid(), 997);
	/* Not read back from the file: closing a descriptor of it would
	 * drop our lock. */
	tf__stats_init(buf, 4, 0, (uint32_t)getpid(), 997, 1000, "soft", "dev",
		       "fake");
	tf__stats_add(buf, "ctx.fake", 1);
	len = tf__stats_seal(buf, 2000);
	pid = fork();
	CHECK(pid >= 0);
	if (!pid)
		for (;;)
			if (ftruncate(fd, 0) ||
			    pwrite(fd, buf, len, 0) != (ssize_t)len)
				_exit(1);
	for (int i = 0; i < N_TRUNC; i++) {
		ret = run_info(&out, &err, "-s", "--wait", "0", pid_s,
			       (char *)NULL);
		free(out);
		free(err);
		if (ret < 0)
			break;
	}
	kill(pid, SIGKILL);
	CHECK(waitpid(pid, NULL, 0) == pid);
	CHECKF(ret >= 0, "tool killed reading a segment truncated under it");
	close(fd);
	CHECK(!unlink(path));
}

/* -------------------------------------------------------- not a file */

static void fifo_checks(void)
{
	char path[128], pid_s[16], *out, *err;
	int ret;

	snprintf(pid_s, sizeof(pid_s), "%d", (int)getpid());
	seg_path(path, sizeof(path), getpid(), 998);
	CHECKF(!mkfifo(path, 0444), "mkfifo %s: %s", path, strerror(errno));
	/* The tool's read-write open fails on a 0444 FIFO and the read-only
	 * one would wait for a writer.  Root may open it read-write, which
	 * does not wait: so as root, run the tool as nobody, owner of the
	 * FIFO. */
	if (!geteuid()) {
		CHECK(!chown(path, NOBODY, NOBODY));
		run_as = NOBODY;
	}
	ret = run_info(&out, &err, "-s", "--wait", "0", pid_s, (char *)NULL);
	CHECKF(ret == 1, "FIFO asked for: exit %d (-1: hung)", ret);
	CHECKF(!*out && strstr(err, path), "FIFO not reported:\n%s", err);
	free(out);
	free(err);
	ret = run_info(&out, &err, "-s", "--wait", "0", (char *)NULL);
	CHECKF(ret >= 0, "listing with a FIFO: exit %d (-1: hung)", ret);
	CHECK(!strstr(out, "context 998"));
	free(out);
	free(err);
	run_as = 0;
	CHECK(!unlink(path));
}

int main(void)
{
	char *out, *err;

	/* Before anything reads the configuration (once per process):
	 * every context of this test and its children publishes and dumps.
	 * The crossover is fixed so that the child's node does not measure
	 * it. */
	snprintf(dir, sizeof(dir), "/tmp/tf_stats_XXXXXX");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return TF_TEST_FAIL;
	}
	snprintf(dump_path, sizeof(dump_path), "%s/dump", dir);
	setenv("TOLLFREE_STATS_PUBLISH", "y", 1);
	/* Exact object counts: no connection stock made in the background
	 * (its QPs would count). */
	setenv("TOLLFREE_SESSION_STOCK", "0", 1);
	snprintf(out = malloc(160), 160, "file:%s", dump_path);
	setenv("TOLLFREE_STATS", out, 1);
	free(out);
	setenv("TOLLFREE_REG_CROSSOVER", "4K", 1);
	tf_test_begin("stats_publish");

	if (access(TF_STATS_DIR, W_OK))
		tf_test_skip("%s is not writable", TF_STATS_DIR);
	parser_checks();
	live_checks();
	dump_checks();
	stale_checks();
	fifo_checks();
	forged_checks();
	same_name_checks();

	/* Usage errors. */
	CHECK(run_info(&out, &err, "-s", "1", "2", (char *)NULL) == 2);
	free(out);
	free(err);
	CHECK(run_info(&out, &err, "--json", (char *)NULL) == 2);
	free(out);
	free(err);

	{
		char p[160];

		snprintf(p, sizeof(p), "%s/out", dir);
		unlink(p);
		snprintf(p, sizeof(p), "%s/err", dir);
		unlink(p);
		snprintf(p, sizeof(p), "%s/bad", dir);
		unlink(p);
		unlink(dump_path);
		rmdir(dir);
	}
	return tf_test_end();
}
