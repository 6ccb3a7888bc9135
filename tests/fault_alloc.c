/* SPDX-License-Identifier: MIT */
/*
 * fault_alloc: allocation failure injected through tf_set_allocator at
 * every allocation site of a sequence of operations.  For N = 1, 2, ...
 * the Nth allocation made by the test's thread fails; the sequence must
 * then fail with a negative errno (or absorb the failure) and, once torn
 * down, leave exactly as many live allocations as before it.  The sweep
 * ends when a run completes without reaching the Nth allocation: every
 * site was failed once.  Sequences: context open; PD, CQ, QP creation
 * and QP connection; pool create and grow; rcache create and get; node
 * and listener create; session connect + rent + attach + expose + close;
 * session accept + rent + expose + establish + close.
 *
 * Only allocations through the hook are counted and failed, and only on
 * the test's own thread: threads the library starts may allocate (through
 * the hook or libc) at times that would make the count nondeterministic.
 * The peer of the session sequences is this executable started again
 * without a hook (see fault_util.h).
 */
#include <stdatomic.h>

#include "fault_util.h"

#define MAX_N  5000
#define TMO_MS 500 /* node timeout on both sides: failed handshakes */

static atomic_long live;    /* allocations not freed */
static atomic_long nth;	    /* allocations counted since arm() */
static long fail_at;	    /* 0: no injection */
static atomic_int injected; /* the Nth allocation was failed */
static pid_t main_tid;
static tf_context_t *g_ctx; /* progressed while waiting for late frees */

static bool should_fail(void)
{
	if (!fail_at || gettid() != main_tid)
		return false;
	if (atomic_fetch_add(&nth, 1) + 1 != fail_at)
		return false;
	atomic_store(&injected, 1);
	return true;
}

static void *t_malloc(size_t n)
{
	void *p = should_fail() ? NULL : malloc(n);

	if (p)
		atomic_fetch_add(&live, 1);
	return p;
}

static void *t_calloc(size_t n, size_t m)
{
	void *p = should_fail() ? NULL : calloc(n, m);

	if (p)
		atomic_fetch_add(&live, 1);
	return p;
}

static void *t_realloc(void *p, size_t n)
{
	void *q;

	if (should_fail())
		return NULL;
	q = realloc(p, n);
	if (!p && q)
		atomic_fetch_add(&live, 1);
	else if (p && !n)
		atomic_fetch_sub(&live, 1);
	return q;
}

static void t_free(void *p)
{
	if (p)
		atomic_fetch_sub(&live, 1);
	free(p);
}

static void arm(long n)
{
	atomic_store(&nth, 0);
	atomic_store(&injected, 0);
	fail_at = n;
}

/* One sequence: runs the operations and tears everything down; returns 0
 * or the first error. */
typedef int (*seq_fn_t)(void *arg);

static void sweep(const char *name, seq_fn_t fn, void *arg)
{
	long base, before, absorbed = 0, n;
	int ret;

	/* Unfailed first: lazily created state of the context (transport
	 * sockets, tables) then exists before the count starts. */
	before = atomic_load(&live);
	ret = fn(arg);
	CHECKF(ret == 0, "%s: without injection: %d (%s)", name, ret,
	       tf_strerror(ret));
	base = atomic_load(&live);
	if (base != before)
		tf_test_info("%s: %ld allocations live before, %ld after the "
			     "unfailed run",
			     name, before, base);
	for (n = 1; n <= MAX_N; n++) {
		/* A failed allocation is logged where it is detected, and
		 * its consequences (a refused handshake, a connection torn
		 * down) may log more: tolerated from the injection until
		 * everything was freed, and only then; the unfailed run
		 * above and the steps between sweeps must log nothing. */
		tf_test_tolerate_log(true);
		arm(n);
		ret = fn(arg);
		fail_at = 0;
		/* The soft tcp transport frees a failed connection after it
		 * lingered (up to 2 s, during progress calls). */
		for (uint64_t t0 = ft_now_ms();
		     g_ctx && atomic_load(&live) != base &&
		     ft_now_ms() - t0 < 3000;
		     usleep(1000))
			tf_context_progress(g_ctx);
		tf_test_tolerate_log(false);
		CHECKF(atomic_load(&live) == base,
		       "%s: allocation %ld failed: %ld allocations leaked "
		       "(sequence returned %d (%s))",
		       name, n, atomic_load(&live) - base, ret,
		       tf_strerror(ret));
		if (!atomic_load(&injected)) {
			CHECKF(ret == 0,
			       "%s: %d (%s) with no failure, after a run "
			       "that failed allocation %ld",
			       name, ret, tf_strerror(ret), n - 1);
			break;
		}
		CHECKF(ret <= 0 && ret > -4096,
		       "%s: allocation %ld failed: returned %d", name, n, ret);
		absorbed += ret == 0;
	}
	CHECKF(n <= MAX_N, "%s: more than %d allocations", name, MAX_N);
	tf_test_info("%s: %ld allocations, each failed once: %ld errors, %ld "
		     "absorbed, no leak",
		     name, n - 1, n - 1 - absorbed, absorbed);
}

