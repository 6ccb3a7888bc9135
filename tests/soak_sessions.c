/* SPDX-License-Identifier: MIT */
/*
 * soak_sessions: one server process and CLIENTS client processes, each
 * running THREADS concurrent short sessions back to back (one thread per
 * session slot) on loopback for a fixed time.  A session: the server rents
 * a slice of a size that varies with the session, fills it with a pattern
 * and exposes it; the client READs and checks it, attaches a buffer of its
 * own, WRITEs another pattern back and closes; the server checks what was
 * written and closes.
 *
 * Afterwards every session is accounted for: each client reports how many
 * sessions it started, completed and failed (with the first errors
 * printed), the server counts per client what it completed, and the two
 * must agree; every session the server accepted ended as completed, failed
 * or incomplete.  None may fail: on loopback a session has no reason to,
 * so one failed or incomplete session, or one warning or error logged on
 * either side, fails the test (a slow machine gets time: the library's
 * timeouts are seconds, sessions take milliseconds).  The one failure that
 * is not a session's is a server-side session that broke because the
 * client's OPEN failed on a kept connection: the client's library retries
 * it over a new connection, and the retry must complete.  The server's resources
 * must be back to where they were: file descriptors, threads, windows,
 * rented slices and pinned bytes exactly (pinned bytes net of the pool's
 * chunks, which the pool keeps by design and which are reported), RSS
 * within RSS_SLACK above the start, again net of new pool chunks, for the
 * allocator's caching.
 *
 * Usage: soak_sessions [seconds [clients [threads]]]; the defaults (20 s,
 * 3 clients, 4 threads) fit in CI.  scripts/soak.sh runs it for longer.
 * The transport is the environment's (TOLLFREE_SOFT_TRANSPORT).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/resource.h>

#include "fault_util.h"

#define MAX_CLIENTS 16
#define MAX_LIVE    256
#define MAX_LEN	    16384
#define MAX_BROKEN  4096
/* RSS slack, net of new pool chunks: the allocator's caches (about 5 MiB
 * of anonymous memory here) and the soft provider's key table (a memfd
 * of which up to 8 MiB get touched as key indexes advance; bounded). */
#define RSS_SLACK (16L << 20)
/* RSS growth allowed from the middle of the run to its end: a leak grows
 * with the number of sessions, caches stop growing once warm. */
#define RSS_SLACK_MID (4L << 20)

/* Under a sanitizer the allocator keeps freed memory in quarantine and
 * shadow memory grows: RSS is then reported, not checked. */
#define RSS_CHECKED (!TF_TEST_SANITIZER)

#define TMO_MS 5000

struct priv {
	uint32_t client;
	uint32_t seq;
};

static uint32_t seed_of(uint32_t client, uint32_t seq, uint32_t dir)
{
	return (client << 24) ^ (seq << 1) ^ dir;
}

static uint32_t len_of(uint32_t seq)
{
	/* Sizes spread over several pool classes, not all page multiples. */
	return 8 + (seq * 2654435761u) % (MAX_LEN - 8);
}

/* ------------------------------------------------------------ client */

struct client {
	tf_node_t *node;
	uint16_t port;
	uint32_t id;
	uint64_t end_ms;
	atomic_uint seq;
	atomic_ulong ok, failed;
	atomic_int errors_printed;
};

static void client_error(struct client *c, uint32_t seq, const char *what,
			 int ret)
{
	atomic_fetch_add(&c->failed, 1);
	if (atomic_fetch_add(&c->errors_printed, 1) < 10)
		tf_test_info("client %u session %u: %s: %d (%s)", c->id, seq,
			     what, ret, tf_strerror(ret));
}

/* Wait for one completion; 0 or a negative errno / -EIO for a bad one. */
static int one_wc(tf_session_t *s, uint64_t wr_id)
{
	uint64_t t0 = ft_now_ms();
	struct tf_wc wc;

	while (ft_now_ms() - t0 < TMO_MS) {
		int n = tf_session_wait(s, 1, &wc, 100);

		if (n < 0)
			return n;
		if (n == 1)
			return wc.wr_id == wr_id && wc.status == TF_WC_SUCCESS
				       ? 0
				       : -EIO;
		if (tf_session_state(s) == TF_SESSION_BROKEN)
			return -ENOTCONN;
	}
	return -ETIMEDOUT;
}

