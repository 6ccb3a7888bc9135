/* SPDX-License-Identifier: MIT */
/*
 * conf_listener_shards: several threads serve one port (issue 15, items 1
 * and 5).
 *
 * Side B runs one node with SHARDS listeners on the same port, made with
 * TF_LISTENER_REUSEPORT, each driven by its own thread: the thread accepts
 * from its listener and serves the sessions it returned, concurrently with
 * the other listener threads.  Listener 0's thread hands each session to
 * a thread of its own, which serves it while the listener goes on
 * accepting, and closes it when that thread is done (a server session's
 * close is the one call serialized with its listener).  Side A runs CLIENTS threads on one node (so
 * that they share its kept connections, its stock and its counters) and
 * one more client process of its own (exec'd, with its own context and
 * node).  Each client opens ROUNDS short sessions, one at a time: every
 * third with TF_SESSION_NO_REUSE (a new connection, which the kernel hands
 * to one of the listeners by a hash of its source port), the others on a
 * kept connection when the node has one (which stays with the listener
 * that accepted it).  In each session the client names a seed in its
 * private data, WRITEs that pattern into the slice the server exposed,
 * READs it back and checks it, and closes; the server checks the pattern
 * in its slice once the client closed.  Every session must succeed.
 *
 * Side B counts the sessions each listener served: their sum must be the
 * number the clients opened, and at least two listeners must have served
 * (at least CLIENTS * ROUNDS / 3 + ROUNDS / 3 = 40 new connections are
 * spread by the hash: all of them on one listener of three has odds of
 * 3^-39).  The spread is printed.
 *
 * First, without the flag, a second listener on a bound port fails with
 * -EADDRINUSE, and so does one with the flag on a port bound without it.
 * Then a server that serves the session it accepted before it accepts
 * again (as every listener thread here does) must not drop a connection
 * whose HELLO waited meanwhile: two clients connect at once, the server
 * accepts one, serves it, stays away past the HELLO deadline, and accepts
 * the other (whose complete HELLO was dropped with its connection at the
 * deadline before tf_listener_accept served such messages first).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "session_util.h"

#define SHARDS	3
#define CLIENTS 4
#define ROUNDS	24
#define LEN	4096

/* ---------------------------------------------------------- server */

struct shard {
	tf_listener_t *l;
	pthread_t thr;
	bool handoff; /* serve each session on a thread of its own */
	unsigned served, reused;
};

static atomic_bool stop_serving;
static atomic_uint served_total;

/* Serve one session: expose a slice, wait for the client's close, and
 * find its pattern in the slice (the close is the caller's). */
static void serve_data(tf_session_t *s)
{
	size_t plen;
	const void *priv = tf_session_peer_priv(s, &plen);
	uint32_t seed;
	uint8_t *a;
	int b, x;

	CHECKF(priv && plen == sizeof(seed), "private data of %zu bytes", plen);
	memcpy(&seed, priv, sizeof(seed));
	CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&a));
	memset(a, 0, LEN);
	CHECK_OK(tf_session_expose(
		s, b, 0, LEN, TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_WRITE,
		&x));
	CHECK(x == 0);
	CHECK_OK(tf_session_establish(s));
	CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
	CHECK_FILL(a, LEN, seed);
}

/* The end of a session, on its listener's thread. */
static void close_one(tf_session_t *s, struct shard *sh)
{
	sh->reused += tf_session_reused(s) == 1;
	tf_session_close(s);
	sh->served++;
	atomic_fetch_add(&served_total, 1);
}

static void serve_one(tf_session_t *s, struct shard *sh)
{
	serve_data(s);
	close_one(s, sh);
}

/* A session served on a thread of its own while its listener's thread
 * goes on accepting; the listener's thread closes it. */
#define MAX_JOBS 16
struct job {
	tf_session_t *s;
	pthread_t thr;
	atomic_bool done;
};

static void *job_main(void *arg)
{
	struct job *j = arg;

	serve_data(j->s);
	atomic_store(&j->done, true);
	return NULL;
}

/* Close the sessions whose threads finished (a slot is free when its
 * s is NULL); a free slot, or -1.  *@busy_p: the slots still in use. */
static int reap_jobs(struct shard *sh, struct job *jobs, int *busy_p)
{
	int free_slot = -1;

	*busy_p = 0;
	for (int i = 0; i < MAX_JOBS; i++) {
		if (jobs[i].s && atomic_load(&jobs[i].done)) {
			CHECK(!pthread_join(jobs[i].thr, NULL));
			close_one(jobs[i].s, sh);
			jobs[i].s = NULL;
		}
		if (!jobs[i].s)
			free_slot = i;
		else
			++*busy_p;
	}
	return free_slot;
}

