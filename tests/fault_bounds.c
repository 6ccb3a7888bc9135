/* SPDX-License-Identifier: MIT */
/*
 * fault_bounds: the pool and the registration cache at their bounds, and
 * sessions in cache mode where userfaultfd is refused.
 *   - A pool rents until its max_bytes, then returns -ENOMEM (counted),
 *     and rents again once a slice came back; directly and through a
 *     session, which stays usable after the refusal.
 *   - A cache full of regions in use (TOLLFREE_RCACHE_MAX_REGIONS=2)
 *     still serves further attaches (uncached registrations, released
 *     with their last reference) or refuses them with a clear error, and
 *     holds no more than its bound once the session closed.
 *   - With userfaultfd refused by seccomp the cache falls back to explicit
 *     invalidation; a session attaching a buffer that was unmapped and
 *     mapped again at the same address (without tf_rcache_invalidate,
 *     which a session user has no reason to call) must still move the new
 *     data, not the old pages.
 *   - With getrandom refused (ENOSYS, as an old seccomp profile does),
 *     keys still come from the kernel's CSPRNG (/dev/urandom): they are
 *     distinct and never 0.
 * Everything runs in forked children (a seccomp filter cannot be
 * removed); the session peer is started before them (see fault_util.h).
 */
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "fault_util.h"

#define MIB    (1 << 20)
#define PLEN   65536 /* the peer's exposure */
#define NBUF   4
#define BUFLEN 16384

/* Make system call @nr fail with @err in this process (and no other). */
static int block_syscall(int nr, int err)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 1),
		BPF_STMT(BPF_RET | BPF_K,
			 SECCOMP_RET_ERRNO |
				 ((unsigned)err & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = 4, .filter = f};

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		return -errno;
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
		return -errno;
	return 0;
}

static void pool_bound(tf_pd_t *pd)
{
	tf_pool_params_t pp = {.field_mask = TF_POOL_PARAM_CHUNK_SIZE |
					     TF_POOL_PARAM_MAX_BYTES,
			       .chunk_size = 2 * MIB,
			       .max_bytes = 4 * MIB};
	tf_slice_t sl[5];
	tf_pool_stats_t ps;
	tf_pool_t *pool;

	CHECK_OK(tf_pool_create(pd, &pp, &pool));
	for (int i = 0; i < 4; i++)
		CHECK_OK(tf_pool_rent(pool, MIB, &sl[i]));
	CHECK_ERR(TOLERATED(tf_pool_rent(pool, MIB, &sl[4])), -ENOMEM);
	CHECK_OK(tf_pool_query_stats(pool, &ps));
	CHECKF(ps.enomem == 1 && ps.chunk_bytes == 4 * MIB,
	       "enomem %llu, chunk bytes %llu", (unsigned long long)ps.enomem,
	       (unsigned long long)ps.chunk_bytes);
	CHECK_OK(tf_pool_return(pool, &sl[2]));
	CHECK_OK(tf_pool_rent(pool, MIB, &sl[2]));
	for (int i = 0; i < 4; i++)
		CHECK_OK(tf_pool_return(pool, &sl[i]));
	CHECK_OK(tf_pool_query_stats(pool, &ps));
	CHECK(ps.rents == ps.returns);
	tf_pool_destroy(pool);
}

static tf_node_t *make_node(tf_context_t *ctx, int mode, size_t pool_max)
{
	tf_pool_params_t pp = {.field_mask = TF_POOL_PARAM_CHUNK_SIZE |
					     TF_POOL_PARAM_MAX_BYTES,
			       .chunk_size = 2 * MIB,
			       .max_bytes = pool_max};
	tf_node_params_t np = {
		.field_mask = TF_NODE_PARAM_REG_MODE | TF_NODE_PARAM_POOL |
			      TF_NODE_PARAM_CROSSOVER | TF_NODE_PARAM_QP_CACHE,
		.reg_mode = mode,
		.pool = &pp,
		.crossover = 4096,
		.qp_cache = 0,
	};
	tf_node_t *node;

	CHECK_OK(tf_node_create(ctx, &np, &node));
	return node;
}

static tf_session_t *connect_peer(tf_node_t *node, uint16_t port)
{
	tf_session_t *s;

	CHECK_OK(tf_session_connect(node, "127.0.0.1", port, NULL, &s));
	CHECK_OK(tf_session_wait_peer(s, 1, 4 * tf_test_timeout_ms()));
	return s;
}

static void wait_ok(tf_session_t *s, uint64_t id)
{
	struct tf_wc wc;
	int n = tf_session_wait(s, 1, &wc, 4 * tf_test_timeout_ms());

	CHECKF(n == 1 && wc.wr_id == id && wc.status == TF_WC_SUCCESS,
	       "wr %llu: %d completions, %s", (unsigned long long)id, n,
	       n == 1 ? tf_test_wc_str(&wc) : "-");
}

