/* SPDX-License-Identifier: MIT */
/*
 * session_hostname: host names work where numeric addresses do.  Side B
 * listens on "localhost"; side A connects to "localhost", then again to
 * the same name and to the numeric address the name resolved to, and
 * both later sessions take the kept connection (it is kept under the
 * address, not the name).  Where "localhost" has several addresses (::1
 * and 127.0.0.1), a second listener on the last of them only is reached
 * by name too: the client tries the addresses in order, and the refused
 * ones are not warnings.  A name that does not resolve fails with
 * -EHOSTUNREACH and a log line that names it, for the client and for a
 * listener; an empty host is -EINVAL.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "session_util.h"

#define BAD_NAME "nonexistent.invalid" /* RFC 6761: never resolves */

/* The addresses of "localhost" as numeric strings, in resolver order. */
static int localhost_addrs(char out[][INET6_ADDRSTRLEN], int max)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM};
	struct addrinfo *res, *ai;
	int n = 0;

	CHECKF(!getaddrinfo("localhost", NULL, &hints, &res),
	       "this host cannot resolve localhost");
	for (ai = res; ai && n < max; ai = ai->ai_next) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ai->ai_addr;
		struct sockaddr_in *s4 = (struct sockaddr_in *)ai->ai_addr;
		bool dup = false;

		if (ai->ai_family == AF_INET6)
			CHECK(inet_ntop(AF_INET6, &s6->sin6_addr, out[n],
					INET6_ADDRSTRLEN));
		else if (ai->ai_family == AF_INET)
			CHECK(inet_ntop(AF_INET, &s4->sin_addr, out[n],
					INET6_ADDRSTRLEN));
		else
			continue;
		/* A resolver may list an address twice. */
		for (int i = 0; i < n; i++)
			dup |= !strcmp(out[i], out[n]);
		n += !dup;
	}
	freeaddrinfo(res);
	CHECK(n > 0);
	return n;
}

/* Whether a socket can be bound to @addr here (an IPv6 loopback may be
 * listed and yet absent). */
static bool bindable(const char *addr)
{
	struct sockaddr_in6 s6 = {.sin6_family = AF_INET6};
	struct sockaddr_in s4 = {.sin_family = AF_INET};
	bool v6 = inet_pton(AF_INET6, addr, &s6.sin6_addr) == 1;
	int fd, r;

	if (!v6)
		CHECK(inet_pton(AF_INET, addr, &s4.sin_addr) == 1);
	fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return false;
	r = v6 ? bind(fd, (struct sockaddr *)&s6, sizeof(s6))
	       : bind(fd, (struct sockaddr *)&s4, sizeof(s4));
	close(fd);
	return r == 0;
}

static char last_log[512];
static int n_logged;

static void watch_log(tf_log_level_t level, const char *subsys, const char *msg,
		      void *arg)
{
	(void)subsys;
	(void)arg;
	if (level <= TF_LOG_WARN) {
		snprintf(last_log, sizeof(last_log), "%s", msg);
		n_logged++;
	}
}

/* Unknown and empty names, on side A. */
static void bad_names(tf_node_t *node)
{
	tf_listener_params_t lp = {.field_mask = TF_LISTENER_PARAM_ADDR,
				   .addr = BAD_NAME};
	tf_listener_t *l;
	tf_session_t *s;

	tf_log_set_handler(watch_log, NULL);
	n_logged = 0;
	CHECK_ERR(tf_session_connect(node, BAD_NAME, 1, NULL, &s),
		  -EHOSTUNREACH);
	CHECKF(n_logged == 1 &&
		       strstr(last_log, "cannot resolve '" BAD_NAME "'"),
	       "%d lines, last '%s'", n_logged, last_log);
	n_logged = 0;
	CHECK_ERR(tf_listener_create(node, &lp, &l), -EHOSTUNREACH);
	CHECKF(n_logged == 1 &&
		       strstr(last_log, "cannot resolve '" BAD_NAME "'"),
	       "%d lines, last '%s'", n_logged, last_log);
	n_logged = 0;
	CHECK_ERR(tf_session_connect(node, "", 1, NULL, &s), -EINVAL);
	CHECK(n_logged == 1);
	/* Back to the harness's handler, which counts what is unexpected. */
	tf_test_begin("session_hostname");
}

static void server(struct tf_pair *p, tf_node_t *node)
{
	tf_listener_params_t lp = {.field_mask = TF_LISTENER_PARAM_ADDR,
				   .addr = "localhost"};
	tf_listener_t *l, *l2 = NULL;
	char last[INET6_ADDRSTRLEN];

	CHECK_OK(tf_listener_create(node, &lp, &l));
	tf_test_send_u64(p, tf_listener_port(l));
	for (int i = 0; i < 3; i++) {
		tf_session_t *s = st_accept(l, 0);

		CHECK(tf_session_reused(s) == (i > 0));
		CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
		tf_session_close(s);
	}
	/* The last address of the name, alone. */
	tf_test_recv_msg(p, last, sizeof(last));
	if (last[0]) {
		tf_session_t *s;

		lp.addr = last;
		CHECK_OK(tf_listener_create(node, &lp, &l2));
		tf_test_send_u64(p, tf_listener_port(l2));
		s = st_accept(l2, 0);
		CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
		tf_session_close(s);
	}
	tf_test_sync(p);
	tf_listener_destroy(l2);
	tf_listener_destroy(l);
}

static void client_once(tf_node_t *node, const char *host, uint16_t port,
			int reused)
{
	tf_session_t *s;
	int ret = tf_session_connect(node, host, port, NULL, &s);

	CHECKF(ret == 0, "connect to %s port %u: %s", host, port,
	       tf_strerror(ret));
	CHECKF(tf_session_reused(s) == reused, "%s: reused %d, expected %d",
	       host, tf_session_reused(s), reused);
	tf_session_close(s);
}

static void client(struct tf_pair *p, tf_node_t *node)
{
	char addrs[8][INET6_ADDRSTRLEN], last[INET6_ADDRSTRLEN] = "";
	uint16_t port = (uint16_t)tf_test_recv_u64(p);
	int n = localhost_addrs(addrs, 8), first = -1;

	/* The listener is on the first address of the name that binds;
	 * the client reaches the same one first. */
	for (int i = 0; i < n && first < 0; i++)
		if (bindable(addrs[i]))
			first = i;
	CHECK(first >= 0);
	tf_test_info("localhost: %d address(es), listening on %s", n,
		     addrs[first]);
	client_once(node, "localhost", port, 0);
	client_once(node, "localhost", port, 1);
	client_once(node, addrs[first], port, 1);
	if (n > 1 && first < n - 1 && bindable(addrs[n - 1]))
		snprintf(last, sizeof(last), "%s", addrs[n - 1]);
	tf_test_send_msg(p, last, sizeof(last));
	if (last[0]) {
		uint16_t port2 = (uint16_t)tf_test_recv_u64(p);

		/* The first addresses refuse; no warning may be logged. */
		client_once(node, "localhost", port2, 0);
	} else {
		tf_test_partial_skip_host("localhost has one usable address: "
					  "the fallback to the next address "
					  "is not exercised");
	}
	bad_names(node);
	tf_test_sync(p);
}

int main(void)
{
	struct tf_pair p;
	tf_node_t *node;

	tf_test_begin("session_hostname");
	tf_test_pair_open(&p);
	node = st_node(&p, -1, NULL, 0);
	if (p.side == TF_SIDE_B)
		server(&p, node);
	else
		client(&p, node);
	tf_node_destroy(node);
	return tf_test_pair_end(&p);
}
