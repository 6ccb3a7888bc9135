/* SPDX-License-Identifier: MIT */
/*
 * fault_memlock: pinning refused by RLIMIT_MEMLOCK for the context, the
 * pool and the session layer (rent, attach in each registration mode,
 * expose).  Every refusal is a clear negative errno, the session stays
 * usable for what does fit, and nothing is left behind: no window bound,
 * no slice rented, no region pinned, VmLck and the context's pinned bytes
 * back to their values before.
 *
 * Root bypasses RLIMIT_MEMLOCK through CAP_IPC_LOCK, so the test runs in a
 * forked child that drops CAP_IPC_LOCK before lowering the limit (as
 * tests/rcache_memlock.c does).  The session peer is started before that,
 * unrestricted (see fault_util.h).
 */
#include <sys/mman.h>
#include <sys/resource.h>

#include "fault_util.h"
#include "tf_test_unit.h"

#define LIMIT (256 * 1024)
#define BIG   (1 << 20)
#define SMALL (64 * 1024)

static bool pin_error(int ret)
{
	return ret == -ENOMEM || ret == -EAGAIN || ret == -EPERM;
}

static const char *mode_name(int mode)
{
	return mode == TF_REG_POOL    ? "pool"
	       : mode == TF_REG_CACHE ? "cache"
				      : "direct";
}

static void check_clean(tf_context_t *ctx, tf_node_t *node, long vmlck0,
			const char *what)
{
	tf_context_stats_t cs;
	tf_node_stats_t st;

	if (node) {
		CHECK_OK(tf_node_query_stats(node, &st));
		CHECKF(st.windows_live == 0 && st.slices_rented == 0 &&
			       st.sessions_live == 0,
		       "%s: %llu windows, %llu slices, %llu sessions left",
		       what, (unsigned long long)st.windows_live,
		       (unsigned long long)st.slices_rented,
		       (unsigned long long)st.sessions_live);
	}
	CHECK_OK(tf_context_query_stats(ctx, &cs));
	CHECKF(cs.pinned_bytes == 0, "%s: %llu bytes still pinned", what,
	       (unsigned long long)cs.pinned_bytes);
	CHECKF(tf_test_vmlck() == vmlck0, "%s: VmLck %ld, %ld before", what,
	       tf_test_vmlck(), vmlck0);
}

/* One session on a node with registration @mode, pool chunks too big to
 * pin: rent and big attaches fail, a small attach that fits works (except
 * through the pool) and can be exposed. */
static void session_mode(tf_context_t *ctx, uint16_t port, int mode,
			 uint8_t *big, long vmlck0)
{
	tf_pool_params_t pp = {.field_mask = TF_POOL_PARAM_CHUNK_SIZE,
			       .chunk_size = 2 << 20};
	tf_node_params_t np = {
		.field_mask = TF_NODE_PARAM_REG_MODE | TF_NODE_PARAM_POOL |
			      TF_NODE_PARAM_CROSSOVER | TF_NODE_PARAM_QP_CACHE,
		.reg_mode = mode,
		.pool = &pp,
		.crossover = 4096,
		.qp_cache = 0,
	};
	const char *name = mode_name(mode);
	tf_node_t *node;
	tf_session_t *s;
	int ret, b, x;

	/* The node's pool may try to pin a first chunk. */
	ret = TOLERATED(tf_node_create(ctx, &np, &node));
	if (ret) {
		/* Acceptable only as a pinning error, with nothing left. */
		CHECKF(pin_error(ret), "%s: node create: %d (%s)", name, ret,
		       tf_strerror(ret));
		tf_test_info("%s: node create refused: %s", name,
			     tf_strerror(ret));
		check_clean(ctx, NULL, vmlck0, name);
		return;
	}
	CHECK_OK(tf_session_connect(node, "127.0.0.1", port, NULL, &s));
	CHECK_OK(tf_session_wait_peer(s, 1, 4 * tf_test_timeout_ms()));

	ret = TOLERATED(tf_session_rent(s, 4096, &b, NULL));
	CHECKF(pin_error(ret), "%s: rent past RLIMIT_MEMLOCK: %d (%s)", name,
	       ret, tf_strerror(ret));
	tf_test_info("%s: rent refused: %s", name, tf_strerror(ret));
	ret = TOLERATED(tf_session_attach(s, big, BIG, TF_ATTACH_IN, &b));
	CHECKF(pin_error(ret), "%s: attach of %d bytes: %d (%s)", name, BIG,
	       ret, tf_strerror(ret));
	tf_test_info("%s: attach of 1 MiB refused: %s", name, tf_strerror(ret));
	/* Through the pool it needs a chunk, which cannot be pinned; the
	 * other modes must do it without an error. */
	if (mode == TF_REG_POOL)
		ret = TOLERATED(
			tf_session_attach(s, big, SMALL, TF_ATTACH_IN, &b));
	else
		ret = tf_session_attach(s, big, SMALL, TF_ATTACH_IN, &b);
	if (mode == TF_REG_POOL) {
		CHECKF(pin_error(ret), "%s: small attach: %d (%s)", name, ret,
		       tf_strerror(ret));
	} else {
		/* It fits under the limit: the session is still usable. */
		CHECKF(ret == 0,
		       "%s: attach of %d bytes under the limit: "
		       "%d (%s)",
		       name, SMALL, ret, tf_strerror(ret));
		CHECK_OK(tf_session_expose(s, b, 0, SMALL,
					   TF_ACCESS_REMOTE_READ, &x));
	}
	CHECK(tf_session_state(s) == TF_SESSION_OPEN);
	tf_session_close(s);
	tf_rcache_invalidate(tf_node_rcache(node), big, BIG);
	check_clean(ctx, node, vmlck0, name);
	tf_node_destroy(node);
	check_clean(ctx, NULL, vmlck0, name);
}