/* A listener whose sessions are served by other threads: the data calls
 * of a server session may run while its listener accepts, only its close
 * is serialized with the listener. */
static void shard_handoff(struct shard *sh, const tf_session_params_t *sp)
{
	struct job jobs[MAX_JOBS];
	int busy = 0;

	memset(jobs, 0, sizeof(jobs));
	for (;;) {
		int slot = reap_jobs(sh, jobs, &busy), ret;
		tf_session_t *s;

		if (atomic_load(&stop_serving) && !busy)
			break;
		if (slot < 0) {
			usleep(1000);
			continue;
		}
		ret = tf_listener_accept(sh->l, sp, 5, &s);
		if (ret == -EAGAIN || ret == -EINTR)
			continue;
		CHECKF(ret == 0, "accept: %s", tf_strerror(ret));
		jobs[slot].s = s;
		atomic_store(&jobs[slot].done, false);
		CHECK(!pthread_create(&jobs[slot].thr, NULL, job_main,
				      &jobs[slot]));
	}
}

/* One listener's thread: its accepts and its sessions, nobody else's. */
static void *shard_main(void *arg)
{
	struct shard *sh = arg;
	tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_FLAGS,
				  .flags = TF_SESSION_DEFER_ESTABLISH};

	if (sh->handoff) {
		shard_handoff(sh, &sp);
		return NULL;
	}
	while (!atomic_load(&stop_serving)) {
		tf_session_t *s;
		int ret = tf_listener_accept(sh->l, &sp, 20, &s);

		if (ret == -EAGAIN || ret == -EINTR)
			continue;
		CHECKF(ret == 0, "accept: %s", tf_strerror(ret));
		serve_one(s, sh);
	}
	return NULL;
}

static tf_listener_t *listen_port(tf_node_t *node, uint16_t port,
				  uint32_t flags, int *err_p)
{
	tf_listener_params_t lp = {.field_mask = TF_LISTENER_PARAM_PORT |
						 TF_LISTENER_PARAM_FLAGS,
				   .port = port,
				   .flags = flags};
	tf_listener_t *l = NULL;

	*err_p = TOLERATED(tf_listener_create(node, &lp, &l));
	return l;
}

/* Without TF_LISTENER_REUSEPORT on both, a bound port is not shared. */
static void exclusive_ports(tf_node_t *node)
{
	tf_listener_t *l, *l2;
	uint16_t port;
	int ret;

	l = listen_port(node, 0, 0, &ret);
	CHECK_OK(ret);
	port = tf_listener_port(l);
	l2 = listen_port(node, port, 0, &ret);
	CHECK_ERR(ret, -EADDRINUSE);
	CHECK(!l2);
	l2 = listen_port(node, port, TF_LISTENER_REUSEPORT, &ret);
	CHECK_ERR(ret, -EADDRINUSE);
	CHECK(!l2);
	tf_listener_destroy(l);
	/* ... and the first with the flag does not let one without in. */
	l = listen_port(node, 0, TF_LISTENER_REUSEPORT, &ret);
	CHECK_OK(ret);
	port = tf_listener_port(l);
	l2 = listen_port(node, port, 0, &ret);
	CHECK_ERR(ret, -EADDRINUSE);
	CHECK(!l2);
	tf_listener_destroy(l);
}

static int config_ms(const char *name)
{
	char v[32];

	CHECK_OK(tf_config_get(name, v, sizeof(v)));
	return (int)strtol(v, NULL, 10);
}

/* Two connections arrive together; the second waits while the first's
 * session is served and the server stays away. */
static void server_late_hello(struct tf_pair *p, tf_node_t *node)
{
	int hello_ms = config_ms("SESSION_HELLO_TIMEOUT_MS");
	int tmo_ms = config_ms("SESSION_TIMEOUT_MS");
	struct shard sh = {0};
	tf_node_stats_t st;
	int ret;

	if (tmo_ms < hello_ms)
		hello_ms = tmo_ms;
	sh.l = listen_port(node, 0, 0, &ret);
	CHECK_OK(ret);
	tf_test_send_u64(p, tf_listener_port(sh.l));
	/* Both clients are connecting: let their HELLOs arrive, so that
	 * the first accept takes both connections. */
	tf_test_recv_u64(p);
	usleep(200 * 1000);
	serve_one(st_accept(sh.l, TF_SESSION_DEFER_ESTABLISH), &sh);
	usleep((useconds_t)(hello_ms + 200) * 1000);
	serve_one(st_accept(sh.l, TF_SESSION_DEFER_ESTABLISH), &sh);
	CHECK_OK(tf_node_query_stats(node, &st));
	CHECKF(st.handshake_rejects == 0, "%llu handshakes dropped",
	       (unsigned long long)st.handshake_rejects);
	tf_listener_destroy(sh.l);
	atomic_store(&served_total, 0);
}

