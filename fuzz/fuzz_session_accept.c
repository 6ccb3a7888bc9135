/* SPDX-License-Identifier: MIT */
/*
 * fuzz_session_accept - the server side of the session bootstrap, through
 * its public entry point tf_listener_accept: the HELLO and OPEN parsers
 * (server_hello, server_open in src/session/conn.c) are inline there,
 * and the QP address blob inside OPEN reaches the soft provider's decoder.
 *
 * Each input is what a client sends on a fresh TCP connection to a
 * listener (then it half-closes): the listener is served until it drops
 * the connection or opens a session (closed at once).
 *
 * Isolation: a decodable blob makes the server connect its QP to the
 * address in it.  The fuzzer therefore runs in a network namespace of its
 * own (unshare(CLONE_NEWNET), root needed), where only its own loopback
 * exists, and the context uses the tcp transport only (shm would open
 * /proc/<pid>/fd of the process the blob names).  Nothing leaves the
 * process's namespace.
 *
 * Input layout: byte 0 bit 0 selects the listener (0: no key, 1: a
 * pre-shared key, so the OPEN must carry a MAC, which the fuzzer cannot
 * forge: it exercises the reject path); the rest is the stream.
 */
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_common.h"

static tf_context_t *ctx;
static tf_node_t *node[2];
static tf_listener_t *lis[2];
static uint16_t port[2];

static void die(const char *what, int err)
{
	fprintf(stderr, "fuzz_session_accept: %s: %s\n", what,
		err < 0 ? tf_strerror(err) : strerror(errno));
	abort();
}

/* Bring up the new namespace's loopback (it starts down). */
static void lo_up(void)
{
	struct ifreq ifr = {0};
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		die("socket", 0);
	strcpy(ifr.ifr_name, "lo");
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
		die("SIOCGIFFLAGS lo", 0);
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
		die("SIOCSIFFLAGS lo", 0);
	close(fd);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static const char key[] = "fuzz key";
	tf_context_params_t cp = {.field_mask = TF_CONTEXT_PARAM_PROVIDER |
						TF_CONTEXT_PARAM_TRANSPORT |
						TF_CONTEXT_PARAM_TCP_ADDR,
				  .provider = "soft",
				  .transport = "tcp",
				  .tcp_addr = "127.0.0.1"};
	int ret;

	(void)argc;
	(void)argv;
	if (unshare(CLONE_NEWNET))
		die("unshare(CLONE_NEWNET) (run as root)", 0);
	lo_up();
	fuzz_quiet();
	ret = tf_context_open(&cp, &ctx);
	if (ret)
		die("tf_context_open", ret);
	for (int i = 0; i < 2; i++) {
		tf_node_params_t np = {
			.field_mask =
				TF_NODE_PARAM_PSK | TF_NODE_PARAM_CROSSOVER |
				TF_NODE_PARAM_TIMEOUT | TF_NODE_PARAM_QP_CACHE,
			.psk = key,
			.psk_len = i ? sizeof(key) - 1 : 0,
			.crossover = 4096,
			/* Short: a stuck handshake costs this per input. */
			.timeout_ms = 50,
			.qp_cache = 0};

		ret = tf_node_create(ctx, &np, &node[i]);
		if (ret)
			die("tf_node_create", ret);
		ret = tf_listener_create(node[i], NULL, &lis[i]);
		if (ret)
			die("tf_listener_create", ret);
		port[i] = tf_listener_port(lis[i]);
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int i, fd, rounds;

	if (size < 1)
		return 0;
	i = data[0] & 1;
	sa.sin_port = htons(port[i]);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket", 0);
	/* libFuzzer's -timeout timer (SIGALRM) can interrupt connect: the
	 * connection then completes in the background. */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		struct pollfd pfd = {.fd = fd, .events = POLLOUT};
		socklen_t elen = sizeof(int);
		int err = errno;

		if (err == EINTR || err == EALREADY) {
			while (poll(&pfd, 1, 5000) < 0 && errno == EINTR)
				;
			if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen))
				err = errno;
		}
		if (err && err != EISCONN) {
			errno = err;
			die("connect to the listener", 0);
		}
	}
	/* -max_len keeps this far below the socket buffers. */
	for (size_t off = 1; off < size;) {
		ssize_t n = write(fd, data + off, size - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("write", 0);
		off += (size_t)n;
	}
	shutdown(fd, SHUT_WR);
	/* Serve until the server hangs up on us (it read everything and
	 * dropped or rejected us) or a session opens; bounded, since a
	 * session the server is happy with never ends by itself. */
	for (rounds = 0; rounds < 50; rounds++) {
		struct pollfd pfd[2] = {
			{.fd = fd, .events = POLLIN},
			{.fd = tf_listener_fd(lis[i]), .events = POLLIN}};
		tf_session_t *s = NULL;
		char buf[512];
		ssize_t n;
		int ret = tf_listener_accept(lis[i], NULL, 0, &s);

		FUZZ_CHECK(ret == 0 || ret == -EAGAIN);
		if (!ret) {
			FUZZ_CHECK(s != NULL);
			close(fd);
			fd = -1;
			tf_session_close(s);
			break;
		}
		/* Drain what the server sent; EOF means it is done. */
		n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN))
			break;
		if (n < 0)
			poll(pfd, 2, 10);
	}
	if (fd >= 0)
		close(fd);
	/* Let the listener notice the close, so connections do not pile
	 * up across inputs. */
	(void)tf_listener_accept(lis[i], NULL, 0, &(tf_session_t *){NULL});
	return 0;
}