static void child(uint16_t port)
{
	struct rlimit rl = {LIMIT, LIMIT};
	tf_pool_params_t pp = {.field_mask = TF_POOL_PARAM_CHUNK_SIZE |
					     TF_POOL_PARAM_MAX_SIZE |
					     TF_POOL_PARAM_MIN_SIZE,
			       .chunk_size = 64 * 1024,
			       .min_size = 4096,
			       .max_size = 4096};
	tf_slice_t sl[256];
	tf_pool_stats_t ps;
	tf_context_t *ctx;
	tf_pool_t *pool;
	tf_pd_t *pd;
	uint8_t *big;
	long vmlck0;
	int ret, n;

	ret = tf_test_drop_ipc_lock();
	if (ret)
		tf_test_skip("cannot drop CAP_IPC_LOCK: %s", strerror(-ret));
	CHECK(!setrlimit(RLIMIT_MEMLOCK, &rl));
	big = mmap(NULL, BIG, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(big != MAP_FAILED);
	memset(big, 1, BIG);
	if (!mlock(big, BIG))
		tf_test_skip("mlock past RLIMIT_MEMLOCK succeeded: the limit "
			     "is not enforced here");
	vmlck0 = tf_test_vmlck();

	/* The context itself pins nothing the limit refuses. */
	ret = tf_context_open(NULL, &ctx);
	CHECKF(ret == 0, "context open under RLIMIT_MEMLOCK=%d: %d (%s)", LIMIT,
	       ret, tf_strerror(ret));
	CHECK_OK(tf_pd_create(ctx, &pd));
	check_clean(ctx, NULL, vmlck0, "context");

	/* A pool of 64 KiB chunks grows until the limit, then -ENOMEM;
	 * what it holds is within the limit. */
	CHECK_OK(tf_pool_create(pd, &pp, &pool));
	for (n = 0; n < 256; n++) {
		ret = TOLERATED(tf_pool_rent(pool, 4096, &sl[n]));
		if (ret)
			break;
	}
	CHECKF(ret == -ENOMEM, "pool rent at the limit: %d (%s)", ret,
	       tf_strerror(ret));
	CHECK_OK(tf_pool_query_stats(pool, &ps));
	tf_test_info("pool: %d slices in %llu chunks, then %s", n,
		     (unsigned long long)ps.chunks, tf_strerror(ret));
	CHECK(n > 0 && ps.chunk_bytes <= LIMIT && ps.enomem == 1);
	for (int i = 0; i < n; i++)
		CHECK_OK(tf_pool_return(pool, &sl[i]));
	tf_pool_destroy(pool);
	check_clean(ctx, NULL, vmlck0, "pool");

	session_mode(ctx, port, TF_REG_POOL, big, vmlck0);
	session_mode(ctx, port, TF_REG_CACHE, big, vmlck0);
	session_mode(ctx, port, TF_REG_DIRECT, big, vmlck0);

	CHECK_OK(tf_pd_destroy(pd));
	tf_context_close(ctx);
	CHECK(tf_test_vmlck() == vmlck0);
	munmap(big, BIG);
	exit(tf_test_end());
}

/* The unrestricted peer: serves sessions, exposing one 4 KiB slice. */
static int peer_main(char **argv)
{
	tf_context_t *ctx;
	tf_node_t *node;
	tf_listener_t *l;

	tf_test_begin("fault_memlock.peer");
	/* The peer only serves and is killed: its log is printed for the
	 * reader, never judged (it does not reach tf_test_end). */
	tf_test_tolerate_log(true);
	CHECK_OK(tf_context_open(NULL, &ctx));
	CHECK_OK(tf_node_create(ctx, NULL, &node));
	CHECK_OK(tf_listener_create(node, NULL, &l));
	ft_send(atoi(argv[5]), tf_listener_port(l));
	ft_serve_forever(l, 4096, TF_ACCESS_REMOTE_READ, 10000);
}

int main(int argc, char **argv)
{
	uint64_t port;
	int status, rfd;
	pid_t peer;

	if (argc == 6 && !strcmp(argv[1], "peer"))
		return peer_main(argv);
	tf_test_begin("fault_memlock");
	peer = ft_spawn("server", "0", "0", &rfd);
	CHECK(ft_recv(rfd, &port, 4 * tf_test_timeout_ms()));
	status = ft_fork_wait(child, (uint16_t)port);
	ft_reap(peer, SIGKILL);
	return status;
}