/* ------------------------------------------------------------ sequences */

static int seq_context(void *arg)
{
	tf_context_t *ctx;
	int ret = tf_context_open(NULL, &ctx);

	(void)arg;
	if (!ret)
		tf_context_close(ctx);
	return ret;
}

static int seq_objects(void *arg)
{
	tf_context_t *ctx = arg;
	uint8_t addr[2][TF_QP_ADDR_MAX];
	size_t alen[2] = {sizeof(addr[0]), sizeof(addr[1])};
	tf_qp_t *qp[2] = {NULL, NULL};
	tf_cq_t *cq = NULL;
	tf_pd_t *pd = NULL;
	tf_mr_t *mr = NULL;
	tf_mw_t *mw = NULL;
	static char buf[8192];
	int ret;

	ret = tf_pd_create(ctx, &pd);
	if (ret)
		goto out;
	ret = tf_cq_create(ctx, NULL, &cq);
	if (ret)
		goto out;
	for (int i = 0; i < 2 && !ret; i++) {
		tf_qp_params_t qpp = {.send_cq = cq, .recv_cq = cq};

		ret = tf_qp_create(pd, &qpp, &qp[i]);
		if (!ret)
			ret = tf_qp_get_addr(qp[i], addr[i], &alen[i]);
	}
	if (!ret)
		ret = tf_qp_connect(qp[0], addr[1], alen[1]);
	if (!ret)
		ret = tf_qp_connect(qp[1], addr[0], alen[0]);
	if (!ret)
		ret = tf_mr_reg(pd, buf, sizeof(buf), TF_ACCESS_ALL, &mr);
	if (!ret) {
		ret = tf_mw_alloc(pd, &mw);
		if (ret == -EOPNOTSUPP)
			ret = 0;
	}
out:
	if (mw)
		tf_mw_dealloc(mw);
	if (mr)
		tf_mr_dereg(mr);
	tf_qp_destroy(qp[0]);
	tf_qp_destroy(qp[1]);
	tf_cq_destroy(cq);
	tf_pd_destroy(pd);
	return ret;
}

static int seq_pool(void *arg)
{
	tf_pool_params_t pp = {.field_mask = TF_POOL_PARAM_CHUNK_SIZE,
			       .chunk_size = 64 * 1024};
	tf_slice_t sl[12];
	tf_pool_t *pool;
	int ret, n = 0;

	ret = tf_pool_create(arg, &pp, &pool);
	if (ret)
		return ret;
	/* Three size classes, and a class that needs a second chunk. */
	for (; n < 12 && !ret; n++)
		ret = tf_pool_rent(pool,
				   n < 2   ? 64
				   : n < 4 ? 5000
					   : 16384,
				   &sl[n]);
	if (ret)
		n--;
	for (int i = 0; i < n; i++)
		if (tf_pool_return(pool, &sl[i]) && !ret)
			ret = -EFAULT;
	tf_pool_destroy(pool);
	return ret;
}

