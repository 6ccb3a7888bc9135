/* SPDX-License-Identifier: MIT */
/*
 * session_peers_unit: the server-side table of what each client address
 * holds (src/session/peers.c), shared by threads as the listener threads
 * and session closers of one node share it.
 *
 * THREADS threads, three per address (IPv4 10.0.0.x, and for some its
 * IPv4-mapped IPv6 form: the same peer), each ROUNDS times take a session
 * slot, expose bytes, keep a connection, and give it all back.  The
 * bounds are small (2 sessions per address, 7 in all, 2500 bytes exposed
 * per address, 1 kept per address, 3 in all), so the threads run into
 * each of them.  What the threads hold, counted on their
 * side, never passes a bound; every refusal is counted by the node; at
 * the end the table is empty (no session, no byte, no entry).  Under
 * TSan this is also the check that the table is safe to share.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "session_int.h"
#include "tf_test.h"

#define THREADS 12
#define ROUNDS	20000
#define PEERS	4

static tf_node_t *node;
static atomic_int held_sess[PEERS], held_kept[PEERS], total_sess, total_kept;
static atomic_llong held_bytes[PEERS];
static atomic_ullong refusals;

static void peer_addr(int t, struct sockaddr_storage *sa)
{
	struct sockaddr_in *s4 = (struct sockaddr_in *)sa;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;
	char text[32];

	memset(sa, 0, sizeof(*sa));
	if ((t / PEERS) % 2 == 0) {
		snprintf(text, sizeof(text), "10.0.0.%d", t % PEERS);
		s4->sin_family = AF_INET;
		CHECK(inet_pton(AF_INET, text, &s4->sin_addr) == 1);
	} else {
		snprintf(text, sizeof(text), "::ffff:10.0.0.%d", t % PEERS);
		s6->sin6_family = AF_INET6;
		CHECK(inet_pton(AF_INET6, text, &s6->sin6_addr) == 1);
	}
}

static void *worker(void *arg)
{
	int t = (int)(intptr_t)arg, peer = t % PEERS;
	struct tf_conn c = {.node = node};

	peer_addr(t, &c.peer);
	for (int i = 0; i < ROUNDS; i++) {
		struct tf_peer *pe;
		uint64_t len = 1000 + (uint64_t)(i % 3) * 250;
		bool exposed = false, kept;

		if (tf__peers_session_get(node, &c.peer, &pe)) {
			atomic_fetch_add(&refusals, 1);
			continue;
		}
		CHECK(atomic_fetch_add(&held_sess[peer], 1) + 1 <= 2);
		CHECK(atomic_fetch_add(&total_sess, 1) + 1 <= 7);
		/* Let the others run into the bounds while this one holds. */
		sched_yield();
		if (!tf__peers_expose(node, pe, len)) {
			exposed = true;
			CHECK(atomic_fetch_add(&held_bytes[peer],
					       (long long)len) +
				      (long long)len <=
			      2500);
		} else {
			atomic_fetch_add(&refusals, 1);
		}
		kept = tf__peers_keep(node, &c);
		if (kept) {
			CHECK(c.kept_pe == pe);
			CHECK(atomic_fetch_add(&held_kept[peer], 1) + 1 <= 1);
			CHECK(atomic_fetch_add(&total_kept, 1) + 1 <= 3);
			atomic_fetch_sub(&held_kept[peer], 1);
			atomic_fetch_sub(&total_kept, 1);
			tf__peers_unkeep(node, &c);
		} else {
			atomic_fetch_add(&refusals, 1);
		}
		CHECK(!c.kept_pe);
		if (exposed) {
			atomic_fetch_sub(&held_bytes[peer], (long long)len);
			tf__peers_unexpose(node, pe, len);
		}
		atomic_fetch_sub(&held_sess[peer], 1);
		atomic_fetch_sub(&total_sess, 1);
		tf__peers_session_put(node, pe);
	}
	return NULL;
}

int main(void)
{
	pthread_t thr[THREADS];
	tf_node_stats_t st;
	tf_context_t *ctx;
	struct tf_peers *t;

	tf_test_begin("session_peers_unit");
	CHECK_OK(tf_context_open(NULL, &ctx));
	CHECK_OK(tf_node_create(ctx, NULL, &node));
	/* Small bounds, set where the node keeps them (the table was sized
	 * for the defaults, which is larger). */
	t = &node->peers;
	t->max_sessions_peer = 2;
	t->max_sessions = 7;
	t->max_exposed_peer = 2500;
	t->max_kept_peer = 1;
	t->max_kept = 3;
	/* Refusals log warnings, by the thousand (rate-limited). */
	tf_test_tolerate_log(true);
	for (int i = 0; i < THREADS; i++)
		CHECK(!pthread_create(&thr[i], NULL, worker,
				      (void *)(intptr_t)i));
	for (int i = 0; i < THREADS; i++)
		CHECK(!pthread_join(thr[i], NULL));
	tf_test_tolerate_log(false);
	CHECK_OK(tf_node_query_stats(node, &st));
	tf_test_info("%llu refusals: %llu sessions (node), %llu sessions "
		     "(address), %llu exposes, %llu keeps",
		     (unsigned long long)atomic_load(&refusals),
		     (unsigned long long)st.sessions_refused,
		     (unsigned long long)st.sessions_refused_peer,
		     (unsigned long long)st.expose_refused,
		     (unsigned long long)st.kept_refused);
	CHECK(st.sessions_refused + st.sessions_refused_peer +
		      st.expose_refused + st.kept_refused ==
	      atomic_load(&refusals));
	/* Whether each bound was reached depends on the scheduling (a
	 * yield while holding makes it likely): only that some were is
	 * certain. */
	CHECK(st.sessions_refused_peer + st.sessions_refused + st.kept_refused >
	      0);
	CHECK(st.sessions_served == 0 && st.exposed_bytes == 0);
	CHECK(t->n_ent == 0 && t->sessions == 0 && t->kept == 0);
	tf_node_destroy(node);
	tf_context_close(ctx);
	return tf_test_end();
}
