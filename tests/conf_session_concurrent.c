/* SPDX-License-Identifier: MIT */
/*
 * conf_session_concurrent: a server holds 1,000 sessions from one peer
 * open at the same time, and each of them works (issue 14, item 5).
 *
 * Each session has its own connection (a data QP and a control QP with
 * their CQs), so the soft provider's old CQ fds, which nested the
 * context's epoll set, made tf_cq_create fail with EINVAL after about 250
 * sessions over shm and 50 over tcp: every later session was refused, and
 * one peer holding that many shut out all others.  Here side B listens;
 * side A opens TF_TEST_CONCURRENT (default 1,000) sessions one after the
 * other and keeps them all; B accepts each, rents a slice and exposes it.
 * With all of them open, A WRITEs a pattern through every session and
 * READs it back, and B finds each pattern in the slice of its session.
 * Then both close everything.  TOLLFREE_SESSION_MAX_SESSIONS_PEER is
 * raised to let one address hold them.  RLIMIT_NOFILE is raised to its hard limit
 * (a session holds several descriptors on each side); the test skips if
 * that, or RLIMIT_MEMLOCK (control buffers are pinned), cannot hold them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "session_util.h"

#define LEN 256

static bool raise_limit(int res, rlim_t need)
{
	struct rlimit rl;

	if (getrlimit(res, &rl))
		return true;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need &&
	    rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(res, &rl);
		(void)getrlimit(res, &rl);
	}
	return rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need;
}

/* CAP_IPC_LOCK: mlock ignores RLIMIT_MEMLOCK. */
static bool can_lock_any(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	unsigned long long cap = 0;
	char line[256];

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "CapEff:", 7)) {
			cap = strtoull(line + 7, NULL, 16);
			break;
		}
	fclose(f);
	return cap & (1ull << 14);
}

int main(void)
{
	/* Not TF_TEST_SESSIONS: that sizes the session loops of other tests
	 * (3,000 in sanitizer runs); this one holds sessions open at once. */
	const char *env = getenv("TF_TEST_CONCURRENT");
	unsigned n = env ? (unsigned)atoi(env) : 1000;
	bool fds_ok, lock_ok;
	tf_session_t **s;
	tf_listener_t *l = NULL;
	struct tf_pair p;
	tf_node_t *node;
	uint16_t port = 0;
	uint8_t **slice;
	int *buf;

	char bound[16];

	/* One peer holding this many sessions is what the test is about:
	 * the server's bounds (256 per address by default) make room for
	 * them, before the first library call reads the configuration. */
	snprintf(bound, sizeof(bound), "%u", n + 1);
	setenv("TOLLFREE_SESSION_MAX_SESSIONS_PEER", bound, 1);
	if (n + 1 > 4096)
		setenv("TOLLFREE_SESSION_MAX_SESSIONS", bound, 1);
	tf_test_begin("conf_session_concurrent");
	/* Before the fork: both sides inherit them. */
	fds_ok = raise_limit(RLIMIT_NOFILE, 8 * (rlim_t)n + 256);
	lock_ok = raise_limit(RLIMIT_MEMLOCK, 256 * 1024 * (rlim_t)n) ||
		  can_lock_any();
	tf_test_pair_open(&p);
	if (!fds_ok)
		tf_test_skip("RLIMIT_NOFILE cannot hold %u sessions", n);
	if (!lock_ok)
		tf_test_skip("RLIMIT_MEMLOCK cannot hold %u sessions", n);
	if (n + 8 > p.caps.max_qp / 2) {
		n = p.caps.max_qp / 2 - 8;
		tf_test_info("max_qp is %u: %u sessions", p.caps.max_qp, n);
	}
	s = calloc(n, sizeof(*s));
	slice = calloc(n, sizeof(*slice));
	buf = calloc(n, sizeof(*buf));
	CHECK(s && slice && buf);
	node = st_node(&p, -1, NULL, 0);
	if (p.side == TF_SIDE_B) {
		CHECK_OK(st_listen(node, &l));
		tf_test_send_u64(&p, tf_listener_port(l));
	} else {
		port = (uint16_t)tf_test_recv_u64(&p);
	}

	/* Open them all; none is closed before the last one is open. */
	for (unsigned i = 0; i < n; i++) {
		int x;

		if (p.side == TF_SIDE_B) {
			s[i] = st_accept(l, 0);
			CHECK_OK(tf_session_rent(s[i], LEN, &buf[i],
						 (void **)&slice[i]));
			CHECK_OK(tf_session_expose(
				s[i], buf[i], 0, LEN,
				TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_WRITE,
				&x));
			continue;
		}
		tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_FLAGS,
					  .flags = TF_SESSION_NO_REUSE};
		int ret = tf_session_connect(node, st_host(), port, &sp, &s[i]);

		CHECKF(ret == 0, "session %u of %u: tf_session_connect: %s",
		       i + 1, n, tf_strerror(ret));
		CHECK_OK(tf_session_wait_peer(s[i], 1,
					      4 * tf_test_timeout_ms()));
		CHECK_OK(tf_session_rent(s[i], 2 * 64, &buf[i],
					 (void **)&slice[i]));
	}
	if (p.side == TF_SIDE_A) {
		tf_node_stats_t st;

		CHECK_OK(tf_node_query_stats(node, &st));
		tf_test_info("%u sessions open at once (%llu connections)", n,
			     (unsigned long long)st.qp_new);
	}

	/* Every session moves data while all are open. */
	if (p.side == TF_SIDE_A) {
		for (unsigned i = 0; i < n; i++) {
			tf_test_fill(slice[i], 64, 0x5000 + i);
			CHECK_OK(
				tf_session_write(s[i], buf[i], 0, 0, 0, 64, 1));
			st_expect(s[i], 1, TF_WC_SUCCESS, NULL);
			CHECK_OK(
				tf_session_read(s[i], buf[i], 64, 0, 0, 64, 2));
			st_expect(s[i], 2, TF_WC_SUCCESS, NULL);
			CHECK_FILL(slice[i] + 64, 64, 0x5000 + i);
		}
	}
	/* B makes progress while it waits here (tcp serves the READs). */
	tf_test_sync(&p);
	if (p.side == TF_SIDE_B)
		for (unsigned i = 0; i < n; i++)
			CHECK_FILL(slice[i], 64, 0x5000 + i);

	if (p.side == TF_SIDE_A) {
		for (unsigned i = 0; i < n; i++)
			tf_session_close(s[i]);
	} else {
		for (unsigned i = 0; i < n; i++) {
			CHECK(st_serve(s[i]) == TF_SESSION_PEER_CLOSED);
			tf_session_close(s[i]);
		}
		tf_listener_destroy(l);
	}
	tf_test_sync(&p);
	tf_node_destroy(node);
	free(buf);
	free(slice);
	free(s);
	return tf_test_pair_end(&p);
}
