/* SPDX-License-Identifier: MIT */
/*
 * wire.c - encoding, decoding and socket I/O of the session bootstrap
 * messages (format in wire_int.h), and the HMAC of the key proof.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "provider.h"
#include "wire_int.h"

void tf__wire_init(struct tf_wire_msg *m, enum tf_wire_op op)
{
	struct tf_wire_hdr h = {.magic = TF_WIRE_MAGIC,
				.version = TF_WIRE_VERSION,
				.op = (uint8_t)op,
				.hdr_size = TF_WIRE_HDR_SIZE};

	tf__wire_hdr_encode(&h, m->buf);
	m->len = TF_WIRE_HDR_SIZE;
	m->overflow = false;
}

void tf__wire_put_bytes(struct tf_wire_msg *m, const void *b, size_t n)
{
	/* An overflow is remembered and reported once, by finish, so that
	 * encoders need not check every put. */
	if (n > sizeof(m->buf) - m->len) {
		m->overflow = true;
		return;
	}
	if (n)
		memcpy(m->buf + m->len, b, n);
	m->len += n;
}

void tf__wire_put_u8(struct tf_wire_msg *m, uint8_t v)
{
	tf__wire_put_bytes(m, &v, 1);
}

void tf__wire_put_u16(struct tf_wire_msg *m, uint16_t v)
{
	uint8_t b[2] = {(uint8_t)(v >> 8), (uint8_t)v};

	tf__wire_put_bytes(m, b, 2);
}

void tf__wire_put_u32(struct tf_wire_msg *m, uint32_t v)
{
	uint8_t b[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16),
			(uint8_t)(v >> 8), (uint8_t)v};

	tf__wire_put_bytes(m, b, 4);
}

void tf__wire_put_u64(struct tf_wire_msg *m, uint64_t v)
{
	tf__wire_put_u32(m, (uint32_t)(v >> 32));
	tf__wire_put_u32(m, (uint32_t)v);
}

static uint16_t rd16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t rd32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
	       ((uint32_t)p[2] << 8) | p[3];
}

static void wr16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void wr32(uint8_t *p, uint32_t v)
{
	wr16(p, (uint16_t)(v >> 16));
	wr16(p + 2, (uint16_t)v);
}

int tf__wire_finish(struct tf_wire_msg *m)
{
	if (m->overflow) {
		tf_log_error("session", "wire message body over %d bytes",
			     TF_WIRE_MAX_BODY);
		return -EMSGSIZE;
	}
	wr32(m->buf + 12, (uint32_t)(m->len - TF_WIRE_HDR_SIZE));
	return 0;
}

void tf__wire_hdr_encode(const struct tf_wire_hdr *h, uint8_t *p)
{
	wr32(p, h->magic);
	p[4] = h->version;
	p[5] = h->op;
	wr16(p + 6, h->flags);
	wr16(p + 8, h->hdr_size);
	wr16(p + 10, h->reserved);
	wr32(p + 12, h->size);
}

int tf__wire_hdr_decode(const uint8_t *p, struct tf_wire_hdr *h)
{
	h->magic = rd32(p);
	h->version = p[4];
	h->op = p[5];
	h->flags = rd16(p + 6);
	h->hdr_size = rd16(p + 8);
	h->reserved = rd16(p + 10);
	h->size = rd32(p + 12);
	if (h->magic != TF_WIRE_MAGIC) {
		tf_log_warn("session", "bad wire magic 0x%08x", h->magic);
		return -TF_EWIRE;
	}
	/* The version is checked before the sizes so that a peer of another
	 * version gets the precise error even if its header grew. */
	if (h->version != TF_WIRE_VERSION) {
		tf_log_warn("session", "unsupported wire version %u (want %u)",
			    h->version, TF_WIRE_VERSION);
		return -TF_EVERSION;
	}
	if (h->hdr_size < TF_WIRE_HDR_SIZE || h->hdr_size > TF_WIRE_MAX_HDR) {
		tf_log_warn("session", "bad wire hdr_size %u", h->hdr_size);
		return -TF_EWIRE;
	}
	if (h->size > TF_WIRE_MAX_BODY) {
		tf_log_warn("session", "wire body of %u bytes exceeds %d",
			    h->size, TF_WIRE_MAX_BODY);
		return -TF_EWIRE;
	}
	if (h->op < TF_WIRE_HELLO || h->op > TF_WIRE_OP_MAX) {
		tf_log_warn("session", "unknown wire op %u", h->op);
		return -TF_EWIRE;
	}
	return 0;
}

void tf__wire_cur_init(struct tf_wire_cur *c, const struct tf_wire_rx *rx)
{
	c->p = rx->body;
	c->left = rx->h.size;
	c->bad = false;
}

const uint8_t *tf__wire_get_bytes(struct tf_wire_cur *c, size_t n)
{
	const uint8_t *p;

	if (c->bad || n > c->left) {
		c->bad = true;
		return NULL;
	}
	p = c->p;
	c->p += n;
	c->left -= n;
	return p;
}

