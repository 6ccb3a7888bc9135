/* SPDX-License-Identifier: MIT */
/*
 * conf_session_stock: the connection stock (TOLLFREE_SESSION_STOCK 3)
 * under each refill mode (TOLLFREE_SESSION_STOCK_REFILL), and a bad mode.
 *
 * For each of inline and thread, both sides open a context and a node;
 * the client makes N new connections (TF_SESSION_NO_REUSE), one session
 * each, which the server accepts and serves to their close:
 * - every connection on both sides takes its QPs from the stock (N hits,
 *   no miss), which is full again after each: inline, the client makes
 *   the next entry while the server answers its HELLO, and the listener
 *   when its accept finds nothing to do (a call that returns -EAGAIN);
 *   thread, in the background (st_stock_settle);
 * - inline, the node is created with a full stock, and no call other than
 *   these refills: after the server's accept the stock lacks the entry the
 *   connection took until the listener's next idle accept;
 * - inline with TF_CAP_QP_RESET (verbs), each connection gives its QP back
 *   when it ends (stock_recycled counts N on the server), and the
 *   connect's refill does not run while two of three entries are left:
 *   after the connect the stock lacks one entry, after the close none;
 *   but the client's last session leaves a receive posted, and its QP is
 *   destroyed, not given back (N - 1 on the client).
 * - each connect makes the next one's TCP socket while the server answers
 *   (with early addresses, after the ADDR): stock_sockets is 1 after
 *   every session.  The next connect takes it: from the second session
 *   on, where QPs have no sockets of their own, the client has as many
 *   sockets open as before, but not the one made ahead before (it closed
 *   with its session).  The node's destroy closes the last one.
 * Then TOLLFREE_SESSION_STOCK_REFILL=sometimes makes node creation fail
 * with -EINVAL, on side A alone.  In peer mode (two machines) only the
 * inline pair runs.
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "session_util.h"

#define N   5
#define CAP 3

static tf_node_stats_t stats(tf_node_t *node)
{
	tf_node_stats_t st;

	CHECK_OK(tf_node_query_stats(node, &st));
	return st;
}

/* A node whose stock is full: at once when it is made inline. */
static tf_node_t *node_full(struct tf_pair *p, bool inl)
{
	tf_node_stats_t st;
	tf_node_t *node;

	CHECK_OK(tf_node_create(p->ctx, NULL, &node));
	st = stats(node);
	CHECK(st.stock_max == CAP);
	if (inl)
		CHECK(st.stock_entries == CAP);
	st_stock_settle(node);
	return node;
}

/* Every one of the N connections took its QPs from the stock. */
static void check_hits(tf_node_t *node, const char *side)
{
	tf_node_stats_t st = stats(node);

	CHECKF(st.stock_hits == N && st.stock_misses == 0,
	       "%s stock: %llu hits, %llu misses", side,
	       (unsigned long long)st.stock_hits,
	       (unsigned long long)st.stock_misses);
}

/* After connection @i closed: it gave its QP back (@back: the stock is
 * full) or not, and every connection before it did. */
static void check_recycled(tf_node_t *node, int i, bool back)
{
	tf_node_stats_t st = stats(node);

	CHECKF(st.stock_entries == (back ? CAP : CAP - 1) &&
		       st.stock_recycled == (uint64_t)i + back,
	       "session %d: %llu entries, %llu recycled after the close", i,
	       (unsigned long long)st.stock_entries,
	       (unsigned long long)st.stock_recycled);
}

static bool recycles(const struct tf_pair *p, bool inl)
{
	return inl && (p->caps.flags & TF_CAP_QP_RESET);
}

static void server(struct tf_pair *p, bool inl)
{
	tf_node_t *node = node_full(p, inl);
	bool rec = recycles(p, inl);
	tf_listener_t *l;
	tf_node_stats_t st;

	CHECK_OK(st_listen(node, &l));
	tf_test_send_u64(p, tf_listener_port(l));
	for (int i = 0; i < N; i++) {
		tf_session_t *s = st_accept(l, 0);
		tf_session_t *none = NULL;

		if (inl) {
			st = stats(node);
			CHECKF(st.stock_entries == CAP - 1,
			       "session %d: %llu entries after the accept", i,
			       (unsigned long long)st.stock_entries);
		}
		CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
		tf_session_close(s);
		if (rec)
			check_recycled(node, i, true);
		/* Nothing more to accept: the listener's idle call. */
		CHECK(tf_listener_accept(l, NULL, 0, &none) == -EAGAIN);
		CHECK(!none);
		if (inl) {
			st = stats(node);
			CHECK(st.stock_entries == CAP);
		}
		st_stock_settle(node);
		tf_test_sync(p);
	}
	check_hits(node, "server");
	tf_listener_destroy(l);
	tf_node_destroy(node);
}

#define MAX_SOCKS 64

/* This process's open sockets: their count, and up to MAX_SOCKS of their
 * inode numbers into @ino (may be NULL). */
static int list_sockets(unsigned long *ino)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	CHECK(d);
	while (d && (e = readdir(d))) {
		char path[300], link[64];
		ssize_t len;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		len = readlink(path, link, sizeof(link) - 1);
		if (len <= 0)
			continue;
		link[len] = 0;
		if (strncmp(link, "socket:[", 8))
			continue;
		if (ino && n < MAX_SOCKS)
			ino[n] = strtoul(link + 8, NULL, 10);
		n++;
	}
	if (d)
		closedir(d);
	return n;
}