static void one_session(struct client *c, uint8_t *mine)
{
	uint32_t seq = atomic_fetch_add(&c->seq, 1), len = len_of(seq);
	struct priv pv = {c->id, seq};
	tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_PRIV,
				  .priv = &pv,
				  .priv_len = sizeof(pv)};
	tf_exposure_info_t info;
	tf_session_t *s;
	uint8_t *slice;
	int ret, b, ub;

	ret = tf_session_connect(c->node, "127.0.0.1", c->port, &sp, &s);
	if (ret) {
		client_error(c, seq, "connect", ret);
		return;
	}
	ret = tf_session_wait_peer(s, 1, TMO_MS);
	if (ret) {
		client_error(c, seq, "wait_peer", ret);
		goto out;
	}
	ret = tf_session_peer_exposure(s, 0, &info);
	if (ret || info.length != len) {
		client_error(c, seq, "exposure length", ret ? ret : -EPROTO);
		goto out;
	}
	ret = tf_session_rent(s, len, &b, (void **)&slice);
	if (ret) {
		client_error(c, seq, "rent", ret);
		goto out;
	}
	ret = tf_session_read(s, b, 0, 0, 0, len, 1);
	if (!ret)
		ret = one_wc(s, 1);
	if (ret) {
		client_error(c, seq, "read", ret);
		goto out;
	}
	if (tf_test_check_fill(slice, len, seed_of(c->id, seq, 0)) !=
	    (size_t)-1) {
		client_error(c, seq, "read data differs", -EILSEQ);
		goto out;
	}
	/* The write back goes from a user buffer, attached by the node's
	 * strategy (pool copy or registration cache). */
	tf_test_fill(mine, len, seed_of(c->id, seq, 1));
	ret = tf_session_attach(s, mine, len, TF_ATTACH_IN, &ub);
	if (!ret)
		ret = tf_session_write(s, ub, 0, 0, 0, len, 2);
	if (!ret)
		ret = one_wc(s, 2);
	if (ret) {
		client_error(c, seq, "write", ret);
		goto out;
	}
	atomic_fetch_add(&c->ok, 1);
out:
	tf_session_close(s);
}

static void *client_thread(void *arg)
{
	struct client *c = arg;
	uint8_t *mine = aligned_alloc(64, MAX_LEN);

	CHECK(mine);
	/* At least one session, however late this thread starts on a
	 * loaded machine. */
	do
		one_session(c, mine);
	while (ft_now_ms() < c->end_ms);
	free(mine);
	return NULL;
}