static int seq_rcache(void *arg)
{
	static char buf[3][16384] __attribute__((aligned(4096)));
	tf_rcache_reg_t *r[4];
	tf_rcache_t *rc;
	int ret, n = 0;

	ret = tf_rcache_create(arg, NULL, &rc);
	if (ret)
		return ret;
	for (; n < 3 && !ret; n++)
		ret = tf_rcache_get(rc, buf[n], sizeof(buf[n]), TF_ACCESS_ALL,
				    &r[n]);
	if (ret)
		n--;
	/* A hit on the first region. */
	if (!ret) {
		ret = tf_rcache_get(rc, buf[0], 4096, TF_ACCESS_ALL, &r[n]);
		if (!ret)
			n++;
	}
	for (int i = 0; i < n; i++)
		if (tf_rcache_put(rc, r[i]) && !ret)
			ret = -EFAULT;
	tf_rcache_destroy(rc);
	return ret;
}

static tf_node_params_t node_params(void)
{
	tf_node_params_t np = {
		.field_mask = TF_NODE_PARAM_TIMEOUT | TF_NODE_PARAM_QP_CACHE |
			      TF_NODE_PARAM_CROSSOVER,
		.timeout_ms = TMO_MS,
		.qp_cache = 0,
		.crossover = 4096,
	};
	return np;
}

static int seq_node(void *arg)
{
	tf_node_params_t np = node_params();
	tf_listener_t *l = NULL;
	tf_node_t *node;
	int ret;

	ret = tf_node_create(arg, &np, &node);
	if (ret)
		return ret;
	ret = tf_listener_create(node, NULL, &l);
	tf_listener_destroy(l);
	tf_node_destroy(node);
	return ret;
}

struct conn_arg {
	tf_context_t *ctx;
	uint16_t port;
	uint8_t *user;
};

static int seq_connect(void *arg)
{
	struct conn_arg *a = arg;
	tf_node_params_t np = node_params();
	tf_session_t *s = NULL;
	tf_node_t *node;
	int ret, b, ub, x;

	ret = tf_node_create(a->ctx, &np, &node);
	if (ret)
		return ret;
	ret = tf_session_connect(node, "127.0.0.1", a->port, NULL, &s);
	if (!ret)
		ret = tf_session_wait_peer(s, 1, 4 * tf_test_timeout_ms());
	if (!ret)
		ret = tf_session_rent(s, 4096, &b, NULL);
	if (!ret)
		ret = tf_session_attach(s, a->user, 65536, TF_ATTACH_IN, &ub);
	if (!ret)
		ret = tf_session_expose(s, b, 0, 4096, TF_ACCESS_REMOTE_READ,
					&x);
	if (!ret)
		ret = tf_session_expose(s, ub, 0, 65536, TF_ACCESS_REMOTE_READ,
					&x);
	tf_session_close(s);
	/* The user buffer may be in the cache: drop it, so that its entry
	 * is freed before the node is. */
	tf_rcache_invalidate(tf_node_rcache(node), a->user, 65536);
	tf_node_destroy(node);
	return ret;
}

struct acc_arg {
	tf_listener_t *l;
	/* Inject only after accept returned: a failure inside accept drops
	 * that handshake and the client's next attempt succeeds, so the
	 * sites after it are never reached otherwise. */
	bool after_accept;
};

static int seq_accept(void *arg)
{
	struct acc_arg *a = arg;
	tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_FLAGS,
				  .flags = TF_SESSION_DEFER_ESTABLISH};
	tf_session_t *s = NULL;
	long armed = fail_at;
	int ret, b, x;

	if (a->after_accept)
		fail_at = 0;
	ret = tf_listener_accept(a->l, &sp, 4 * tf_test_timeout_ms(), &s);
	if (a->after_accept)
		arm(armed);
	if (!ret)
		ret = tf_session_rent(s, 4096, &b, NULL);
	if (!ret)
		ret = tf_session_expose(s, b, 0, 4096, TF_ACCESS_REMOTE_READ,
					&x);
	if (!ret)
		ret = tf_session_establish(s);
	/* Wait for the client to close (it does once it saw the
	 * exposure), so that close keeps nothing pending. */
	if (!ret)
		ft_wait_peer_close(s, 5000);
	tf_session_close(s);
	return ret;
}

/* ----------------------------------------------------------- the peer */

