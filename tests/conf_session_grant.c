/* SPDX-License-Identifier: MIT */
/*
 * conf_session_grant: a listener that grants windows ahead
 * (tf_listener_params_t.grant_len), through the public API, without and
 * then with a pre-shared key (the GRANTs then travel sealed).
 *
 * Round 0 makes the connection; no grant exists yet, and the session
 * goes as usual (OPEN, ACCEPT).  Its close on the server keeps the
 * connection and sends GRANT_DEPTH grants.  Rounds 1..N then open on a
 * grant, without a round trip, if it has arrived; a round may find it
 * still in flight and go as round 0 did (also on soft shm, where a SEND
 * is in the peer's queue when its post returns: the client's one look
 * has been seen to miss it, probably while another thread of its
 * provider, the waker, held the progress that moves it to the queue).
 * A granted round:
 * - both sides say so (tf_session_granted), the client knows the peer's
 *   exposure 0 as soon as its connect returns, with the grant's length
 *   and rights, and every round's key differs;
 * - the window is fresh: the client READs it whole and finds zeros, though
 *   the pool slice beneath served the round before (its pattern was
 *   written there);
 * - what the client WRITEs is in the server's buffer 0 at its close.
 * At least one round must be granted.  Round N + 1 WRITEs with the key
 * of the last granted round, which the server revoked at its close: the
 * access fails with a remote access error and the session breaks, on both
 * sides.  The connection then ends; the grants it still held are revoked
 * with it: on the server no window, no slice and no exposed byte is left,
 * and the counters add up (every grant made was taken or dropped; both
 * sides count the granted rounds).
 *
 * A third pass holds the server to TOLLFREE_SESSION_MAX_EXPOSED_PEER
 * (LEN bytes, for every pass) with grants of 2 * LEN: round 0 exposes
 * LEN and is served; the session that takes the grant is refused (its
 * bytes would pass the bound).  The client's session breaks on the
 * REJECT; the server opens no session, counts the refusal, and ends the
 * connection, revoking the grant.  A round that finds the grant still in
 * flight is served as round 0 was, and the next round tries again, up to
 * BOUND_ROUNDS; on soft shm the grant must have been taken by then.
 *
 * Pass 3 (with the key) opens with TF_SESSION_DEFER_OPEN.  The server's
 * application cannot have a granted session before the client sends its
 * OPEN, so each round says over the test channel only after the server
 * accepted.  Rounds 1 and 4..6 write the grant and close: the server's
 * accept returns a session already closed by its peer (one message for
 * the session), with the data in place; on soft shm at least one of them
 * must have found its grant.  Round 2 waits for a second
 * exposure, round 3 asks its state (both send the OPEN at once): the
 * server accepts a session still open, exposes or answers, and the
 * client's writes and close follow as usual.  Both sides count the
 * deferred OPENs (tf_node_stats_t.opens_deferred): the client every
 * granted round, the server those of rounds 1 and 4..6.  Without memory
 * windows (siw) a listener makes no grant, and the test says so and
 * skips.
 */
#include <stdlib.h>
#include <string.h>

#include "session_util.h"

#define LEN	     4096
#define BOUND_ROUNDS 6
#define N	     4
#define GRANT_DEPTH  2
#define RIGHTS	     (TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_WRITE)
#define PSK	     "conf_session_grant key"

static tf_node_stats_t stats(tf_node_t *node)
{
	tf_node_stats_t st;

	CHECK_OK(tf_node_query_stats(node, &st));
	return st;
}

static tf_node_t *make_node(struct tf_pair *p, bool psk)
{
	tf_node_params_t np = {.field_mask = TF_NODE_PARAM_USE_MW, .use_mw = 1};
	tf_node_t *node;

	if (psk) {
		np.field_mask |= TF_NODE_PARAM_PSK;
		np.psk = PSK;
		np.psk_len = sizeof(PSK) - 1;
	}
	CHECK_OK(tf_node_create(p->ctx, &np, &node));
	st_stock_settle(node);
	return node;
}

/* A listener of @node with @lp's grants that side A can reach (as
 * st_listen); its port goes to side A. */
static tf_listener_t *grant_listener(struct tf_pair *p, tf_node_t *node,
				     tf_listener_params_t *lp)
{
	tf_listener_t *l;

	if (tf_test_peer_mode()) {
		lp->field_mask |= TF_LISTENER_PARAM_ADDR;
		lp->addr = "0.0.0.0";
	}
	CHECK_OK(tf_listener_create(node, lp, &l));
	tf_test_send_u64(p, tf_listener_port(l));
	return l;
}