static int client_main(char **argv)
{
	struct client c = {0};
	pthread_t th[64];
	tf_context_t *ctx;
	int nfd = atoi(argv[5]), nthreads;
	char *comma;

	tf_test_begin("soak_sessions.client");
	c.id = (uint32_t)atoi(argv[2]);
	c.port = (uint16_t)atoi(argv[3]);
	nthreads = (int)strtol(argv[4], &comma, 10);
	CHECK(nthreads > 0 && nthreads <= 64);
	CHECK_OK(tf_context_open(NULL, &ctx));
	CHECK_OK(tf_node_create(ctx, NULL, &c.node));
	/* The run's time starts once sessions can: on a loaded machine a
	 * slow start used up the warm-up's 500 ms, which then failed with
	 * no session. */
	c.end_ms = ft_now_ms() + strtoull(comma + 1, NULL, 10);
	for (int i = 0; i < nthreads; i++)
		CHECK(!pthread_create(&th[i], NULL, client_thread, &c));
	for (int i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	tf_node_destroy(c.node);
	tf_context_close(ctx);
	ft_send(nfd, atomic_load(&c.seq));
	ft_send(nfd, atomic_load(&c.ok));
	ft_send(nfd, atomic_load(&c.failed));
	/* A warning or error logged here fails the client, which the server
	 * reports through its exit status. */
	return tf_test_end();
}

/* ------------------------------------------------------------ server */

struct live {
	tf_session_t *s;
	uint8_t *addr;
	struct priv pv;
};

struct server {
	tf_context_t *ctx;
	tf_node_t *node;
	tf_listener_t *l;
	int ep; /* the run's wait set: listener, sessions, client pipes */
	struct live live[MAX_LIVE];
	int nlive, peak;
	uint64_t accepted, completed, failed, incomplete, retried;
	/* Sessions that broke on the server, so that a later completion of
	 * the same client session (the client retries an OPEN that failed
	 * on a kept connection over a new one) is not counted twice. */
	struct priv broken[MAX_BROKEN];
	int nbroken;
	uint64_t done_by[MAX_CLIENTS];
};

struct res {
	int fds;
	long threads, rss, anon, shmem;
	uint64_t pinned, chunk_bytes, mem_chunks;
};

static void res_snap(struct server *v, struct res *r)
{
	tf_context_stats_t cs;
	tf_pool_stats_t ps;

	CHECK_OK(tf_context_query_stats(v->ctx, &cs));
	CHECK_OK(tf_pool_query_stats(tf_node_pool(v->node), &ps));
	r->fds = ft_count_fds();
	r->threads = ft_status("Threads");
	r->rss = ft_status("VmRSS") * 1024;
	r->anon = ft_status("RssAnon") * 1024;
	r->shmem = ft_status("RssShmem") * 1024;
	r->mem_chunks = ps.chunks_by_memory[TF_POOL_MEM_PROVIDER];
	r->pinned = cs.pinned_bytes;
	r->chunk_bytes = ps.chunk_bytes;
}

static bool stock_full(struct server *v)
{
	tf_node_stats_t st;

	CHECK_OK(tf_node_query_stats(v->node, &st));
	return st.stock_entries == st.stock_max;
}

/*
 * Wait for the node's connection stock to be full, then make progress
 * until the fd count has been the same for 200 ms (at most 5 s), so that
 * a snapshot counts no descriptor on its way out: the soft shm transport
 * keeps a peer context (with a pidfd) after its last QP and
 * lets it go at a liveness sweep in a progress call (one call in 64, at
 * most every 5 ms) once the peer process has exited: the count must hold
 * for 200 ms and 256 calls; the soft tcp transport closes lingering
 * sockets within 2 s.  Without this, a warm-up client's kept context
 * could be counted at the start and swept before the end, hiding one fd.
 * A leaked fd does not go away by making progress.
 */
static void settle(struct server *v)
{
	uint64_t t0 = ft_now_ms(), same;
	int last, calls = 0;

	/* The connection stock refills at idle priority (its entries hold
	 * descriptors): full at both snapshots, however long a loaded
	 * machine takes to give it a turn. */
	while (ft_now_ms() - t0 < 30000 && !stock_full(v))
		usleep(1000);
	t0 = same = ft_now_ms();
	last = ft_count_fds();
	while (ft_now_ms() - t0 < 5000 &&
	       (ft_now_ms() - same < 200 || calls < 256)) {
		int n;

		tf_context_progress(v->ctx);
		calls++;
		usleep(1000);
		n = ft_count_fds();
		if (n != last) {
			last = n;
			same = ft_now_ms();
			calls = 0;
		}
	}
}

/* Accept one session if one is there (within @timeout_ms): whether the
 * listener had one. */
static bool server_accept(struct server *v, int timeout_ms)
{
	tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_FLAGS,
				  .flags = TF_SESSION_DEFER_ESTABLISH};
	const struct priv *pv;
	struct live *lv;
	tf_session_t *s;
	size_t plen;
	int ret, b, x;

	ret = tf_listener_accept(v->l, &sp, timeout_ms, &s);
	if (ret == -EAGAIN)
		return false;
	CHECKF(ret == 0, "accept: %d (%s)", ret, tf_strerror(ret));
	v->accepted++;
	pv = tf_session_peer_priv(s, &plen);
	CHECKF(pv && plen == sizeof(*pv) && pv->client < MAX_CLIENTS,
	       "bad private data");
	CHECK(v->nlive < MAX_LIVE);
	lv = &v->live[v->nlive];
	lv->s = s;
	lv->pv = *pv;
	ret = tf_session_rent(s, len_of(pv->seq), &b, (void **)&lv->addr);
	if (!ret) {
		tf_test_fill(lv->addr, len_of(pv->seq),
			     seed_of(pv->client, pv->seq, 0));
		ret = tf_session_expose(
			s, b, 0, len_of(pv->seq),
			TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_WRITE, &x);
	}
	if (!ret)
		ret = tf_session_establish(s);
	if (ret) {
		tf_test_info("server: session %u/%u: %d (%s)", pv->client,
			     pv->seq, ret, tf_strerror(ret));
		tf_session_close(s);
		v->failed++;
		return true;
	}
	/* The session's fd joins the wait set (the connection's, so a kept
	 * connection's next session finds it there already). */
	if (v->ep >= 0) {
		struct epoll_event ev = {.events = EPOLLIN};
		int fd = tf_session_fd(s);

		CHECKF(fd >= 0, "tf_session_fd: %d", fd);
		CHECKF(!epoll_ctl(v->ep, EPOLL_CTL_ADD, fd, &ev) ||
			       errno == EEXIST,
		       "epoll_ctl: %s", strerror(errno));
	}
	if (++v->nlive > v->peak)
		v->peak = v->nlive;
	return true;
}