static void server(struct tf_pair *p, tf_node_t *node)
{
	struct shard sh[SHARDS];
	unsigned total = 0, serving = 0, expect;
	tf_node_stats_t st;
	uint16_t port = 0;
	int ret;

	exclusive_ports(node);
	server_late_hello(p, node);
	memset(sh, 0, sizeof(sh));
	for (int i = 0; i < SHARDS; i++) {
		sh[i].l = listen_port(node, port, TF_LISTENER_REUSEPORT, &ret);
		CHECKF(ret == 0, "listener %d on port %u: %s", i, port,
		       tf_strerror(ret));
		port = tf_listener_port(sh[i].l);
	}
	tf_test_send_u64(p, port);
	/* Listener 0 hands its sessions to threads of their own. */
	sh[0].handoff = true;
	for (int i = 0; i < SHARDS; i++)
		CHECK(!pthread_create(&sh[i].thr, NULL, shard_main, &sh[i]));
	/* Side A says how many sessions its clients completed. */
	expect = (unsigned)tf_test_recv_u64(p);
	/* Every session a client completed was accepted by then; its
	 * thread finishes serving it before it looks at the flag. */
	atomic_store(&stop_serving, true);
	for (int i = 0; i < SHARDS; i++) {
		CHECK(!pthread_join(sh[i].thr, NULL));
		tf_test_info("listener %d served %u sessions (%u on kept "
			     "connections)",
			     i, sh[i].served, sh[i].reused);
		total += sh[i].served;
		serving += sh[i].served > 0;
	}
	CHECKF(total == expect && total == atomic_load(&served_total),
	       "served %u sessions, the clients opened %u", total, expect);
	CHECKF(serving >= 2, "only %u of %d listeners served", serving, SHARDS);
	CHECK_OK(tf_node_query_stats(node, &st));
	CHECK(st.sessions_opened == total + 2 &&
	      st.sessions_closed == total + 2);
	CHECK(st.sessions_live == 0 && st.windows_live == 0 &&
	      st.slices_rented == 0);
	CHECKF(st.handshake_rejects == 0 && st.pending_dropped == 0,
	       "%llu handshakes rejected, %llu dropped",
	       (unsigned long long)st.handshake_rejects,
	       (unsigned long long)st.pending_dropped);
	for (int i = 0; i < SHARDS; i++)
		tf_listener_destroy(sh[i].l);
}

/* ---------------------------------------------------------- clients */

struct client {
	tf_node_t *node;
	uint16_t port;
	uint32_t id;
	pthread_t thr;
	unsigned done, reused;
};

static void client_session(struct client *cl, int round)
{
	uint32_t seed = (cl->id << 16) | (uint32_t)round;
	tf_session_params_t sp = {
		.field_mask = TF_SESSION_PARAM_PRIV | TF_SESSION_PARAM_FLAGS,
		.priv = &seed,
		.priv_len = sizeof(seed),
		.flags = round % 3 == 2 ? TF_SESSION_NO_REUSE : 0};
	tf_exposure_info_t e;
	tf_session_t *s;
	uint8_t *w, *r;
	int bw, br;

	CHECK_OK(tf_session_connect(cl->node, "127.0.0.1", cl->port, &sp, &s));
	CHECK(tf_session_state(s) == TF_SESSION_OPEN);
	CHECK(tf_session_peer_count(s) == 1);
	CHECK_OK(tf_session_peer_exposure(s, 0, &e));
	CHECK(e.length == LEN);
	CHECK_OK(tf_session_rent(s, LEN, &bw, (void **)&w));
	CHECK_OK(tf_session_rent(s, LEN, &br, (void **)&r));
	tf_test_fill(w, LEN, seed);
	memset(r, 0, LEN);
	CHECK_OK(tf_session_write(s, bw, 0, 0, 0, LEN, 1));
	st_expect(s, 1, TF_WC_SUCCESS, NULL);
	CHECK_OK(tf_session_read(s, br, 0, 0, 0, LEN, 2));
	st_expect(s, 2, TF_WC_SUCCESS, NULL);
	CHECK_FILL(r, LEN, seed);
	cl->reused += tf_session_reused(s) == 1;
	tf_session_close(s);
	cl->done++;
}

/* One session on a new connection. */
static void *client_first(void *arg)
{
	struct client *cl = arg;

	client_session(cl, 2);
	return NULL;
}

static void *client_main(void *arg)
{
	struct client *cl = arg;

	for (int i = 0; i < ROUNDS; i++)
		client_session(cl, i);
	return NULL;
}