static void server(struct tf_pair *p, tf_node_t *node)
{
	tf_listener_params_t lp = {.field_mask = TF_LISTENER_PARAM_GRANT,
				   .grant_len = LEN,
				   .grant_rights = RIGHTS,
				   .grant_depth = GRANT_DEPTH};
	tf_listener_t *l;
	tf_session_t *s;
	tf_node_stats_t st;
	unsigned granted = 0;
	uint8_t *m;
	int b, x;

	l = grant_listener(p, node, &lp);
	for (int r = 0; r <= N; r++) {
		s = st_accept(l, TF_SESSION_DEFER_ESTABLISH);
		tf_test_send_u64(p, (uint64_t)tf_session_granted(s));
		if (tf_session_granted(s)) {
			CHECKF(r > 0, "round 0 granted");
			granted++;
			m = tf_session_buf_addr(s, 0);
			CHECK(m != NULL);
		} else {
			CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&m));
			memset(m, 0, LEN);
			CHECK_OK(tf_session_expose(s, b, 0, LEN, RIGHTS, &x));
		}
		/* A server written for deferral works either way. */
		CHECK_OK(tf_session_establish(s));
		CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
		CHECK_FILL(m, LEN, (uint32_t)r);
		tf_session_close(s);
		if (r == 0) {
			st = stats(node);
			CHECKF(st.grants_made == GRANT_DEPTH,
			       "%llu grants made after round 0",
			       (unsigned long long)st.grants_made);
		}
		tf_test_sync(p);
	}
	/* Round N + 1: the client's access with an old key breaks it. */
	s = st_accept(l, 0);
	granted += tf_session_granted(s);
	/* Accepted: a QP broken before that ends the connection, not the
	 * session (the OPEN is not served). */
	tf_test_send_u64(p, 1);
	CHECK(st_serve(s) == TF_SESSION_BROKEN);
	tf_session_close(s);
	st = st_wait_conns_ended(l, node);
	CHECKF(st.windows_live == 0 && st.slices_rented == 0 &&
		       st.exposed_bytes == 0,
	       "after the connection: %llu windows, %llu slices, %llu bytes "
	       "exposed",
	       (unsigned long long)st.windows_live,
	       (unsigned long long)st.slices_rented,
	       (unsigned long long)st.exposed_bytes);
	/* Each grant made was taken by a round or dropped with the
	 * connection; the client counted the same rounds. */
	CHECKF(st.grants_taken == granted &&
		       st.grants_made == st.grants_taken + st.grants_dropped &&
		       st.grants_dropped >= 1,
	       "grants: %llu made, %llu taken (%u rounds), %llu dropped",
	       (unsigned long long)st.grants_made,
	       (unsigned long long)st.grants_taken, granted,
	       (unsigned long long)st.grants_dropped);
	CHECK(tf_test_recv_u64(p) == granted);
	tf_listener_destroy(l);
}

