/* SPDX-License-Identifier: MIT */
/*
 * session_psk_threads: several threads of one keyed node open new
 * connections at the same time.  A keyed node keeps what it made ahead
 * for the next handshake (its next connection's ciphers, a client's next
 * early nonce and key, the server's early-OPEN cipher, the next connect's
 * socket: tf__node_keys_*, tf__node_sock_*), each taken and given back
 * under the node's lock; here THREADS client threads race for them, for
 * PER_THREAD connections each (TF_SESSION_NO_REUSE: every session a new
 * connection).
 *
 * Side B accepts every session, sees the client's private data (the
 * thread and its count), and serves it to its close.  Side A checks that
 * every connect succeeded and that every session was opened with an
 * early OPEN the server took (psk_early counts all of them on both sides,
 * psk_early_refused none: no two connects used one nonce), and that one
 * socket is left made ahead.  The sanitizer stages run it too.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "session_util.h"

#define THREADS	   4
#define PER_THREAD 25
#define TOTAL	   (THREADS * PER_THREAD)

static const char key[] = "session_psk_threads: the pre-shared key";

struct client_thr {
	pthread_t thr;
	tf_node_t *node;
	uint16_t port;
	unsigned id;
	int failed; /* the first failed connect's error, or 0 */
};

static void *client_main(void *arg)
{
	struct client_thr *t = arg;

	for (unsigned i = 0; i < PER_THREAD && !t->failed; i++) {
		uint32_t priv = t->id * PER_THREAD + i;
		tf_session_params_t sp = {
			.field_mask =
				TF_SESSION_PARAM_FLAGS | TF_SESSION_PARAM_PRIV,
			.flags = TF_SESSION_NO_REUSE,
			.priv = &priv,
			.priv_len = sizeof(priv),
		};
		tf_session_t *s;
		int ret = tf_session_connect(t->node, st_host(), t->port, &sp,
					     &s);

		if (ret) {
			t->failed = ret;
			break;
		}
		tf_session_close(s);
	}
	return NULL;
}

static void server(struct tf_pair *p, tf_node_t *node, tf_listener_t *l)
{
	static bool seen[TOTAL];
	tf_node_stats_t st;

	(void)p;
	for (int n = 0; n < TOTAL; n++) {
		tf_session_t *s = st_accept(l, 0);
		uint32_t priv = UINT32_MAX;
		size_t len = 0;
		const void *pd = tf_session_peer_priv(s, &len);

		CHECK(pd && len == sizeof(priv));
		if (pd && len == sizeof(priv))
			memcpy(&priv, pd, sizeof(priv));
		CHECKF(priv < TOTAL && !seen[priv],
		       "session %d: private data %u (seen twice?)", n, priv);
		if (priv < TOTAL)
			seen[priv] = true;
		st_serve(s);
		tf_session_close(s);
	}
	CHECK_OK(tf_node_query_stats(node, &st));
	CHECKF(st.psk_early == TOTAL && !st.psk_early_refused &&
		       !st.auth_failures && !st.handshake_rejects,
	       "server: %llu early OPENs taken, %llu refused, %llu auth "
	       "failures, %llu rejects",
	       (unsigned long long)st.psk_early,
	       (unsigned long long)st.psk_early_refused,
	       (unsigned long long)st.auth_failures,
	       (unsigned long long)st.handshake_rejects);
}

static void client(struct tf_pair *p, tf_node_t *node, uint16_t port)
{
	struct client_thr t[THREADS];
	tf_node_stats_t st;

	(void)p;
	for (unsigned i = 0; i < THREADS; i++) {
		t[i] = (struct client_thr){.node = node, .port = port, .id = i};
		CHECK(pthread_create(&t[i].thr, NULL, client_main, &t[i]) == 0);
	}
	for (unsigned i = 0; i < THREADS; i++) {
		pthread_join(t[i].thr, NULL);
		CHECKF(!t[i].failed, "thread %u: connect: %s", i,
		       tf_strerror(t[i].failed));
	}
	CHECK_OK(tf_node_query_stats(node, &st));
	CHECKF(st.sessions_opened == TOTAL && st.psk_early == TOTAL &&
		       !st.psk_early_refused && !st.connect_failures,
	       "client: %llu opened, %llu early OPENs taken, %llu refused, "
	       "%llu failures",
	       (unsigned long long)st.sessions_opened,
	       (unsigned long long)st.psk_early,
	       (unsigned long long)st.psk_early_refused,
	       (unsigned long long)st.connect_failures);
	CHECKF(st.stock_sockets == 1, "%llu sockets made ahead",
	       (unsigned long long)st.stock_sockets);
}

int main(void)
{
	struct tf_pair p;
	tf_node_t *node;

	tf_test_begin("session_psk_threads");
	tf_test_pair_open(&p);
	node = st_node(&p, -1, key, sizeof(key) - 1);
	st_run_node(&p, node, server, client);
	tf_node_destroy(node);
	return tf_test_pair_end(&p);
}