static void check_node_clean(tf_node_t *node, const char *what)
{
	tf_node_stats_t st;

	CHECK_OK(tf_node_query_stats(node, &st));
	CHECKF(st.windows_live == 0 && st.slices_rented == 0 &&
		       st.sessions_live == 0,
	       "%s: %llu windows, %llu slices, %llu sessions left", what,
	       (unsigned long long)st.windows_live,
	       (unsigned long long)st.slices_rented,
	       (unsigned long long)st.sessions_live);
}

/* A session renting past its node's pool bound. */
static void session_pool_bound(tf_context_t *ctx, uint16_t port)
{
	tf_node_t *node = make_node(ctx, TF_REG_POOL, 2 * MIB);
	tf_session_t *s = connect_peer(node, port);
	int b[3], x;

	CHECK_OK(tf_session_rent(s, MIB, &b[0], NULL));
	CHECK_OK(tf_session_rent(s, MIB, &b[1], NULL));
	CHECK_ERR(TOLERATED(tf_session_rent(s, MIB, &b[2], NULL)), -ENOMEM);
	/* Refused, not broken: the session goes on. */
	CHECK(tf_session_state(s) == TF_SESSION_OPEN);
	CHECK_OK(tf_session_expose(s, b[0], 0, MIB, TF_ACCESS_REMOTE_READ, &x));
	CHECK_OK(tf_session_read(s, b[1], 0, 0, 0, PLEN, 1));
	wait_ok(s, 1);
	tf_session_close(s);
	check_node_clean(node, "pool bound");
	/* The bound is free again. */
	s = connect_peer(node, port);
	CHECK_OK(tf_session_rent(s, MIB, &b[0], NULL));
	CHECK_OK(tf_session_rent(s, MIB, &b[1], NULL));
	tf_session_close(s);
	check_node_clean(node, "pool bound, again");
	tf_node_destroy(node);
}