static void client(struct tf_pair *p, tf_node_t *node, uint16_t port)
{
	tf_exposure_info_t info, prev = {0};
	struct tf_sge sge;
	struct tf_send_wr wr = {.wr_id = 7,
				.opcode = TF_WR_RDMA_WRITE,
				.send_flags = TF_SEND_SIGNALED,
				.sg_list = &sge,
				.num_sge = 1};
	uint32_t keys[N + 1];
	unsigned granted = 0;
	tf_session_t *s;
	tf_node_stats_t st;
	tf_caps_t caps;
	uint8_t *m;
	tf_mr_t *lmr;
	int b;

	CHECK_OK(tf_context_query_caps(p->ctx, &caps));
	for (int r = 0; r <= N; r++) {
		int g;

		CHECK_OK(tf_session_connect(node, st_host(), port, NULL, &s));
		g = tf_session_granted(s);
		CHECK(tf_test_recv_u64(p) == (uint64_t)g);
		if (!r && g)
			st_print_conn_stats(node);
		CHECKF(r || !g, "round 0: granted (transport %s)",
		       caps.transport);
		CHECK(tf_session_reused(s) == (r > 0));
		/* Granted: known at once, no wait for the server. */
		if (g)
			CHECK(tf_session_peer_count(s) >= 1);
		else
			CHECK_OK(tf_session_wait_peer(
				s, 1, 4 * tf_test_timeout_ms()));
		granted += (unsigned)g;
		CHECK_OK(tf_session_peer_exposure(s, 0, &info));
		CHECKF(info.length == LEN && info.rights == RIGHTS,
		       "round %d: grant of %llu bytes, rights 0x%x", r,
		       (unsigned long long)info.length, info.rights);
		keys[r] = info.rkey;
		for (int q = 0; q < r; q++)
			CHECKF(keys[q] != keys[r], "rounds %d and %d: key 0x%x",
			       q, r, keys[r]);
		CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&m));
		memset(m, 0xee, LEN);
		CHECK_OK(tf_session_read(s, b, 0, 0, 0, LEN, 1));
		st_expect(s, 1, TF_WC_SUCCESS, NULL);
		CHECKF(m[0] == 0 && !memcmp(m, m + 1, LEN - 1),
		       "round %d: the granted window is not zeroed", r);
		tf_test_fill(m, LEN, (uint32_t)r);
		CHECK_OK(tf_session_write(s, b, 0, 0, 0, LEN, 2));
		st_expect(s, 2, TF_WC_SUCCESS, NULL);
		if (g)
			prev = info;
		tf_session_close(s);
		tf_test_sync(p);
	}
	tf_test_info("%u of rounds 1..%d granted", granted, N);
	CHECKF(granted > 0, "no round of %d was granted", N);
	/* Round N + 1: the key of the last granted round, revoked. */
	CHECK_OK(tf_session_connect(node, st_host(), port, NULL, &s));
	if (tf_session_granted(s)) {
		granted++;
		CHECK_OK(tf_session_peer_exposure(s, 0, &info));
		CHECK(info.rkey != prev.rkey);
	}
	CHECK(tf_test_recv_u64(p) == 1);
	CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&m));
	CHECK_OK(tf_mr_reg(tf_node_pd(node), m, LEN, TF_ACCESS_LOCAL_WRITE,
			   &lmr));
	sge = (struct tf_sge){
		.addr = (uintptr_t)m, .length = 64, .lkey = tf_mr_lkey(lmr)};
	wr.wr.rdma.remote_addr = prev.addr;
	wr.wr.rdma.rkey = prev.rkey;
	CHECK_OK(tf_post_send(tf_session_qp(s), &wr, NULL));
	st_expect(s, 7, TF_WC_REM_ACCESS_ERR, NULL);
	CHECK(tf_session_state(s) == TF_SESSION_BROKEN);
	tf_session_close(s);
	CHECK_OK(tf_mr_dereg(lmr));
	st = stats(node);
	CHECKF(st.grants_taken == granted, "client: %llu grants taken of %u",
	       (unsigned long long)st.grants_taken, granted);
	tf_test_send_u64(p, granted);
}

/* Pass 2, server: a round 0, then the grant's session refused. */
static void server_bound(struct tf_pair *p, tf_node_t *node)
{
	tf_listener_params_t lp = {.field_mask = TF_LISTENER_PARAM_GRANT,
				   .grant_len = 2 * LEN,
				   .grant_depth = 1};
	tf_node_stats_t st0 = stats(node), st;
	tf_listener_t *l;
	tf_session_t *s;

	l = grant_listener(p, node, &lp);
	for (int r = 0; r < BOUND_ROUNDS; r++) {
		/* A later round opens no session if the client took the grant:
		 * accept until a session opens or the connection ended.
		 * (The client says which only once its connect returned,
		 * which without a grant waits for this accept.) */
		int64_t end = st_now_ms() + 4 * (int64_t)tf_test_timeout_ms();

		s = NULL;
		do {
			int ret = tf_listener_accept(l, NULL, 10, &s);

			CHECK(ret == 0 || ret == -EAGAIN);
			st = stats(node);
		} while (!s && (r == 0 || st.qp_destroyed < st.qp_new) &&
			 st_now_ms() < end);
		CHECKF(s || r > 0, "round 0: no session");
		if (!s) {
			/* Refused: the connection ended with its grant. */
			st = st_wait_conns_ended(l, node);
			CHECKF(st.expose_refused == st0.expose_refused + 1 &&
				       st.grants_dropped == 1 &&
				       st.grants_taken == 0,
			       "refused grant: %llu refusals, %llu dropped, "
			       "%llu taken",
			       (unsigned long long)st.expose_refused,
			       (unsigned long long)st.grants_dropped,
			       (unsigned long long)st.grants_taken);
			CHECK(st.windows_live == 0 && st.slices_rented == 0 &&
			      st.exposed_bytes == 0);
			CHECK(tf_test_recv_u64(p) == 1);
			tf_test_sync(p);
			break;
		}
		st_serve_write(s, LEN);
		if (r > 0)
			CHECK(tf_test_recv_u64(p) == 0);
		tf_test_sync(p);
	}
	tf_listener_destroy(l);
}

