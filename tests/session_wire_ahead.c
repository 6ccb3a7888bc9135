/* SPDX-License-Identifier: MIT */
/*
 * session_wire_ahead: reading ahead on the bootstrap socket
 * (tf__wire_rx_step_ahead) hands the next reads exactly the stream's
 * bytes, in order, and never more than it was allowed to take.  Over a
 * socketpair, two messages in one write:
 *  - read with no limit, the first read takes both: the first message is
 *    whole, the second waits in the rx and is whole at the next read
 *    without another byte from the socket;
 *  - read with the limit of one fixed header, the first read takes the
 *    second's header only, and the second read takes its body;
 *  - a message alone leaves nothing behind;
 *  - the peer's end behind what was read ahead comes after it;
 *  - a second message split over two writes (the second write made after
 *    the first read) is whole after the second.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "session_int.h"
#include "tf_test_unit.h"

static void two_msgs(struct tf_wire_msg *a, struct tf_wire_msg *b)
{
	uint8_t nonce[TF_WIRE_NONCE];

	for (unsigned i = 0; i < sizeof(nonce); i++)
		nonce[i] = (uint8_t)(i + 1);
	tf__wire_init(a, TF_WIRE_HELLO);
	tf__wire_put_bytes(a, nonce, sizeof(nonce));
	tf__wire_put_u8(a, 0);
	CHECK_OK(tf__wire_finish(a));
	tf__wire_init(b, TF_WIRE_CLOSE);
	for (unsigned i = 0; i < 40; i++)
		tf__wire_put_u8(b, (uint8_t)(0xa0 + i));
	CHECK_OK(tf__wire_finish(b));
}

static void write_all(int fd, const void *p, size_t n)
{
	CHECK(write(fd, p, n) == (ssize_t)n);
}

/* @rx holds message @m whole. */
static void check_msg(const struct tf_wire_rx *rx, const struct tf_wire_msg *m)
{
	CHECK(rx->h.hdr_size == TF_WIRE_HDR_SIZE);
	CHECK(TF_WIRE_HDR_SIZE + rx->h.size == m->len);
	CHECK(!memcmp(rx->hdr, m->buf, TF_WIRE_HDR_SIZE));
	CHECK(!memcmp(rx->body, m->buf + TF_WIRE_HDR_SIZE, rx->h.size));
}

static void pair(int sv[2])
{
	CHECK_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
}

int main(void)
{
	static struct tf_wire_msg a, b;
	static struct tf_wire_rx rx;
	static uint8_t both[2 * sizeof(a.buf)];
	int sv[2];

	tf_test_begin("session_wire_ahead");
	two_msgs(&a, &b);
	memcpy(both, a.buf, a.len);
	memcpy(both + a.len, b.buf, b.len);

	/* No limit: both in one read. */
	pair(sv);
	memset(&rx, 0, sizeof(rx));
	write_all(sv[0], both, a.len + b.len);
	CHECK(tf__wire_rx_step_ahead(sv[1], &rx, SIZE_MAX) == 1);
	check_msg(&rx, &a);
	CHECK(rx.ahead_len == b.len);
	tf__wire_rx_reset(&rx);
	CHECK(rx.ahead_len == b.len); /* the reset keeps it */
	close(sv[0]);		      /* nothing more from the socket */
	CHECK(tf__wire_rx_step(sv[1], &rx) == 1);
	check_msg(&rx, &b);
	CHECK(rx.ahead_len == 0);
	tf__wire_rx_reset(&rx);
	/* The peer's end comes after what was read ahead. */
	CHECK(tf__wire_rx_step(sv[1], &rx) == -ECONNRESET);
	close(sv[1]);

	/* One fixed header ahead: the second's body is read after. */
	pair(sv);
	memset(&rx, 0, sizeof(rx));
	write_all(sv[0], both, a.len + b.len);
	CHECK(tf__wire_rx_step_ahead(sv[1], &rx, TF_WIRE_HDR_SIZE) == 1);
	check_msg(&rx, &a);
	CHECK(rx.ahead_len == TF_WIRE_HDR_SIZE);
	tf__wire_rx_reset(&rx);
	CHECK(tf__wire_rx_step(sv[1], &rx) == 1);
	check_msg(&rx, &b);
	CHECK(rx.ahead_len == 0);
	close(sv[0]);
	close(sv[1]);

	/* Alone: nothing behind it. */
	pair(sv);
	memset(&rx, 0, sizeof(rx));
	write_all(sv[0], a.buf, a.len);
	CHECK(tf__wire_rx_step_ahead(sv[1], &rx, SIZE_MAX) == 1);
	check_msg(&rx, &a);
	CHECK(rx.ahead_len == 0);
	tf__wire_rx_reset(&rx);
	CHECK(tf__wire_rx_step_ahead(sv[1], &rx, SIZE_MAX) == 0);
	close(sv[0]);
	close(sv[1]);

	/* The second message split: 5 bytes of it with the first, the rest
	 * in a later write. */
	pair(sv);
	memset(&rx, 0, sizeof(rx));
	write_all(sv[0], both, a.len + 5);
	CHECK(tf__wire_rx_step_ahead(sv[1], &rx, SIZE_MAX) == 1);
	check_msg(&rx, &a);
	CHECK(rx.ahead_len == 5);
	tf__wire_rx_reset(&rx);
	CHECK(tf__wire_rx_step(sv[1], &rx) == 0);
	CHECK(rx.ahead_len == 0 && rx.got == 5);
	write_all(sv[0], both + a.len + 5, b.len - 5);
	CHECK(tf__wire_rx_step(sv[1], &rx) == 1);
	check_msg(&rx, &b);
	close(sv[0]);
	close(sv[1]);
	return tf_test_end();
}