/*
 * Sleep as tollfree(7) tells a server to ("How a server sleeps"): arm
 * every live session (one that has something already is served at once),
 * then wait on the listener's fd, the sessions' fds and the clients'
 * pipes.  What wakes the server is a client's message; the 100 ms bound
 * only keeps the run's own clock checks going.
 */
static void server_sleep(struct server *v)
{
	struct epoll_event evs[16];

	for (int i = 0; i < v->nlive; i++) {
		int r = tf_session_arm(v->live[i].s);

		CHECKF(r >= 0, "tf_session_arm: %d (%s)", r, tf_strerror(r));
		if (r)
			return;
	}
	CHECK(epoll_wait(v->ep, evs, 16, 100) >= 0 || errno == EINTR);
}

static void server_poll(struct server *v)
{
	struct tf_wc wc[8];

	for (int i = 0; i < v->nlive; i++) {
		struct live *lv = &v->live[i];
		int st;

		CHECK(tf_session_poll(lv->s, 8, wc) >= 0);
		st = tf_session_state(lv->s);
		if (st != TF_SESSION_PEER_CLOSED && st != TF_SESSION_BROKEN)
			continue;
		if (st == TF_SESSION_BROKEN) {
			v->failed++;
			if (v->nbroken < MAX_BROKEN)
				v->broken[v->nbroken++] = lv->pv;
		} else if (tf_test_check_fill(lv->addr, len_of(lv->pv.seq),
					      seed_of(lv->pv.client, lv->pv.seq,
						      1)) == (size_t)-1) {
			v->completed++;
			v->done_by[lv->pv.client]++;
			for (int k = 0; k < v->nbroken; k++)
				if (v->broken[k].client == lv->pv.client &&
				    v->broken[k].seq == lv->pv.seq) {
					v->retried++;
					v->broken[k] = v->broken[--v->nbroken];
					break;
				}
		} else {
			/* The client closed without writing: it failed
			 * and counts it. */
			v->incomplete++;
		}
		/* Out of the wait set before close: the connection (and its
		 * fd) may be kept for the client's next session. */
		if (v->ep >= 0)
			(void)epoll_ctl(v->ep, EPOLL_CTL_DEL,
					tf_session_fd(lv->s), NULL);
		tf_session_close(lv->s);
		*lv = v->live[--v->nlive];
		i--;
	}
}

struct totals {
	uint64_t attempts, ok, failed, el_ms;
};

/* CPU seconds (user and system) of this process (RUSAGE_SELF) or of its
 * children reaped so far (RUSAGE_CHILDREN). */