static void client_bound(struct tf_pair *p, tf_node_t *node, uint16_t port)
{
	tf_caps_t caps;
	tf_session_t *s;
	struct tf_wc wc;
	bool taken = false;
	int64_t end;
	int g;

	CHECK_OK(tf_context_query_caps(p->ctx, &caps));
	for (int r = 0; r < BOUND_ROUNDS && !taken; r++) {
		CHECK_OK(tf_session_connect(node, st_host(), port, NULL, &s));
		g = tf_session_granted(s);
		CHECKF(r || !g, "round 0: granted (transport %s)",
		       caps.transport);
		if (r > 0)
			tf_test_send_u64(p, (uint64_t)g);
		taken = g;
		if (g) {
			/* The server's REJECT breaks it. */
			end = st_now_ms() + 4 * (int64_t)tf_test_timeout_ms();
			while (tf_session_state(s) != TF_SESSION_BROKEN &&
			       st_now_ms() < end)
				CHECK(tf_session_wait(s, 1, &wc, 100) == 0);
			CHECK(tf_session_state(s) == TF_SESSION_BROKEN);
		} else {
			CHECK_OK(tf_session_wait_peer(
				s, 1, 4 * tf_test_timeout_ms()));
		}
		tf_session_close(s);
		tf_test_sync(p);
	}
	CHECKF(taken || strcmp(caps.transport, "shm"),
	       "no round of %d took the grant (transport %s)", BOUND_ROUNDS,
	       caps.transport);
}

/* Pass 3, server: rounds 0..DEFER_ROUNDS - 1 with deferred OPENs; all
 * but rounds 0, 2 and 3 write the grant and close. */
#define DEFER_ROUNDS 7
/* Round 2's two exposures together within pass 2's bound (LEN). */
#define DLEN (LEN / 2)
static void server_defer(struct tf_pair *p, tf_node_t *node)
{
	tf_listener_params_t lp = {.field_mask = TF_LISTENER_PARAM_GRANT,
				   .grant_len = DLEN,
				   .grant_rights = RIGHTS,
				   .grant_depth = GRANT_DEPTH};
	tf_node_stats_t st0 = stats(node), st;
	unsigned merged = 0;
	tf_listener_t *l;
	tf_session_t *s;
	tf_caps_t caps;
	uint8_t *m, *m2;
	int b, x;

	CHECK_OK(tf_context_query_caps(p->ctx, &caps));
	l = grant_listener(p, node, &lp);
	for (int r = 0; r < DEFER_ROUNDS; r++) {
		bool merge = r == 1 || r >= 4;
		int g;

		s = st_accept(l, TF_SESSION_DEFER_ESTABLISH);
		g = tf_session_granted(s);
		CHECKF(r > 0 || !g, "round 0 granted");
		if (g) {
			m = tf_session_buf_addr(s, 0);
			CHECK(m != NULL);
			/* Its OPEN was its CLOSE (rounds 1, 4 and on), or
			 * came early, asked for (rounds 2 and 3). */
			CHECKF(tf_session_state(s) ==
				       (merge ? TF_SESSION_PEER_CLOSED
					      : TF_SESSION_OPEN),
			       "round %d: state %d", r, tf_session_state(s));
			merged += merge;
		} else {
			CHECK_OK(tf_session_rent(s, DLEN, &b, (void **)&m));
			memset(m, 0, DLEN);
			CHECK_OK(tf_session_expose(s, b, 0, DLEN, RIGHTS, &x));
		}
		if (r == 2) {
			/* The exposure the client waits for. */
			CHECK_OK(tf_session_rent(s, DLEN, &b, (void **)&m2));
			memset(m2, 0, DLEN);
			CHECK_OK(tf_session_expose(s, b, 0, DLEN, RIGHTS, &x));
		}
		CHECK_OK(tf_session_establish(s));
		if (r == 3) {
			CHECK(tf_test_recv_u64(p) == 3);
			tf_test_send_u64(p, 1);
		}
		CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
		CHECK_FILL(m, DLEN, (uint32_t)r);
		if (r == 2)
			CHECK_FILL(m2, DLEN, 100);
		tf_session_close(s);
		CHECK(tf_test_recv_u64(p) == (uint64_t)g);
		tf_test_sync(p);
	}
	st = stats(node);
	CHECKF(st.opens_deferred - st0.opens_deferred == merged,
	       "server: %llu OPENs that closed, %u rounds",
	       (unsigned long long)(st.opens_deferred - st0.opens_deferred),
	       merged);
	/* A round may find its grant still in flight (see the top); not
	 * all four of them on soft shm. */
	CHECKF(merged || strcmp(caps.transport, "shm"),
	       "no session was opened and closed by one OPEN (transport %s)",
	       caps.transport);
	tf_listener_destroy(l);
}

