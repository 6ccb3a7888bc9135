/* SPDX-License-Identifier: MIT */
/*
 * session_bounds: a server bounds what each client address holds on it
 * (sessions, exposed bytes, kept connections) and what all of them hold
 * together, refuses past a bound with a reason the client can tell
 * apart, and keeps serving the others.
 *
 * Side B serves with TOLLFREE_SESSION_MAX_SESSIONS_PEER 3,
 * _MAX_SESSIONS 5, _MAX_EXPOSED_PEER 64K and _MAX_KEPT_PEER 1.  Each
 * session it accepts exposes as many bytes as the client's private data
 * asks for, before its ACCEPT, so the client sees whether the expose
 * passed (one exposure or none).  Side A has client A (127.0.0.1) and
 * client B (a second context whose connections come from 127.0.0.2,
 * TOLLFREE_SESSION_SOURCE_ADDR):
 *   1. A opens 3 sessions (16K, 16K, 40K asked): the third expose fails
 *      (-ENOBUFS on the server: 72K > 64K), the sessions open;
 *   2. A's 4th session is refused: -EUSERS;
 *   3. B opens 2 sessions while A is refused: both served (5 in all);
 *      the server revokes the second one's exposure at once, and its
 *      bytes come back; B's 3rd is refused: -EBUSY (the node's bound);
 *   4. A closes its first session: the server gives its session and its
 *      16K back; A's next session (40K) opens and its expose passes;
 *   5. everyone closes: per address one connection is kept, the others
 *      close (3 not kept).
 * The server's counters show each refusal once, and its exposed bytes
 * and sessions come back to 0.  Also: bad settings of the bounds and of
 * the source address make tf_node_create fail.  All of it once without a key and once
 * with one (the refusal is sealed there).
 */
#include <poll.h>

#include "config_int.h"
#include "provider.h"
#include "session_util.h"

static const char key[] = "bounds test key";

enum { CMD_STOP = 1, CMD_QUERY = 2 };
/* In the bytes a client asks for: the server revokes right after the
 * ACCEPT. */
#define REVOKE (1u << 31)

static tf_node_t *make_node(tf_context_t *ctx, bool auth)
{
	tf_node_params_t np = {0};
	tf_node_t *node;

	if (auth) {
		np.field_mask = TF_NODE_PARAM_PSK;
		np.psk = key;
		np.psk_len = sizeof(key) - 1;
	}
	CHECK_OK(tf_node_create(ctx, &np, &node));
	st_stock_settle(node);
	return node;
}

/* ------------------------------------------------------------- server */

#define MAX_LIVE 16

static void serve_one(tf_session_t *s)
{
	const uint32_t *priv;
	uint32_t want;
	size_t len;
	int b, x, ret;

	priv = tf_session_peer_priv(s, &len);
	CHECK(priv && len == sizeof(*priv));
	want = *priv & ~REVOKE;
	CHECK_OK(tf_session_rent(s, want, &b, NULL));
	ret = tf_session_expose(s, b, 0, want, TF_ACCESS_REMOTE_WRITE, &x);
	CHECKF(ret == 0 || ret == -ENOBUFS, "expose: %s", tf_strerror(ret));
	CHECK_OK(tf_session_establish(s));
	if (*priv & REVOKE)
		CHECK_OK(tf_session_revoke(s));
}

