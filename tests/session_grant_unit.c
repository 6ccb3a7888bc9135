/* SPDX-License-Identifier: MIT */
/*
 * session_grant_unit: a client that names a grant its connection does not
 * hold.  A unit test: it takes the client's kept connection from the
 * node (session_int.h) and forges the OPEN with the wire codec;
 * conf_session_grant is the public-API part of grants.
 *
 * Round 0 makes a connection to a listener that grants (depth 2), and its
 * close leaves the connection kept, holding two grants.  Then the client
 * sends, on that connection's control QP, a forged OPEN:
 * - one that takes grant 0x7fffffff, which the server never gave;
 * - one that takes no grant but says it is its session's CLOSE too
 *   (TF_WIRE_OPEN_CLOSED: only a deferred OPEN on a grant may);
 * - one that takes a grant it holds with TF_WIRE_OPEN_CLOSED and
 *   TF_WIRE_OPEN_RINV (no remote invalidation on a grant).
 * For each the server must not open a session: it answers REJECT
 * (-TF_EWIRE, sealed like every message there) and ends the connection,
 * whose two grants are revoked with it: no window, slice or exposed byte
 * is left, and the handshake counts one rejection more.  The next round's
 * new connection works, and so does the one after the last forgery.
 */
#include "session_util.h"
#include "session_int.h"

#define LEN 4096

static tf_node_stats_t stats(tf_node_t *node)
{
	tf_node_stats_t st;

	CHECK_OK(tf_node_query_stats(node, &st));
	return st;
}

#define NFORGE 3

static void server(struct tf_pair *p, tf_node_t *node)
{
	tf_listener_params_t lp = {.field_mask = TF_LISTENER_PARAM_GRANT,
				   .grant_len = LEN,
				   .grant_depth = 2};
	tf_listener_t *l;
	tf_session_t *s = NULL;
	tf_node_stats_t st;

	CHECK_OK(tf_listener_create(node, &lp, &l));
	tf_test_send_u64(p, tf_listener_port(l));
	for (unsigned i = 0; i < NFORGE; i++) {
		st_serve_write(st_accept(l, 0), LEN);
		CHECK(stats(node).grants_made == 2 * (i + 1));
		tf_test_sync(p);
		/* The forged OPEN: no session, the connection dropped. */
		st = st_wait_conns_ended(l, node);
		CHECKF(st.qp_destroyed == i + 1 &&
			       st.handshake_rejects == i + 1 &&
			       st.grants_dropped == 2 * (i + 1) &&
			       st.grants_taken == 0,
		       "forgery %u: %llu connections destroyed, %llu "
		       "rejects, %llu grants dropped, %llu taken",
		       i, (unsigned long long)st.qp_destroyed,
		       (unsigned long long)st.handshake_rejects,
		       (unsigned long long)st.grants_dropped,
		       (unsigned long long)st.grants_taken);
		CHECK(st.windows_live == 0 && st.slices_rented == 0 &&
		      st.exposed_bytes == 0);
		tf_test_sync(p);
	}
	/* A new connection works. */
	s = st_accept(l, 0);
	CHECK(!tf_session_granted(s));
	CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
	tf_session_close(s);
	tf_test_sync(p);
	tf_listener_destroy(l);
}

/* Forgery @i on @c, a kept connection that holds two grants. */
static void forge(struct tf_conn *c, unsigned i)
{
	struct tf_wire_reject rej;
	struct tf_wire_msg m;
	uint32_t grant = 0x7fffffffu;
	uint8_t flags = 0;
	int ret;

	CHECK(c->n_grants == 2);
	if (i == 1) {
		grant = 0;
		flags = TF_WIRE_OPEN_CLOSED;
	} else if (i == 2) {
		grant = c->grants[0].id;
		flags = TF_WIRE_OPEN_CLOSED | TF_WIRE_OPEN_RINV;
	}
	tf__wire_init(&m, TF_WIRE_OPEN);
	tf__wire_put_u32(&m, c->id);
	tf__wire_put_u16(&m, 0); /* blob */
	tf__wire_put_u16(&m, 0); /* priv */
	tf__wire_put_u16(&m, 0); /* control blob */
	tf__wire_put_u32(&m, grant);
	tf__wire_put_u8(&m, flags);
	CHECK_OK(tf__wire_finish(&m));
	CHECK_OK(tf__conn_send(c, TF_WIRE_CH_CTL, &m, 1000));
	/* The answer comes after the server's CLOSE and GRANTs. */
	do {
		tf__wire_rx_reset(&c->rx);
		ret = tf__ctl_wait(c, &c->rx, 4 * tf_test_timeout_ms());
		CHECKF(ret == 1, "no answer to forged OPEN %u: %s", i,
		       tf_strerror(ret));
		CHECK_OK(tf__conn_open(c, TF_WIRE_CH_CTL));
	} while (c->rx.h.op == TF_WIRE_CLOSE || c->rx.h.op == TF_WIRE_GRANT);
	CHECK_OK(tf__wire_parse_reject(&c->rx, &rej));
	CHECKF(rej.err == -TF_EWIRE, "forgery %u: REJECT %d", i, rej.err);
}

static void client(struct tf_pair *p, tf_node_t *node, uint16_t port)
{
	struct tf_sess_addrs addrs;
	tf_session_t *s;
	struct tf_conn *c;

	for (unsigned i = 0; i < NFORGE; i++) {
		CHECK_OK(tf_session_connect(node, "127.0.0.1", port, NULL, &s));
		CHECK(!tf_session_reused(s) && !tf_session_granted(s));
		CHECK_OK(tf_session_wait_peer(s, 1, 4 * tf_test_timeout_ms()));
		tf_session_close(s);
		tf_test_sync(p);
		CHECK_OK(tf__sess_resolve("127.0.0.1", port, &addrs));
		c = tf__node_take(node, &addrs.a[0].sa, addrs.a[0].len);
		CHECK(c != NULL && c->ctl.ready);
		/* The grants come after the server's close: wait for them
		 * (take_aside's reading, as a connect would). */
		for (int64_t end = st_now_ms() + 4 * tf_test_timeout_ms();
		     c->n_grants < 2 && st_now_ms() < end;) {
			tf__wire_rx_reset(&c->rx);
			if (tf__ctl_wait(c, &c->rx, 100) != 1)
				continue;
			CHECK_OK(tf__conn_open(c, TF_WIRE_CH_CTL));
			CHECK(tf__conn_aside(c, TF_WIRE_CH_CTL, &c->rx) == 1);
		}
		tf__wire_rx_reset(&c->rx);
		forge(c, i);
		c->broken = true;
		tf__conn_destroy(c);
		tf_test_sync(p);
	}
	CHECK_OK(tf_session_connect(node, "127.0.0.1", port, NULL, &s));
	CHECK(!tf_session_reused(s) && !tf_session_granted(s));
	tf_session_close(s);
	tf_test_sync(p);
}

int main(void)
{
	struct tf_pair p;
	tf_node_t *node;

	tf_test_begin("session_grant_unit");
	tf_test_pair_open(&p);
	node = st_node(&p, 1, NULL, 0);
	if (!stats(node).use_mw)
		tf_test_skip("no memory windows: no grants");
	/* The forged OPEN is refused with a warning. */
	tf_test_tolerate_log(true);
	if (p.side == TF_SIDE_B)
		server(&p, node);
	else
		client(&p, node, (uint16_t)tf_test_recv_u64(&p));
	tf_test_sync(&p);
	tf_node_destroy(node);
	return tf_test_pair_end(&p);
}