static void client_defer(struct tf_pair *p, tf_node_t *node, uint16_t port)
{
	tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_FLAGS,
				  .flags = TF_SESSION_DEFER_OPEN};
	tf_node_stats_t st0 = stats(node), st;
	unsigned granted = 0;
	tf_session_t *s;
	uint8_t *m;
	int b, g;

	for (int r = 0; r < DEFER_ROUNDS; r++) {
		CHECK_OK(tf_session_connect(node, st_host(), port, &sp, &s));
		g = tf_session_granted(s);
		CHECKF(r || !g, "round 0: granted");
		granted += (unsigned)g;
		if (r == 2) {
			CHECK_OK(tf_session_wait_peer(
				s, 2, 4 * tf_test_timeout_ms()));
		} else if (r == 3) {
			CHECK(tf_session_state(s) == TF_SESSION_OPEN);
			tf_test_send_u64(p, 3);
			CHECK(tf_test_recv_u64(p) == 1);
		}
		if (!g)
			CHECK_OK(tf_session_wait_peer(
				s, 1, 4 * tf_test_timeout_ms()));
		CHECK_OK(tf_session_rent(s, DLEN, &b, (void **)&m));
		tf_test_fill(m, DLEN, (uint32_t)r);
		CHECK_OK(tf_session_write(s, b, 0, 0, 0, DLEN, 1));
		st_expect(s, 1, TF_WC_SUCCESS, NULL);
		if (r == 2) {
			tf_test_fill(m, DLEN, 100);
			CHECK_OK(tf_session_write(s, b, 0, 1, 0, DLEN, 2));
			st_expect(s, 2, TF_WC_SUCCESS, NULL);
		}
		tf_session_close(s);
		tf_test_send_u64(p, (uint64_t)g);
		tf_test_sync(p);
	}
	tf_test_info("%u of rounds 1..%d granted, OPENs deferred", granted,
		     DEFER_ROUNDS - 1);
	st = stats(node);
	CHECKF(st.opens_deferred - st0.opens_deferred == granted,
	       "client: %llu OPENs deferred, %u granted rounds",
	       (unsigned long long)(st.opens_deferred - st0.opens_deferred),
	       granted);
	CHECK(st.grants_taken - st0.grants_taken == granted);
}

int main(void)
{
	struct tf_pair p;

	/* Pass 2's bound, read when the contexts open. */
	setenv("TOLLFREE_SESSION_MAX_EXPOSED_PEER", "4096", 1);
	tf_test_begin("conf_session_grant");
	tf_test_pair_open(&p);
	for (int pass = 0; pass < 4; pass++) {
		tf_node_t *node = make_node(&p, pass == 1 || pass == 3);
		uint16_t port;

		if (!stats(node).use_mw)
			tf_test_skip("no memory windows: a listener makes no "
				     "grant without them");
		tf_test_info("pass %d: %s", pass,
			     pass == 3	 ? "deferred OPENs, pre-shared key"
			     : pass == 2 ? "grants past the exposed bound"
			     : pass == 1 ? "pre-shared key"
					 : "no key");
		/* Round N + 1 breaks a QP on purpose; pass 2's refusal is
		 * logged. */
		tf_test_tolerate_log(true);
		if (p.side == TF_SIDE_B) {
			if (pass == 3)
				server_defer(&p, node);
			else if (pass == 2)
				server_bound(&p, node);
			else
				server(&p, node);
		} else {
			port = (uint16_t)tf_test_recv_u64(&p);
			if (pass == 3)
				client_defer(&p, node, port);
			else if (pass == 2)
				client_bound(&p, node, port);
			else
				client(&p, node, port);
		}
		tf_test_sync(&p);
		tf_node_destroy(node);
		tf_test_tolerate_log(false);
	}
	return tf_test_pair_end(&p);
}