static int count_sockets(void)
{
	return list_sockets(NULL);
}

/* How many of @a's @na sockets are among @b's @nb. */
static int common(const unsigned long *a, int na, const unsigned long *b,
		  int nb)
{
	int n = 0;

	for (int i = 0; i < na && i < MAX_SOCKS; i++)
		for (int j = 0; j < nb && j < MAX_SOCKS; j++)
			n += a[i] == b[j];
	return n;
}

static void client(struct tf_pair *p, bool inl)
{
	tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_FLAGS,
				  .flags = TF_SESSION_NO_REUSE};
	uint16_t port = (uint16_t)tf_test_recv_u64(p);
	unsigned long prev[MAX_SOCKS], now[MAX_SOCKS] = {0};
	int n_prev, n_now = 0, socks;
	bool qp_socks;
	tf_node_t *node = node_full(p, inl);
	bool rec = recycles(p, inl);
	tf_node_stats_t st;

	/* The verbs provider's QPs, and the soft tcp transport's, have
	 * sockets of their own. */
	qp_socks = strcmp(p->caps.provider, "soft") ||
		   !strcmp(p->caps.transport, "tcp");
	for (int i = 0; i < N; i++) {
		tf_session_t *s;
		int ret = tf_session_connect(node, st_host(), port, &sp, &s);

		CHECKF(ret == 0, "session %d: %s", i, tf_strerror(ret));
		CHECK(!tf_session_reused(s));
		/* Inline, the connect made the next entry itself, unless the
		 * connection will give its own back. */
		if (inl) {
			st = stats(node);
			CHECKF(st.stock_entries == (rec ? CAP - 1 : CAP),
			       "session %d: %llu entries after the connect", i,
			       (unsigned long long)st.stock_entries);
		}
		/* The last session leaves a receive posted: its QP must not
		 * go back, or that receive would take the next peer's SEND. */
		if (rec && i == N - 1) {
			int b;
			void *m;

			CHECK_OK(tf_session_rent(s, 64, &b, &m));
			CHECK_OK(tf_session_recv(s, b, 0, 64, 7));
		}
		tf_session_close(s);
		if (rec)
			check_recycled(node, i, i < N - 1);
		st_stock_settle(node);
		tf_test_sync(p);
		/* The socket made ahead takes the place of the one that
		 * closed. */
		st = stats(node);
		CHECKF(st.stock_sockets == 1,
		       "session %d: %llu sockets made ahead", i,
		       (unsigned long long)st.stock_sockets);
		/* Sockets only (a refill thread makes other fds meanwhile),
		 * and not where QPs have sockets of their own (soft tcp):
		 * as many as after the last session, and the one made ahead
		 * then was taken (closed with its session), not kept. */
		n_prev = n_now;
		memcpy(prev, now, sizeof(prev));
		n_now = list_sockets(now);
		if (i > 0 && !qp_socks) {
			CHECKF(n_now == n_prev,
			       "session %d: %d sockets open, %d after the "
			       "last",
			       i, n_now, n_prev);
			CHECKF(common(prev, n_prev, now, n_now) ==
				       n_prev - (int)st.stock_sockets,
			       "session %d: %d of %d sockets still open, %llu "
			       "made ahead",
			       i, common(prev, n_prev, now, n_now), n_prev,
			       (unsigned long long)st.stock_sockets);
		}
	}
	check_hits(node, "client");
	st = stats(node);
	CHECK(st.qp_new == N);
	socks = count_sockets();
	tf_node_destroy(node);
	CHECKF(qp_socks || count_sockets() == socks - (int)st.stock_sockets,
	       "%d sockets open after the node, %d before, %llu made ahead",
	       count_sockets(), socks, (unsigned long long)st.stock_sockets);
}

/* A process per setting: the configuration is read once per process. */
static int run(bool inl)
{
	struct tf_pair p;

	setenv("TOLLFREE_SESSION_STOCK_REFILL", inl ? "inline" : "thread", 1);
	tf_test_pair_open(&p);
	if (p.side == TF_SIDE_B)
		server(&p, inl);
	else
		client(&p, inl);
	return tf_test_pair_end(&p);
}

static int bad_setting(void)
{
	tf_context_t *ctx;
	tf_node_t *node = NULL;

	setenv("TOLLFREE_SESSION_STOCK_REFILL", "sometimes", 1);
	CHECK_OK(tf_context_open(NULL, &ctx));
	CHECK(tf_node_create(ctx, NULL, &node) == -EINVAL && !node);
	tf_context_close(ctx);
	return 0;
}

int main(void)
{
	int rc = 0;

	tf_test_begin("conf_session_stock");
	setenv("TOLLFREE_SESSION_STOCK", "3", 1);
	/* Two machines in peer mode run one pair: inline, the default on
	 * the project's 2-CPU guests. */
	for (int m = 0; m < (tf_test_peer_mode() ? 1 : 3); m++) {
		int st, r;
		pid_t pid = fork();

		CHECK(pid >= 0);
		if (!pid)
			exit(m == 2 ? bad_setting() : run(m == 0));
		CHECK(waitpid(pid, &st, 0) == pid);
		r = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
		/* Fail over skip over pass. */
		if (r == 1 || (r == 77 && rc == 0))
			rc = r;
		else if (r && r != 77)
			rc = 1;
	}
	return rc;
}