/* The client process (exec'd by side A): its own context and node. */
static int client_process(const char *port, const char *wfd)
{
	struct client cl = {.id = CLIENTS + 1};
	tf_context_t *ctx;
	char line[32];
	int fd = (int)strtol(wfd, NULL, 10);

	tf_test_begin("conf_listener_shards[proc]");
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	cl.port = (uint16_t)strtoul(port, NULL, 10);
	CHECK_OK(tf_context_open(NULL, &ctx));
	CHECK_OK(tf_node_create(ctx, NULL, &cl.node));
	client_main(&cl);
	tf_node_destroy(cl.node);
	tf_context_close(ctx);
	snprintf(line, sizeof(line), "%u\n", cl.done);
	CHECK(write(fd, line, strlen(line)) == (ssize_t)strlen(line));
	close(fd);
	return tf_test_end();
}

static void clients_late_hello(struct tf_pair *p, tf_node_t *node)
{
	struct client cl[2];

	memset(cl, 0, sizeof(cl));
	cl[0].port = cl[1].port = (uint16_t)tf_test_recv_u64(p);
	for (int i = 0; i < 2; i++) {
		cl[i].node = node;
		cl[i].id = 100 + (uint32_t)i;
		CHECK(!pthread_create(&cl[i].thr, NULL, client_first, &cl[i]));
	}
	tf_test_send_u64(p, 2);
	for (int i = 0; i < 2; i++) {
		CHECK(!pthread_join(cl[i].thr, NULL));
		CHECK(cl[i].done == 1);
	}
}

static void clients(struct tf_pair *p, tf_node_t *node)
{
	struct client cl[CLIENTS];
	unsigned done = 0, reused = 0, proc_done = 0;
	char port[16], wfd[16], line[32] = "";
	int fds[2], status;
	tf_node_stats_t st;
	ssize_t n;
	pid_t pid;

	clients_late_hello(p, node);
	memset(cl, 0, sizeof(cl));
	cl[0].port = (uint16_t)tf_test_recv_u64(p);
	snprintf(port, sizeof(port), "%u", cl[0].port);
	CHECK(!pipe(fds));
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		snprintf(wfd, sizeof(wfd), "%d", fds[1]);
		execl("/proc/self/exe", "conf_listener_shards", "client", port,
		      wfd, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	for (int i = 0; i < CLIENTS; i++) {
		cl[i].node = node;
		cl[i].port = cl[0].port;
		cl[i].id = (uint32_t)i + 1;
		CHECK(!pthread_create(&cl[i].thr, NULL, client_main, &cl[i]));
	}
	for (int i = 0; i < CLIENTS; i++) {
		CHECK(!pthread_join(cl[i].thr, NULL));
		done += cl[i].done;
		reused += cl[i].reused;
	}
	n = read(fds[0], line, sizeof(line) - 1);
	close(fds[0]);
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	       "the client process failed (status 0x%x)", status);
	CHECK(n > 0);
	proc_done = (unsigned)strtoul(line, NULL, 10);
	CHECK(done == CLIENTS * ROUNDS && proc_done == ROUNDS);
	tf_test_info("%u sessions from %d threads (%u on kept connections) "
		     "and %u from a process",
		     done, CLIENTS, reused, proc_done);
	CHECK_OK(tf_node_query_stats(node, &st));
	CHECK(st.sessions_opened == done + 2 && st.sessions_closed == done + 2);
	CHECK(st.qp_reused == reused && st.qp_reused > 0);
	CHECK(st.sessions_live == 0 && st.slices_rented == 0);
	tf_test_send_u64(p, done + proc_done);
}

int main(int argc, char **argv)
{
	struct tf_pair p;
	tf_node_t *node;

	/* The second client of server_late_hello waits for its ACCEPT
	 * while the server is away past the HELLO deadline on purpose: give
	 * its connect room under load (the sanitizer runs set as much).  A
	 * client sends its HELLO once it has made its QPs, which under a
	 * sanitizer, with several clients starting at once, may take longer
	 * than the default 500 ms: the server would drop it. */
	setenv("TOLLFREE_SESSION_TIMEOUT_MS", "10000", 0);
	setenv("TOLLFREE_SESSION_HELLO_TIMEOUT_MS", "2000", 0);
	if (argc == 4 && !strcmp(argv[1], "client"))
		return client_process(argv[2], argv[3]);
	tf_test_begin("conf_listener_shards");
	tf_test_pair_open(&p);
	node = st_node(&p, -1, NULL, 0);
	if (p.side == TF_SIDE_B)
		server(&p, node);
	else
		clients(&p, node);
	tf_test_sync(&p);
	tf_node_destroy(node);
	return tf_test_pair_end(&p);
}