uint8_t tf__wire_get_u8(struct tf_wire_cur *c)
{
	const uint8_t *p = tf__wire_get_bytes(c, 1);

	return p ? p[0] : 0;
}

uint16_t tf__wire_get_u16(struct tf_wire_cur *c)
{
	const uint8_t *p = tf__wire_get_bytes(c, 2);

	return p ? rd16(p) : 0;
}

uint32_t tf__wire_get_u32(struct tf_wire_cur *c)
{
	const uint8_t *p = tf__wire_get_bytes(c, 4);

	return p ? rd32(p) : 0;
}

uint64_t tf__wire_get_u64(struct tf_wire_cur *c)
{
	uint64_t hi = tf__wire_get_u32(c);

	return (hi << 32) | tf__wire_get_u32(c);
}

static int wait_fd(int fd, short events, int timeout_ms)
{
	struct pollfd pfd = {.fd = fd, .events = events};
	int r;

	do {
		r = poll(&pfd, 1, timeout_ms);
	} while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	return r ? 0 : -ETIMEDOUT;
}

static int remaining_ms(uint64_t deadline)
{
	uint64_t now = tf__now_ns();

	if (now >= deadline)
		return 0;
	return (int)((deadline - now + 999999) / 1000000);
}

int tf__wire_send(int fd, const struct tf_wire_msg *m, int timeout_ms)
{
	uint64_t deadline = tf__now_ns() + (uint64_t)timeout_ms * 1000000;
	size_t off = 0;

	while (off < m->len) {
		/* MSG_NOSIGNAL: a peer that went away must give -EPIPE, not
		 * kill the process with SIGPIPE. */
		ssize_t n = send(fd, m->buf + off, m->len - off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		int ret;

		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		ret = wait_fd(fd, POLLOUT, remaining_ms(deadline));
		if (ret)
			return ret;
	}
	return 0;
}

void tf__wire_rx_reset(struct tf_wire_rx *rx)
{
	rx->got = 0;
	rx->have_hdr = false;
}

int tf__wire_rx_step(int fd, struct tf_wire_rx *rx)
{
	for (;;) {
		size_t want,
			hlen = rx->have_hdr ? rx->h.hdr_size : TF_WIRE_HDR_SIZE;
		uint8_t *dst;
		ssize_t n;
		int ret;

		/* First the fixed header, then the rest of the sender's
		 * header (skipped), then the body. */
		if (rx->got < hlen) {
			dst = rx->hdr + rx->got;
			want = hlen - rx->got;
		} else if (rx->got < hlen + rx->h.size) {
			dst = rx->body + (rx->got - hlen);
			want = hlen + rx->h.size - rx->got;
		} else {
			return 1;
		}
		n = recv(fd, dst, want, MSG_DONTWAIT);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return -errno;
		}
		rx->got += (size_t)n;
		if (!rx->have_hdr && rx->got == TF_WIRE_HDR_SIZE) {
			ret = tf__wire_hdr_decode(rx->hdr, &rx->h);
			if (ret)
				return ret;
			rx->have_hdr = true;
		}
		if (rx->have_hdr && rx->got == rx->h.hdr_size + rx->h.size)
			return 1;
	}
}

int tf__wire_recv(int fd, struct tf_wire_rx *rx, int timeout_ms)
{
	uint64_t deadline = tf__now_ns() + (uint64_t)timeout_ms * 1000000;

	for (;;) {
		int ret = tf__wire_rx_step(fd, rx);

		if (ret)
			return ret;
		ret = wait_fd(fd, POLLIN, remaining_ms(deadline));
		if (ret)
			return ret;
	}
}

int tf__wire_mac(const void *key, size_t key_len, const char *label,
		 const uint8_t *a, const uint8_t *b, uint8_t out[TF_WIRE_MAC])
{
	uint8_t data[16 + 2 * TF_WIRE_NONCE];
	size_t llen = strlen(label);
	unsigned out_len = TF_WIRE_MAC;

	if (llen > 16 || key_len > INT32_MAX)
		return -EINVAL;
	memcpy(data, label, llen);
	memcpy(data + llen, a, TF_WIRE_NONCE);
	memcpy(data + llen + TF_WIRE_NONCE, b, TF_WIRE_NONCE);
	if (!HMAC(EVP_sha256(), key, (int)key_len, data,
		  llen + 2 * TF_WIRE_NONCE, out, &out_len) ||
	    out_len != TF_WIRE_MAC) {
		tf_log_error("session", "HMAC-SHA256 failed in libcrypto");
		return -EIO;
	}
	return 0;
}

bool tf__wire_mac_equal(const uint8_t *a, const uint8_t *b)
{
	return CRYPTO_memcmp(a, b, TF_WIRE_MAC) == 0;
}