static void server_run(struct tf_pair *p, bool auth)
{
	tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_FLAGS,
				  .flags = TF_SESSION_DEFER_ESTABLISH};
	tf_node_t *node = make_node(p->ctx, auth);
	tf_session_t *live[MAX_LIVE];
	int n = 0;
	tf_node_stats_t st;
	tf_listener_t *l;

	CHECK_OK(tf_listener_create(node, NULL, &l));
	tf_test_send_u64(p, tf_listener_port(l));
	for (;;) {
		struct pollfd pfd = {.fd = p->sock, .events = POLLIN};
		tf_session_t *s;
		int ret = tf_listener_accept(l, &sp, 5, &s);

		if (!ret) {
			CHECK(n < MAX_LIVE);
			serve_one(s);
			live[n++] = s;
		} else {
			CHECKF(ret == -EAGAIN, "accept: %s", tf_strerror(ret));
		}
		for (int i = 0; i < n; i++) {
			int state = tf_session_state(live[i]);

			if (state != TF_SESSION_PEER_CLOSED &&
			    state != TF_SESSION_BROKEN)
				continue;
			CHECK(state == TF_SESSION_PEER_CLOSED);
			tf_session_close(live[i]);
			live[i--] = live[--n];
		}
		if (poll(&pfd, 1, 0) != 1)
			continue;
		if (tf_test_recv_u64(p) == CMD_STOP)
			break;
		CHECK_OK(tf_node_query_stats(node, &st));
		tf_test_send_u64(p, st.sessions_served);
		tf_test_send_u64(p, st.exposed_bytes);
	}
	CHECK(n == 0);
	CHECK_OK(tf_node_query_stats(node, &st));
	tf_test_info("server (%s): %llu sessions refused by the node's "
		     "bound, %llu by the address's, %llu exposes refused, "
		     "%llu connections not kept",
		     auth ? "key" : "no key",
		     (unsigned long long)st.sessions_refused,
		     (unsigned long long)st.sessions_refused_peer,
		     (unsigned long long)st.expose_refused,
		     (unsigned long long)st.kept_refused);
	CHECK(st.sessions_refused == 1);
	CHECK(st.sessions_refused_peer == 1);
	CHECK(st.expose_refused == 1);
	CHECK(st.kept_refused == 3);
	CHECK(st.sessions_served == 0);
	CHECK(st.exposed_bytes == 0);
	/* Refusals are not malformed handshakes. */
	CHECK(st.handshake_rejects == 0);
	tf_listener_destroy(l);
	tf_node_destroy(node);
}

/* ------------------------------------------------------------- client */

static uint16_t port;

/* Open a session asking the server to expose @want bytes: 0 with *@s_p,
 * or the error of tf_session_connect. */
static int open_one(tf_node_t *node, uint32_t want, tf_session_t **s_p)
{
	tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_PRIV,
				  .priv = &want,
				  .priv_len = sizeof(want)};

	return tf_session_connect(node, "127.0.0.1", port, &sp, s_p);
}

static tf_session_t *open_ok(tf_node_t *node, uint32_t want, int exps,
			     const char *what)
{
	tf_session_t *s;
	int ret = open_one(node, want, &s);

	CHECKF(ret == 0, "%s: %s", what, tf_strerror(ret));
	CHECKF(tf_session_peer_count(s) == exps, "%s: %d exposures", what,
	       tf_session_peer_count(s));
	return s;
}

/* Wait until the server counts @sessions sessions and @bytes exposed. */
static void server_settles(struct tf_pair *p, uint64_t sessions, uint64_t bytes)
{
	uint64_t n = 0, x = 0;

	for (int t = 0; t < 4 * tf_test_timeout_ms(); t++) {
		tf_test_send_u64(p, CMD_QUERY);
		n = tf_test_recv_u64(p);
		x = tf_test_recv_u64(p);
		if (n == sessions && x == bytes)
			return;
		usleep(1000);
	}
	tf_test_fail(__FILE__, __LINE__,
		     "server has %llu sessions and %llu bytes exposed, "
		     "expected %llu and %llu",
		     (unsigned long long)n, (unsigned long long)x,
		     (unsigned long long)sessions, (unsigned long long)bytes);
}