static int peer_main(char **argv)
{
	tf_node_params_t np = node_params();
	tf_context_t *ctx;
	tf_node_t *node;
	int nfd = atoi(argv[5]);

	tf_test_begin("fault_alloc.peer");
	/* The peer only serves the sweeps, which make it refuse sessions,
	 * and is killed: its log is printed for the reader, never judged
	 * (it does not reach tf_test_end). */
	tf_test_tolerate_log(true);
	CHECK_OK(tf_context_open(NULL, &ctx));
	CHECK_OK(tf_node_create(ctx, &np, &node));
	if (!strcmp(argv[2], "server")) {
		tf_listener_t *l;

		CHECK_OK(tf_listener_create(node, NULL, &l));
		ft_send(nfd, tf_listener_port(l));
		ft_serve_forever(l, 4096, TF_ACCESS_REMOTE_READ, 5000);
	}
	/* Client: sessions back to back until killed. */
	for (uint16_t port = (uint16_t)atoi(argv[3]);;) {
		tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_FLAGS,
					  .flags = TF_SESSION_NO_REUSE};
		tf_session_t *s;

		if (tf_session_connect(node, "127.0.0.1", port, &sp, &s)) {
			usleep(1000);
			continue;
		}
		tf_session_wait_peer(s, 1, 2000);
		tf_session_close(s);
	}
}

int main(int argc, char **argv)
{
	tf_allocator_t al = {t_malloc, t_calloc, t_realloc, t_free};
	struct conn_arg ca = {0};
	struct acc_arg aa;
	tf_node_params_t np;
	tf_context_t *ctx;
	tf_node_t *node;
	uint64_t port;
	char ports[16];
	int rfd;
	pid_t pid;
	tf_pd_t *pd;

	if (argc == 6 && !strcmp(argv[1], "peer"))
		return peer_main(argv);
	/* Each allocation is failed in turn, counted on the calling thread:
	 * a node's connection stock, made by a thread of its own in the
	 * background, would allocate at times no sweep can predict. */
	setenv("TOLLFREE_SESSION_STOCK", "0", 1);
	/* Before any other tf_ call. */
	tf_set_allocator(&al);
	main_tid = gettid();
	tf_test_begin("fault_alloc");
	signal(SIGPIPE, SIG_IGN);

	sweep("context open", seq_context, NULL);
	CHECKF(atomic_load(&live) == 0, "%ld allocations live after close",
	       atomic_load(&live));
	CHECK_OK(tf_context_open(NULL, &ctx));
	g_ctx = ctx;
	sweep("pd, cq, qp, connect, mr, mw", seq_objects, ctx);
	CHECK_OK(tf_pd_create(ctx, &pd));
	sweep("pool create, rent, grow", seq_pool, pd);
	sweep("rcache create, get", seq_rcache, pd);
	sweep("node, listener create", seq_node, ctx);

	pid = ft_spawn("server", "0", "0", &rfd);
	CHECK(ft_recv(rfd, &port, 4 * tf_test_timeout_ms()));
	ca.ctx = ctx;
	ca.port = (uint16_t)port;
	ca.user = aligned_alloc(4096, 65536);
	CHECK(ca.user);
	memset(ca.user, 1, 65536);
	sweep("session connect, rent, attach, expose, close", seq_connect, &ca);
	ft_reap(pid, SIGKILL);
	close(rfd);

	np = node_params();
	CHECK_OK(tf_node_create(ctx, &np, &node));
	CHECK_OK(tf_listener_create(node, NULL, &aa.l));
	snprintf(ports, sizeof(ports), "%u", tf_listener_port(aa.l));
	pid = ft_spawn("client", ports, "0", &rfd);
	aa.after_accept = false;
	sweep("session accept", seq_accept, &aa);
	aa.after_accept = true;
	sweep("session rent, expose, establish, close after accept", seq_accept,
	      &aa);
	ft_reap(pid, SIGKILL);
	close(rfd);
	tf_listener_destroy(aa.l);
	tf_node_destroy(node);
	tf_test_info("%ld allocations live with only the context and a PD",
		     atomic_load(&live));
	tf_pd_destroy(pd);
	g_ctx = NULL;
	tf_context_close(ctx);
	free(ca.user);
	/* Once caught: tf_pool_destroy kept the calling thread's cache,
	 * and the soft provider its process-wide pin table. */
	CHECKF(atomic_load(&live) == 0,
	       "%ld allocations live after every object was destroyed and "
	       "the context closed (pool thread caches of destroyed pools?)",
	       atomic_load(&live));
	return tf_test_end();
}
