/* SPDX-License-Identifier: MIT */
/*
 * conf_session_attach: the registration strategies (TOLLFREE_REG_MODE)
 * give the same data and show their choice in the stats.  For each mode
 * (auto, pool, cache, direct) the server attaches a small (512 B) and a
 * large (2 MiB + 100 B, unaligned) user buffer, exposes both; the client
 * READs their contents and WRITEs a new pattern over them; after close the
 * server's user buffers hold the client's pattern (pool copies are copied
 * back: TF_ATTACH_INOUT on the server; 0, which means the same, on the
 * client).  auto must copy the small buffer into a slice and take the
 * cache for the large one: the crossover lies between, the default 64 KiB
 * in every run (it is measured only on request).
 */
#include <stdlib.h>

#include "session_util.h"

#define SMALL 512
#define LARGE (2u * 1024 * 1024 + 100)

static const char *mode_name[] = {"auto", "pool", "cache", "direct"};

static void round_server(struct tf_pair *p, tf_listener_t *l, int mode,
			 tf_node_t *node)
{
	size_t len[2] = {SMALL, LARGE};
	uint8_t *u[2];
	tf_node_stats_t st;
	tf_session_t *s = st_accept(l, TF_SESSION_DEFER_ESTABLISH);
	int b[2], x, want[2];

	want[0] = mode == TF_REG_AUTO ? TF_REG_POOL : mode;
	want[1] = mode == TF_REG_AUTO || mode == TF_REG_POOL ? TF_REG_CACHE
							     : mode;
	for (int k = 0; k < 2; k++) {
		/* +1: deliberately not page aligned. */
		u[k] = (uint8_t *)malloc(len[k] + 1) + 1;
		tf_test_fill(u[k], len[k], 100 + (uint32_t)(mode * 2 + k));
		CHECK_OK(tf_session_attach(s, u[k], len[k], TF_ATTACH_INOUT,
					   &b[k]));
		CHECKF(tf_session_buf_mode(s, b[k]) == want[k],
		       "mode %s, %zu bytes: got %d, want %d", mode_name[mode],
		       len[k], tf_session_buf_mode(s, b[k]), want[k]);
		CHECK_OK(tf_session_expose(
			s, b[k], 0, len[k],
			TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_WRITE, &x));
	}
	CHECK_OK(tf_session_establish(s));
	CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
	tf_session_close(s);
	for (int k = 0; k < 2; k++) {
		CHECK_FILL(u[k], len[k], 200 + (uint32_t)(mode * 2 + k));
		/* No monitor may be running: drop cached registrations
		 * before the memory goes back to malloc. */
		tf_rcache_invalidate(tf_node_rcache(node), u[k], len[k]);
		free(u[k] - 1);
	}
	CHECK_OK(tf_node_query_stats(node, &st));
	CHECK(st.reg_mode == mode && st.crossover == 65536);
	tf_test_info("%s: pool %llu, cache %llu, direct %llu, copied %llu B",
		     mode_name[mode], (unsigned long long)st.attach_pool,
		     (unsigned long long)st.attach_cache,
		     (unsigned long long)st.attach_direct,
		     (unsigned long long)st.copy_bytes);
	CHECK(st.attach_pool + st.attach_cache + st.attach_direct == 2);
	CHECK(st.attach_pool ==
	      (uint64_t)(want[0] == TF_REG_POOL) + (want[1] == TF_REG_POOL));
	CHECK(st.attach_direct == (mode == TF_REG_DIRECT ? 2u : 0u));
	(void)p;
}

static void round_client(tf_node_t *node, uint16_t port, int mode)
{
	size_t len[2] = {SMALL, LARGE};
	tf_session_t *s;
	uint8_t *m;
	int b;

	CHECK_OK(tf_session_connect(node, "127.0.0.1", port, NULL, &s));
	CHECK(tf_session_peer_exposures(s) == 2);
	m = malloc(LARGE);
	CHECK(m);
	CHECK_OK(tf_session_attach(s, m, LARGE, 0, &b));
	for (int k = 0; k < 2; k++) {
		uint8_t *w = tf_session_buf_addr(s, b);

		CHECK_OK(tf_session_read(s, b, 0, k, 0, (uint32_t)len[k], 1));
		st_expect(s, 1, TF_WC_SUCCESS, NULL);
		CHECK_FILL(w, len[k], 100 + (uint32_t)(mode * 2 + k));
		tf_test_fill(w, len[k], 200 + (uint32_t)(mode * 2 + k));
		CHECK_OK(tf_session_write(s, b, 0, k, 0, (uint32_t)len[k], 2));
		st_expect(s, 2, TF_WC_SUCCESS, NULL);
	}
	tf_session_close(s);
	tf_rcache_invalidate(tf_node_rcache(node), m, LARGE);
	free(m);
}

int main(void)
{
	struct tf_pair p;
	tf_listener_t *l = NULL;
	uint16_t port = 0;

	tf_test_begin("conf_session_attach");
	tf_test_pair_open(&p);
	for (int mode = TF_REG_AUTO; mode <= TF_REG_DIRECT; mode++) {
		tf_node_params_t np = {.field_mask = TF_NODE_PARAM_REG_MODE,
				       .reg_mode = mode};
		tf_node_t *node;

		CHECK_OK(tf_node_create(p.ctx, &np, &node));
		if (p.side == TF_SIDE_B) {
			CHECK_OK(tf_listener_create(node, NULL, &l));
			tf_test_send_u64(&p, tf_listener_port(l));
			round_server(&p, l, mode, node);
			tf_listener_destroy(l);
		} else {
			port = (uint16_t)tf_test_recv_u64(&p);
			round_client(node, port, mode);
		}
		tf_test_sync(&p);
		tf_node_destroy(node);
	}
	return tf_test_pair_end(&p);
}