static void client_run(struct tf_pair *p, tf_context_t *ctx_b, bool auth)
{
	tf_node_t *a = make_node(p->ctx, auth), *b = make_node(ctx_b, auth);
	tf_session_t *sa[4], *sb[2], *s;
	int ret;

	port = (uint16_t)tf_test_recv_u64(p);
	/* 1. Three sessions; the third one's expose passes the bound. */
	sa[0] = open_ok(a, 16 << 10, 1, "A 1");
	sa[1] = open_ok(a, 16 << 10, 1, "A 2");
	sa[2] = open_ok(a, 40 << 10, 0, "A 3 (expose past the bound)");
	server_settles(p, 3, 32 << 10);
	/* 2. A fourth one from the same address is refused. */
	ret = open_one(a, 64, &s);
	CHECKF(ret == -EUSERS, "A 4: %s", tf_strerror(ret));
	/* 3. Another address is served, up to the node's bound. */
	sb[0] = open_ok(b, 64, 1, "B 1");
	sb[1] = open_ok(b, 64 | REVOKE, 1, "B 2 (revoked by the server)");
	ret = open_one(b, 64, &s);
	CHECKF(ret == -EBUSY, "B 3: %s", tf_strerror(ret));
	/* B 2's bytes came back at its revoke. */
	server_settles(p, 5, (32 << 10) + 64);
	/* 4. The first session ends: its session and bytes come back. */
	tf_session_close(sa[0]);
	server_settles(p, 4, (16 << 10) + 64);
	sa[3] = open_ok(a, 40 << 10, 1, "A 5 (after a close)");
	server_settles(p, 5, (56 << 10) + 64);
	/* 5. All close. */
	for (int i = 1; i < 4; i++)
		tf_session_close(sa[i]);
	for (int i = 0; i < 2; i++)
		tf_session_close(sb[i]);
	server_settles(p, 0, 0);
	tf_test_send_u64(p, CMD_STOP);
	tf_node_destroy(a);
	tf_node_destroy(b);
}

/* Bad settings make node creation fail (the context's copy of the
 * configuration, changed and put back). */
static void bad_settings(tf_context_t *ctx)
{
	static const char *const bad[][2] = {
		{"SESSION_MAX_SESSIONS", "0"},
		{"SESSION_MAX_SESSIONS_PEER", "0"},
		{"SESSION_SOURCE_ADDR", "localhost"},
		{"SESSION_SOURCE_ADDR", "127.0.0.300"},
	};
	struct tf_config saved = ctx->cfg;
	tf_node_t *node;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK_OK(tf__config_set(&ctx->cfg, bad[i][0], bad[i][1]));
		CHECKF(tf_node_create(ctx, NULL, &node) == -EINVAL, "%s=%s",
		       bad[i][0], bad[i][1]);
		ctx->cfg = saved;
	}
}

int main(void)
{
	struct tf_pair p;
	tf_context_t *ctx_b = NULL;

	/* Before the first library call: the configuration is read once. */
	setenv("TOLLFREE_SESSION_MAX_SESSIONS_PEER", "3", 1);
	setenv("TOLLFREE_SESSION_MAX_SESSIONS", "5", 1);
	setenv("TOLLFREE_SESSION_MAX_EXPOSED_PEER", "64K", 1);
	setenv("TOLLFREE_SESSION_MAX_KEPT_PEER", "1", 1);
	tf_test_begin("session_bounds");
	tf_test_pair_open(&p);
	/* Refusals are logged (warnings), as the test provokes them. */
	tf_test_tolerate_log(true);
	if (p.side == TF_SIDE_A) {
		/* Client B: the same provider, its connections from another
		 * loopback address. */
		CHECK_OK(tf_context_open(NULL, &ctx_b));
		bad_settings(ctx_b);
		CHECK_OK(tf__config_set(&ctx_b->cfg, "SESSION_SOURCE_ADDR",
					"127.0.0.2"));
	}
	for (int auth = 0; auth < 2; auth++) {
		if (p.side == TF_SIDE_B)
			server_run(&p, auth);
		else
			client_run(&p, ctx_b, auth);
	}
	tf_context_close(ctx_b);
	tf_test_tolerate_log(false);
	return tf_test_pair_end(&p);
}