static double cpu_s(int who)
{
	struct rusage ru;

	CHECK(!getrusage(who, &ru));
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* The 1-minute load average: what else ran on the machine (-1 if
 * unknown). */
static double load1(void)
{
	FILE *f = fopen("/proc/loadavg", "r");
	double l = -1;
	char buf[64], *end;

	if (f) {
		if (fgets(buf, sizeof(buf), f)) {
			double x = strtod(buf, &end);

			if (end != buf)
				l = x;
		}
		fclose(f);
	}
	return l;
}

/*
 * One run: a listener, @nclients client processes with @nthreads threads
 * each for @ms, served until every client reported and no session is
 * live, then the listener is destroyed.  Checks the accounting of every
 * client against the server's.  *@rmid is sampled half-way if not NULL.
 */
static void run(struct server *v, int ms, int nclients, int nthreads,
		struct res *rmid, struct totals *t)
{
	int rfd[MAX_CLIENTS], nrep[MAX_CLIENTS] = {0}, open_pipes = nclients;
	uint64_t rep[MAX_CLIENTS][3], t0 = ft_now_ms();
	bool reported[MAX_CLIENTS] = {0};
	pid_t pid[MAX_CLIENTS];
	char arg[3][32];

	memset(t, 0, sizeof(*t));
	memset(v->done_by, 0, sizeof(v->done_by));
	CHECK_OK(tf_listener_create(v->node, NULL, &v->l));
	v->ep = epoll_create1(EPOLL_CLOEXEC);
	CHECK(v->ep >= 0);
	{
		struct epoll_event ev = {.events = EPOLLIN};

		CHECK_OK(epoll_ctl(v->ep, EPOLL_CTL_ADD, tf_listener_fd(v->l),
				   &ev));
	}
	for (int i = 0; i < nclients; i++) {
		struct epoll_event ev = {.events = EPOLLIN};

		snprintf(arg[0], sizeof(arg[0]), "%d", i);
		snprintf(arg[1], sizeof(arg[1]), "%u", tf_listener_port(v->l));
		snprintf(arg[2], sizeof(arg[2]), "%d,%d", nthreads, ms);
		pid[i] = ft_spawn(arg[0], arg[1], arg[2], &rfd[i]);
		CHECK_OK(epoll_ctl(v->ep, EPOLL_CTL_ADD, rfd[i], &ev));
	}
	/* Serve until every client reported (or its pipe closed) and no
	 * session is live, sleeping when there is nothing to do. */
	while (open_pipes || v->nlive) {
		while (server_accept(v, 0))
			;
		server_poll(v);
		server_sleep(v);
		if (rmid && !rmid->rss && ft_now_ms() - t0 >= (uint64_t)ms / 2)
			res_snap(v, rmid);
		for (int i = 0; i < nclients; i++) {
			struct pollfd pfd = {.fd = rfd[i], .events = POLLIN};
			uint64_t x;

			if (reported[i])
				continue;
			if (ft_recv(rfd[i], &x, 0)) {
				rep[i][nrep[i]++] = x;
				if (nrep[i] < 3)
					continue;
			} else if (poll(&pfd, 1, 0) != 1 ||
				   !(pfd.revents & POLLHUP) ||
				   (pfd.revents & POLLIN)) {
				/* Data still to read comes first: a client
				 * that wrote its report and exited between
				 * the two polls shows both. */
				continue;
			}
			reported[i] = true;
			open_pipes--;
			(void)epoll_ctl(v->ep, EPOLL_CTL_DEL, rfd[i], NULL);
		}
		CHECKF(ft_now_ms() - t0 < (uint64_t)ms + 60000,
		       "the soak did not end: %d clients, %d sessions live",
		       open_pipes, v->nlive);
	}
	t->el_ms = ft_now_ms() - t0;
	close(v->ep);
	v->ep = -1;
	/* Sessions already accepted are done; connections still arriving
	 * cannot be (every client reported). */
	server_accept(v, 100);
	server_poll(v);
	CHECK(v->nlive == 0);
	for (int i = 0; i < nclients; i++) {
		int st = ft_reap(pid[i], 0);

		CHECKF(nrep[i] == 3,
		       "client %d died (status 0x%x) without "
		       "a report",
		       i, st);
		CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		       "client %d failed (status 0x%x; see its output)", i, st);
		close(rfd[i]);
		t->attempts += rep[i][0];
		t->ok += rep[i][1];
		t->failed += rep[i][2];
		CHECKF(rep[i][0] == rep[i][1] + rep[i][2],
		       "client %d: %llu sessions, %llu ok + %llu failed", i,
		       (unsigned long long)rep[i][0],
		       (unsigned long long)rep[i][1],
		       (unsigned long long)rep[i][2]);
		CHECKF(rep[i][1] == v->done_by[i],
		       "client %d completed %llu sessions, the server %llu", i,
		       (unsigned long long)rep[i][1],
		       (unsigned long long)v->done_by[i]);
	}
	tf_listener_destroy(v->l);
	v->l = NULL;
}

