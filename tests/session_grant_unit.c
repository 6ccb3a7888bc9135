/* SPDX-License-Identifier: MIT */
/*
 * session_grant_unit: a client that names a grant its connection does not
 * hold.  A unit test: it takes the client's kept connection from the
 * node (session_int.h) and forges the OPEN with the wire codec;
 * conf_session_grant is the public-API part of grants.
 *
 * Round 0 makes a connection to a listener that grants (depth 2), and its
 * close leaves the connection kept, holding two grants.  Then the client
 * sends, on that connection's control QP, an OPEN that takes grant
 * 0x7fffffff, which the server never gave.  The server must not open a
 * session: it answers REJECT (-TF_EWIRE, sealed like every message there)
 * and ends the connection, whose two grants are revoked with it: no
 * window, slice or exposed byte is left, and the handshake counts one
 * rejection.  A new connection then works.
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

static void server(struct tf_pair *p, tf_node_t *node)
{
	tf_listener_params_t lp = {.field_mask = TF_LISTENER_PARAM_GRANT,
				   .grant_len = LEN,
				   .grant_depth = 2};
	tf_listener_t *l;
	tf_session_t *s = NULL;
	tf_node_stats_t st;
	int b, x;

	CHECK_OK(tf_listener_create(node, &lp, &l));
	tf_test_send_u64(p, tf_listener_port(l));
	s = st_accept(l, 0);
	CHECK_OK(tf_session_rent(s, LEN, &b, NULL));
	CHECK_OK(tf_session_expose(s, b, 0, LEN, TF_ACCESS_REMOTE_WRITE, &x));
	CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
	tf_session_close(s);
	CHECK(stats(node).grants_made == 2);
	tf_test_sync(p);
	/* The forged OPEN: no session, the connection dropped. */
	st = st_wait_conns_ended(l, node);
	CHECKF(st.qp_destroyed == 1 && st.handshake_rejects == 1 &&
		       st.grants_dropped == 2 && st.grants_taken == 0,
	       "%llu connections destroyed, %llu rejects, %llu grants "
	       "dropped, %llu taken",
	       (unsigned long long)st.qp_destroyed,
	       (unsigned long long)st.handshake_rejects,
	       (unsigned long long)st.grants_dropped,
	       (unsigned long long)st.grants_taken);
	CHECK(st.windows_live == 0 && st.slices_rented == 0 &&
	      st.exposed_bytes == 0);
	tf_test_sync(p);
	/* A new connection works. */
	s = st_accept(l, 0);
	CHECK(!tf_session_granted(s));
	CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
	tf_session_close(s);
	tf_test_sync(p);
	tf_listener_destroy(l);
}

static void client(struct tf_pair *p, tf_node_t *node, uint16_t port)
{
	struct tf_sess_addrs addrs;
	struct tf_wire_reject rej;
	struct tf_wire_msg m;
	tf_session_t *s;
	struct tf_conn *c;
	int ret;

	CHECK_OK(tf_session_connect(node, "127.0.0.1", port, NULL, &s));
	CHECK_OK(tf_session_wait_peer(s, 1, 4 * tf_test_timeout_ms()));
	tf_session_close(s);
	tf_test_sync(p);
	CHECK_OK(tf__sess_resolve("127.0.0.1", port, &addrs));
	c = tf__node_take(node, &addrs.a[0].sa, addrs.a[0].len);
	CHECK(c != NULL && c->ctl.ready);
	tf__wire_init(&m, TF_WIRE_OPEN);
	tf__wire_put_u32(&m, c->id);
	tf__wire_put_u16(&m, 0); /* blob */
	tf__wire_put_u16(&m, 0); /* priv */
	tf__wire_put_u16(&m, 0); /* control blob */
	tf__wire_put_u32(&m, 0x7fffffffu);
	tf__wire_put_u8(&m, 0); /* flags */
	CHECK_OK(tf__wire_finish(&m));
	CHECK_OK(tf__conn_send(c, TF_WIRE_CH_CTL, &m, 1000));
	/* The answer comes after the server's CLOSE and GRANTs. */
	do {
		tf__wire_rx_reset(&c->rx);
		ret = tf__ctl_wait(c, &c->rx, 4 * tf_test_timeout_ms());
		CHECKF(ret == 1, "no answer to the forged OPEN: %s",
		       tf_strerror(ret));
		CHECK_OK(tf__conn_open(c, TF_WIRE_CH_CTL));
	} while (c->rx.h.op == TF_WIRE_CLOSE || c->rx.h.op == TF_WIRE_GRANT);
	CHECK_OK(tf__wire_parse_reject(&c->rx, &rej));
	CHECK(rej.err == -TF_EWIRE);
	c->broken = true;
	tf__conn_destroy(c);
	tf_test_sync(p);
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
