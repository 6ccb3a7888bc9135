/* SPDX-License-Identifier: MIT */
/*
 * session_config: sessions configured from the environment, over IPv6.
 * TOLLFREE_SESSION_PSK_FILE names a key file and TOLLFREE_REG_MODE=direct
 * is set before the contexts open; both nodes take them (stats show auth
 * and the mode).  A session over [::1] works; a node whose key (given by
 * params, which win over the environment) differs gets -TF_EAUTH: the
 * server's proof does not verify, so the client hangs up before sending
 * its QP address (it counts an authentication failure, the server a
 * rejected handshake, and no session opens).  A bad registration mode
 * passed by params is refused.
 */
#include <stdlib.h>
#include <unistd.h>

#include "session_util.h"

int main(void)
{
	char path[] = "/tmp/tf_psk_XXXXXX";
	const char key[] = "\x01\x02\x03 binary key \xff";
	struct tf_pair p;
	tf_node_stats_t st;
	tf_node_t *node;
	int fd = mkstemp(path);

	CHECK(fd >= 0);
	CHECK(write(fd, key, sizeof(key)) == (ssize_t)sizeof(key));
	close(fd);
	setenv("TOLLFREE_SESSION_PSK_FILE", path, 1);
	setenv("TOLLFREE_REG_MODE", "direct", 1);
	CHECK(tf_config_check("REG_MODE", "direct") == 0);

	tf_test_begin("session_config");
	tf_test_pair_open(&p);
	tf_test_tolerate_log(true);
	node = st_node(&p, -1, NULL, 0);
	CHECK_OK(tf_node_query_stats(node, &st));
	CHECK(st.auth == 1 && st.reg_mode == TF_REG_DIRECT);
	if (p.side == TF_SIDE_B) {
		tf_listener_params_t lp = {.field_mask = TF_LISTENER_PARAM_ADDR,
					   .addr = "::1"};
		tf_listener_t *l;
		tf_session_t *s;
		int b, x, ret = tf_listener_create(node, &lp, &l);

		if (ret == -EADDRNOTAVAIL || ret == -EAFNOSUPPORT) {
			tf_test_send_u64(&p, 0);
			tf_test_skip("no IPv6 loopback: %s", tf_strerror(ret));
		}
		CHECK_OK(ret);
		tf_test_send_u64(&p, tf_listener_port(l));
		s = st_accept(l, 0);
		CHECK_OK(tf_session_rent(s, 64, &b, NULL));
		memcpy(tf_session_buf_addr(s, b), "over ipv6", 10);
		CHECK_OK(tf_session_expose(s, b, 0, 64, TF_ACCESS_REMOTE_READ,
					   &x));
		CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
		tf_session_close(s);
		/* The wrong-key client below: nothing accepted, and it counts
		 * as an authentication failure, not a malformed handshake. */
		CHECK_ERR(tf_listener_accept(l, NULL, 1000, &s), -EAGAIN);
		CHECK_OK(tf_node_query_stats(node, &st));
		CHECKF(st.sessions_opened == 1 && st.auth_failures == 1 &&
			       st.handshake_rejects == 0,
		       "opened %llu, auth failures %llu, rejects %llu",
		       (unsigned long long)st.sessions_opened,
		       (unsigned long long)st.auth_failures,
		       (unsigned long long)st.handshake_rejects);
		tf_listener_destroy(l);
	} else {
		uint16_t port = (uint16_t)tf_test_recv_u64(&p);
		tf_node_params_t np = {.field_mask = TF_NODE_PARAM_PSK,
				       .psk = "other",
				       .psk_len = 5};
		tf_node_t *bad;
		tf_session_t *s;
		struct tf_wc wc;
		char *m;
		int b;

		if (!port)
			tf_test_skip("server has no IPv6 loopback");
		CHECK_OK(tf_session_connect(node, "::1", port, NULL, &s));
		CHECK_OK(tf_session_wait_peer(s, 1, 4 * tf_test_timeout_ms()));
		CHECK_OK(tf_session_rent(s, 64, &b, (void **)&m));
		CHECK_OK(tf_session_read(s, b, 0, 0, 0, 64, 9));
		CHECK(tf_session_wait(s, 1, &wc, 4 * tf_test_timeout_ms()) ==
		      1);
		CHECK(wc.status == TF_WC_SUCCESS && !strcmp(m, "over ipv6"));
		tf_session_close(s);
		CHECK_OK(tf_node_create(p.ctx, &np, &bad));
		CHECK_ERR(tf_session_connect(bad, "::1", port, NULL, &s),
			  -TF_EAUTH);
		CHECK_OK(tf_node_query_stats(bad, &st));
		CHECK(st.auth_failures == 1 && st.sessions_opened == 0);
		tf_node_destroy(bad);
	}
	{
		tf_node_params_t np = {.field_mask = TF_NODE_PARAM_REG_MODE,
				       .reg_mode = 7};
		tf_node_t *n2;

		CHECK_ERR(tf_node_create(p.ctx, &np, &n2), -EINVAL);
	}
	tf_test_sync(&p);
	tf_node_destroy(node);
	tf_test_tolerate_log(false);
	if (p.side == TF_SIDE_A)
		unlink(path);
	return tf_test_pair_end(&p);
}
