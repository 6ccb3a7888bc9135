/* SPDX-License-Identifier: MIT */
/*
 * bench_sock.c - the socket helpers of tollfree-bench, one copy for every
 * subcommand: moving a whole buffer (lat's socketpair, crr's bench channel
 * and TCP references), "HOST:PORT" parsing, listening and connecting.
 * Errors come back as -errno; the callers say what failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "bench.h"

int sock_full(int fd, void *buf, size_t len, bool wr, int timeout_ms)
{
	uint8_t *p = buf;

	while (len) {
		/* MSG_NOSIGNAL: a peer that died is an error, not SIGPIPE. */
		ssize_t n = wr ? send(fd, p, len, MSG_NOSIGNAL)
			       : recv(fd, p, len, 0);

		if (n < 0 && errno == EINTR)
			continue;
		/* A non-blocking socket, or a blocking one whose
		 * SO_RCVTIMEO/SO_SNDTIMEO expired: wait in poll. */
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			struct pollfd pfd = {.fd = fd,
					     .events = wr ? POLLOUT : POLLIN};
			int r = poll(&pfd, 1, timeout_ms);

			if (r == 0)
				return -ETIMEDOUT;
			if (r < 0 && errno != EINTR)
				return -errno;
			continue;
		}
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int sock_split_hostport(const char *arg, char *host, size_t hlen,
			uint16_t *port)
{
	const char *colon = strrchr(arg, ':');
	unsigned long v;
	size_t n;
	char *end;

	if (!colon || colon == arg)
		goto bad;
	n = (size_t)(colon - arg);
	if (arg[0] == '[' && n >= 2 && arg[n - 1] == ']') {
		arg++;
		n -= 2;
	}
	if (n + 1 > hlen)
		goto bad;
	memcpy(host, arg, n);
	host[n] = '\0';
	errno = 0;
	v = strtoul(colon + 1, &end, 10);
	if (errno || *end || end == colon + 1 || v > 65535)
		goto bad;
	*port = (uint16_t)v;
	return 0;
bad:
	fail("bad address '%s' (want HOST:PORT, numeric)", arg);
	return -1;
}

int sock_listen(const char *host, uint16_t port, uint16_t *bound)
{
	return sock_listen_opt(host, port, false, bound);
}

int sock_listen_opt(const char *host, uint16_t port, bool reuseport,
		    uint16_t *bound)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICHOST | AI_PASSIVE};
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct addrinfo *ai;
	char ps[8];
	int fd, one = 1;

	/* getsockname fills it; zeroed for the static analyzer, which
	 * does not see that. */
	memset(&ss, 0, sizeof(ss));
	snprintf(ps, sizeof(ps), "%u", port);
	if (getaddrinfo(host, ps, &hints, &ai)) {
		fail("bad listen address '%s'", host);
		return -1;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	/* SO_REUSEADDR: tight connect/close loops leave thousands of
	 * sockets in TIME_WAIT, which must not keep the next run from
	 * binding. */
	if (fd < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    (reuseport &&
	     setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one))) ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) ||
	    listen(fd, reuseport ? 1024 : 128) ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl)) {
		fail("listening on %s:%u: %m", host, port);
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return -1;
	}
	freeaddrinfo(ai);
	*bound = ntohs(ss.ss_family == AF_INET6
			       ? ((struct sockaddr_in6 *)&ss)->sin6_port
			       : ((struct sockaddr_in *)&ss)->sin_port);
	return fd;
}

int sock_set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK)) {
		fail("fcntl: %m");
		return -errno;
	}
	return 0;
}

void sock_nodelay(int fd, int timeout_ms)
{
	struct timeval tv = {.tv_sec = timeout_ms / 1000,
			     .tv_usec = (timeout_ms % 1000) * 1000};
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

int sock_connect(const char *host, uint16_t port, int timeout_ms)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICHOST};
	struct addrinfo *ai;
	char ps[8];
	int fd;

	snprintf(ps, sizeof(ps), "%u", port);
	if (getaddrinfo(host, ps, &hints, &ai))
		return -EINVAL;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		fd = -errno;
	} else if (connect(fd, ai->ai_addr, ai->ai_addrlen)) {
		int e = -errno;

		close(fd);
		fd = e;
	} else {
		sock_nodelay(fd, timeout_ms);
	}
	freeaddrinfo(ai);
	return fd;
}

/* ------------------------------------------------------------ busy-polling
 * The references that spin, as a busy-polling server or client would:
 * every call is non-blocking (MSG_DONTWAIT, a non-blocking connect) and
 * retried at once, so no wait ever sleeps; it yields as the library's
 * spins do (bench_spin_pause, which reads the clock each turn, as the
 * library's spins do).  The deadline for a dead peer is looked at every
 * WAIT_CHECK_EVERY turns. */

int sock_full_spin(int fd, void *buf, size_t len, bool wr, int timeout_ms)
{
	uint64_t deadline = 0, yielded = now_ns();
	unsigned spins = 0;
	uint8_t *p = buf;

	while (len) {
		ssize_t n = wr ? send(fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL)
			       : recv(fd, p, len, MSG_DONTWAIT);

		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n == 0)
			return -EPIPE;
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
		bench_spin_pause(&yielded);
		if (++spins % WAIT_CHECK_EVERY)
			continue;
		if (!deadline)
			deadline = now_ns() + (uint64_t)timeout_ms * 1000000;
		else if (now_ns() > deadline)
			return -ETIMEDOUT;
	}
	return 0;
}

int sock_connect_spin(const char *host, uint16_t port, int timeout_ms)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICHOST};
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000;
	uint64_t yielded = now_ns();
	struct pollfd pfd = {.events = POLLOUT};
	struct addrinfo *ai;
	socklen_t sl = sizeof(int);
	int fd, err = 0, one = 1;
	char ps[8];

	snprintf(ps, sizeof(ps), "%u", port);
	if (getaddrinfo(host, ps, &hints, &ai))
		return -EINVAL;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    0);
	if (fd < 0) {
		err = -errno;
		goto out;
	}
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) && errno != EINPROGRESS) {
		err = -errno;
		goto err_close;
	}
	/* A zero-timeout poll per turn: the handshake completes in the
	 * kernel while this side spins, as it would in an event loop that
	 * never sleeps. */
	pfd.fd = fd;
	while (!poll(&pfd, 1, 0)) {
		bench_spin_pause(&yielded);
		if (now_ns() > deadline) {
			err = -ETIMEDOUT;
			goto err_close;
		}
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) || err) {
		err = err ? -err : -errno;
		goto err_close;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	freeaddrinfo(ai);
	return fd;

err_close:
	close(fd);
out:
	freeaddrinfo(ai);
	return err;
}