/* Cache mode, no monitor, a cache bounded to two regions. */
static void session_cache(tf_context_t *ctx, uint16_t port)
{
	tf_node_t *node = make_node(ctx, TF_REG_CACHE, 64 * MIB);
	tf_rcache_t *rc = tf_node_rcache(node);
	size_t blen = NBUF * BUFLEN;
	tf_rcache_stats_t rs;
	tf_context_stats_t cs;
	tf_session_t *s;
	uint8_t *buf, *back;
	int b[NBUF], bb, ok = 0;

	CHECK_OK(tf_rcache_query_stats(rc, &rs));
	CHECKF(rs.monitor == TF_RCACHE_MONITOR_NONE,
	       "monitor %d with userfaultfd refused", rs.monitor);
	CHECK(rs.max_regions == 2);
	buf = mmap(NULL, blen, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(buf != MAP_FAILED);

	/* Four buffers in use at once, twice the cache's bound. */
	s = connect_peer(node, port);
	for (int i = 0; i < NBUF; i++) {
		int ret;

		tf_test_fill(buf + i * BUFLEN, BUFLEN, 10 + (uint32_t)i);
		/* Past the cache's bound: may be refused, and logged. */
		ret = TOLERATED(tf_session_attach(s, buf + i * BUFLEN, BUFLEN,
						  TF_ATTACH_IN, &b[i]));
		if (ret) {
			CHECKF(ret == -ENOMEM || ret == -ENOSPC,
			       "attach %d with the cache full: %d (%s)", i, ret,
			       tf_strerror(ret));
			tf_test_info("attach %d, cache full: %s", i,
				     tf_strerror(ret));
			b[i] = -1;
			continue;
		}
		CHECK(tf_session_buf_mode(s, b[i]) == TF_REG_CACHE);
		ok++;
	}
	CHECK(ok >= 2);
	CHECK_OK(tf_rcache_query_stats(rc, &rs));
	tf_test_info("%d attaches with a cache of 2: %llu cached, %llu "
		     "pinned, %llu uncached",
		     ok, (unsigned long long)rs.regions,
		     (unsigned long long)rs.pinned_regions,
		     (unsigned long long)rs.uncached);
	CHECK(rs.regions <= 2 && rs.pinned_regions == (uint64_t)ok);
	/* Each works: WRITE it to the peer, READ it back. */
	CHECK_OK(tf_session_rent(s, BUFLEN, &bb, (void **)&back));
	for (int i = 0; i < NBUF; i++) {
		if (b[i] < 0)
			continue;
		CHECK_OK(tf_session_write(s, b[i], 0, 0, 0, BUFLEN, 1));
		wait_ok(s, 1);
		CHECK_OK(tf_session_read(s, bb, 0, 0, 0, BUFLEN, 2));
		wait_ok(s, 2);
		CHECK_FILL(back, BUFLEN, 10 + (uint32_t)i);
	}
	tf_session_close(s);
	check_node_clean(node, "cache full");
	CHECK_OK(tf_rcache_query_stats(rc, &rs));
	CHECKF(rs.regions <= 2 && rs.pinned_regions == rs.regions,
	       "after close: %llu cached, %llu pinned",
	       (unsigned long long)rs.regions,
	       (unsigned long long)rs.pinned_regions);

	/* Unmap and map again at the same address with new data, without
	 * telling the cache (there is no monitor). */
	CHECK(!munmap(buf, blen));
	CHECK(mmap(buf, blen, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == buf);
	tf_test_fill(buf, BUFLEN, 99);
	s = connect_peer(node, port);
	CHECK_OK(tf_session_attach(s, buf, BUFLEN, TF_ATTACH_IN, &b[0]));
	CHECK_OK(tf_session_rent(s, BUFLEN, &bb, (void **)&back));
	CHECK_OK(tf_session_write(s, b[0], 0, 0, 0, BUFLEN, 1));
	wait_ok(s, 1);
	CHECK_OK(tf_session_read(s, bb, 0, 0, 0, BUFLEN, 2));
	wait_ok(s, 2);
	if (tf_test_check_fill(back, BUFLEN, 99) != (size_t)-1)
		tf_test_fail(__FILE__, __LINE__,
			     "cache mode without a monitor: the session moved "
			     "the old pages of a buffer that was unmapped and "
			     "mapped again (stale registration)");
	tf_session_close(s);
	check_node_clean(node, "remapped");
	tf_rcache_invalidate(rc, buf, blen);
	tf_node_destroy(node);
	CHECK_OK(tf_context_query_stats(ctx, &cs));
	CHECKF(cs.pinned_bytes == 0, "%llu bytes pinned after node destroy",
	       (unsigned long long)cs.pinned_bytes);
	munmap(buf, blen);
}

static void child(uint16_t port)
{
	tf_context_t *ctx;
	tf_pd_t *pd;
	int ret;

	ret = block_syscall(__NR_userfaultfd, EPERM);
	if (ret)
		tf_test_skip("cannot install a seccomp filter: %s",
			     strerror(-ret));
	CHECK(syscall(SYS_userfaultfd, 0) < 0 && errno == EPERM);
	/* Read when the first context opens. */
	setenv("TOLLFREE_RCACHE_MAX_REGIONS", "2", 1);
	setenv("TOLLFREE_RCACHE_MONITOR", "auto", 1);
	CHECK_OK(tf_context_open(NULL, &ctx));
	CHECK_OK(tf_pd_create(ctx, &pd));
	pool_bound(pd);
	session_pool_bound(ctx, port);
	session_cache(ctx, port);
	CHECK_OK(tf_pd_destroy(pd));
	tf_context_close(ctx);
	exit(tf_test_end());
}

/* The peer: serves sessions, exposing a PLEN slice for READ and WRITE. */
static int peer_main(char **argv)
{
	tf_context_t *ctx;
	tf_node_t *node;
	tf_listener_t *l;

	tf_test_begin("fault_bounds.peer");
	/* The peer only serves and is killed: its log is printed for the
	 * reader, never judged (it does not reach tf_test_end). */
	tf_test_tolerate_log(true);
	CHECK_OK(tf_context_open(NULL, &ctx));
	CHECK_OK(tf_node_create(ctx, NULL, &node));
	CHECK_OK(tf_listener_create(node, NULL, &l));
	ft_send(atoi(argv[5]), tf_listener_port(l));
	ft_serve_forever(l, PLEN,
			 TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_WRITE, 10000);
}

/* getrandom refused: registrations still get keys, from /dev/urandom. */
static void child_norandom(uint16_t unused)
{
	static uint8_t buf[64 * 4096];
	uint32_t keys[64];
	tf_context_t *ctx;
	tf_mr_t *mr[64];
	tf_pd_t *pd;
	int ret;

	(void)unused;
	ret = block_syscall(__NR_getrandom, ENOSYS);
	if (ret)
		tf_test_skip("cannot install a seccomp filter: %s",
			     strerror(-ret));
	CHECK(syscall(SYS_getrandom, keys, 4, 0) < 0 && errno == ENOSYS);
	CHECK_OK(tf_context_open(NULL, &ctx));
	CHECK_OK(tf_pd_create(ctx, &pd));
	for (int i = 0; i < 64; i++) {
		CHECK_OK(tf_mr_reg(pd, buf + i * 4096, 4096,
				   TF_ACCESS_LOCAL_WRITE |
					   TF_ACCESS_REMOTE_WRITE,
				   &mr[i]));
		keys[i] = tf_mr_rkey(mr[i]);
		CHECK(keys[i] != 0);
		for (int j = 0; j < i; j++)
			CHECKF(keys[i] != keys[j], "key 0x%x twice", keys[i]);
	}
	for (int i = 0; i < 64; i++)
		CHECK_OK(tf_mr_dereg(mr[i]));
	CHECK_OK(tf_pd_destroy(pd));
	tf_context_close(ctx);
	exit(tf_test_end());
}

int main(int argc, char **argv)
{
	uint64_t port;
	int status, rfd;
	pid_t peer;

	if (argc == 6 && !strcmp(argv[1], "peer"))
		return peer_main(argv);
	tf_test_begin("fault_bounds");
	peer = ft_spawn("server", "0", "0", &rfd);
	CHECK(ft_recv(rfd, &port, 4 * tf_test_timeout_ms()));
	status = ft_fork_wait(child, (uint16_t)port);
	ft_reap(peer, SIGKILL);
	if (status)
		return status;
	return ft_fork_wait(child_norandom, 0);
}