int main(int argc, char **argv)
{
	int secs = argc > 1 ? atoi(argv[1]) : 20;
	int nclients = argc > 2 ? atoi(argv[2]) : 3;
	int nthreads = argc > 3 ? atoi(argv[3]) : 4;
	uint64_t attempts, ok, cfailed;
	struct server v = {.ep = -1};
	struct res r0, r1, rmid = {0};
	struct totals t;
	tf_node_stats_t ns;
	tf_pool_stats_t ps;
	long rss_net, rss_mid;
	double srv_cpu, cli_cpu, load0;
	const char *spin;

	if (argc == 6 && !strcmp(argv[1], "peer"))
		return client_main(argv);
	CHECK(secs > 0 && nclients > 0 && nclients <= MAX_CLIENTS &&
	      nthreads > 0 && nthreads <= 64);
	tf_test_begin("soak_sessions");
	signal(SIGPIPE, SIG_IGN);
	CHECK_OK(tf_context_open(NULL, &v.ctx));
	CHECK_OK(tf_node_create(v.ctx, NULL, &v.node));
	/* A short warm-up run creates what the provider creates once per
	 * process (transport sockets, key table); the baseline follows. */
	run(&v, 500, 1, 2, NULL, &t);
	CHECKF(t.ok > 0, "warm-up: no session completed");
	v.accepted = v.completed = v.failed = v.incomplete = v.retried = 0;
	v.nbroken = 0;
	settle(&v);
	res_snap(&v, &r0);

	/* The rate depends on the machine as much as on the code (every
	 * session thread busy-polls, TOLLFREE_POLL_SPIN_US, then yields):
	 * the CPU time per session and the load around the run are
	 * printed with it, so that two figures can be compared. */
	load0 = load1();
	srv_cpu = cpu_s(RUSAGE_SELF);
	cli_cpu = cpu_s(RUSAGE_CHILDREN);
	run(&v, secs * 1000, nclients, nthreads, &rmid, &t);
	srv_cpu = cpu_s(RUSAGE_SELF) - srv_cpu;
	cli_cpu = cpu_s(RUSAGE_CHILDREN) - cli_cpu;
	attempts = t.attempts;
	ok = t.ok;
	cfailed = t.failed;
	CHECK_OK(tf_node_query_stats(v.node, &ns));
	CHECK_OK(tf_pool_query_stats(tf_node_pool(v.node), &ps));
	settle(&v);
	res_snap(&v, &r1);
	rss_net = r1.rss - r0.rss - (long)(r1.chunk_bytes - r0.chunk_bytes);
	rss_mid = r1.rss - rmid.rss - (long)(r1.chunk_bytes - rmid.chunk_bytes);

	printf("soak: %d s, %d clients x %d threads, %llu sessions "
	       "(%.1f/s), %llu ok, %llu failed (server: %llu accepted, %llu "
	       "completed, %llu failed of which %llu retried by the client, "
	       "%llu incomplete), peak %d live\n",
	       secs, nclients, nthreads, (unsigned long long)attempts,
	       attempts * 1000.0 / (double)t.el_ms, (unsigned long long)ok,
	       (unsigned long long)cfailed, (unsigned long long)v.accepted,
	       (unsigned long long)v.completed, (unsigned long long)v.failed,
	       (unsigned long long)v.retried, (unsigned long long)v.incomplete,
	       v.peak);
	spin = getenv("TOLLFREE_POLL_SPIN_US");
	printf("soak: CPU %.0f us per session (server %.0f, clients %.0f), "
	       "%.2f of %ld CPUs; load average %.2f before, %.2f after; "
	       "TOLLFREE_POLL_SPIN_US %s\n",
	       attempts ? (srv_cpu + cli_cpu) * 1e6 / (double)attempts : 0,
	       attempts ? srv_cpu * 1e6 / (double)attempts : 0,
	       attempts ? cli_cpu * 1e6 / (double)attempts : 0,
	       (srv_cpu + cli_cpu) * 1000 / (double)t.el_ms,
	       sysconf(_SC_NPROCESSORS_ONLN), load0, load1(),
	       spin ? spin : "unset (default)");
	printf("soak: qp new %llu reused %llu broken %llu; windows bound "
	       "%llu revoked %llu\n",
	       (unsigned long long)ns.qp_new, (unsigned long long)ns.qp_reused,
	       (unsigned long long)ns.qp_broken,
	       (unsigned long long)ns.windows_bound,
	       (unsigned long long)ns.windows_revoked);
	printf("soak: server deltas: fds %+d, threads %+ld, pinned %+lld B "
	       "(pool chunks %+lld B), RSS %+ld KiB (net of pool chunks "
	       "%+ld KiB, slack %ld KiB)\n",
	       r1.fds - r0.fds, r1.threads - r0.threads,
	       (long long)(r1.pinned - r0.pinned),
	       (long long)(r1.chunk_bytes - r0.chunk_bytes),
	       (r1.rss - r0.rss) / 1024, rss_net / 1024, RSS_SLACK / 1024);
	printf("soak: server RSS anon %+ld KiB, shmem %+ld KiB; second half "
	       "%+ld KiB; pool chunks of provider memory %+lld (one memfd "
	       "each)\n",
	       (r1.anon - r0.anon) / 1024, (r1.shmem - r0.shmem) / 1024,
	       rss_mid / 1024, (long long)(r1.mem_chunks - r0.mem_chunks));
	fflush(stdout);

	/* No session is lost: every one the server accepted ended one way,
	 * and the clients' completions are the server's. */
	CHECKF(v.accepted == v.completed + v.failed + v.incomplete,
	       "server: %llu accepted, %llu completed + %llu failed + %llu "
	       "incomplete",
	       (unsigned long long)v.accepted, (unsigned long long)v.completed,
	       (unsigned long long)v.failed, (unsigned long long)v.incomplete);
	CHECKF(v.completed == ok, "server: %llu completed; clients: %llu ok",
	       (unsigned long long)v.completed, (unsigned long long)ok);
	CHECKF(ok > 0, "no session completed");
	/* None fails: a client failure (its first errors are printed
	 * above), a session the client left without writing, or one that
	 * broke on the server and was not completed by the client's retry. */
	CHECKF(cfailed == 0 && attempts == ok,
	       "%llu of %llu sessions failed on the clients",
	       (unsigned long long)cfailed, (unsigned long long)attempts);
	CHECKF(v.incomplete == 0 && v.failed == v.retried,
	       "server: %llu incomplete, %llu failed of which only %llu "
	       "completed on a retry",
	       (unsigned long long)v.incomplete, (unsigned long long)v.failed,
	       (unsigned long long)v.retried);
	CHECK(ns.sessions_live == 0 && ns.windows_live == 0 &&
	      ns.slices_rented == 0);
	CHECK(ns.windows_bound == ns.windows_revoked ||
	      ns.expose_mr_fallback > 0);
	CHECK(ps.rents == ps.returns);
	/* Each pool chunk of provider memory holds a memfd open. */
	if (r1.fds != r0.fds + (int)(r1.mem_chunks - r0.mem_chunks))
		ft_dump_fds();
	CHECKF(r1.fds == r0.fds + (int)(r1.mem_chunks - r0.mem_chunks),
	       "fds %d, %d at start, %llu new pool chunks", r1.fds, r0.fds,
	       (unsigned long long)(r1.mem_chunks - r0.mem_chunks));
	CHECKF(r1.threads == r0.threads, "threads %ld, %ld at start",
	       r1.threads, r0.threads);
	CHECKF(r1.pinned - r1.chunk_bytes == r0.pinned - r0.chunk_bytes,
	       "pinned bytes net of pool chunks grew by %lld",
	       (long long)((r1.pinned - r1.chunk_bytes) -
			   (r0.pinned - r0.chunk_bytes)));
	CHECKF(!RSS_CHECKED || rss_net <= RSS_SLACK,
	       "RSS grew by %ld KiB net of pool chunks", rss_net / 1024);
	CHECKF(!RSS_CHECKED || rss_mid <= RSS_SLACK_MID,
	       "RSS grew by %ld KiB (net of pool chunks) in the second half",
	       rss_mid / 1024);
	tf_node_destroy(v.node);
	tf_context_close(v.ctx);
	return tf_test_end();
}
