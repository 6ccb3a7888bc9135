/* SPDX-License-Identifier: MIT */
/*
 * wire.c - encoding, decoding and socket I/O of the session bootstrap
 * messages (format in wire_int.h).  Sealing is in seal.c.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

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
	if (m->overflow ||
	    m->len - TF_WIRE_HDR_SIZE > TF_WIRE_MAX_BODY - TF_WIRE_TAG) {
		tf_log_error("session", "wire message body over %d bytes",
			     TF_WIRE_MAX_BODY - TF_WIRE_TAG);
		m->overflow = true;
		return -EMSGSIZE;
	}
	wr32(m->buf + 12, (uint32_t)(m->len - TF_WIRE_HDR_SIZE));
	return 0;
}

void tf__wire_set_sealed(struct tf_wire_msg *m, size_t size)
{
	wr16(m->buf + 6, (uint16_t)(rd16(m->buf + 6) | TF_WIRE_F_SEALED));
	wr32(m->buf + 12, (uint32_t)size);
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
		char txt[5];

		/* Say what the peer is when it speaks text ("HTTP", "SSH-"):
		 * a client pointed at the wrong port is the common case. */
		for (int i = 0; i < 4; i++)
			txt[i] = (char)(p[i] >= 0x20 && p[i] < 0x7f ? p[i]
								    : '.');
		txt[4] = '\0';
		tf_log_warn("session",
			    "peer does not speak the tollfree protocol "
			    "(it sent \"%s\", bad magic 0x%08x)",
			    txt, h->magic);
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
	if (h->flags & ~(uint16_t)TF_WIRE_F_SEALED) {
		tf_log_warn("session", "unknown wire flags 0x%x", h->flags);
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

/* Send @pre_len bytes of @pre (a message held back), then @m, in one
 * system call where the socket takes them. */
static int wire_send(int fd, const uint8_t *pre, size_t pre_len,
		     const struct tf_wire_msg *m, int timeout_ms, int flags)
{
	uint64_t deadline = tf__now_ns() + (uint64_t)timeout_ms * 1000000;
	size_t off = 0, total = pre_len + m->len;

	while (off < total) {
		struct iovec iov[2];
		struct msghdr mh = {.msg_iov = iov};
		ssize_t n;
		int ret;

		if (pre && off < pre_len) {
			iov[0].iov_base = (void *)(pre + off);
			iov[0].iov_len = pre_len - off;
			iov[1].iov_base = (void *)m->buf;
			iov[1].iov_len = m->len;
			mh.msg_iovlen = 2;
		} else {
			iov[0].iov_base = (void *)(m->buf + (off - pre_len));
			iov[0].iov_len = total - off;
			mh.msg_iovlen = 1;
		}
		/* MSG_NOSIGNAL: a peer that went away must give -EPIPE, not
		 * kill the process with SIGPIPE. */
		n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT | flags);
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

int tf__wire_send(int fd, const struct tf_wire_msg *m, int timeout_ms)
{
	return wire_send(fd, NULL, 0, m, timeout_ms, 0);
}

int tf__wire_send_pre(int fd, const uint8_t *pre, size_t pre_len,
		      const struct tf_wire_msg *m, int timeout_ms, bool last)
{
	return wire_send(fd, pre, pre_len, m, timeout_ms, last ? MSG_MORE : 0);
}

/* On TCP, MSG_MORE holds a segment shorter than the MSS back until more
 * data or the close: then the FIN rides on it.  The peer wakes once, for
 * both, and this side pays one transmission instead of two. */
int tf__wire_send_last(int fd, const struct tf_wire_msg *m, int timeout_ms)
{
	return wire_send(fd, NULL, 0, m, timeout_ms, MSG_MORE);
}

void tf__wire_rx_reset(struct tf_wire_rx *rx)
{
	rx->got = 0;
	rx->have_hdr = false;
}

static int rx_step(int fd, struct tf_wire_rx *rx, size_t ahead)
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
		if (rx->ahead_len) {
			/* Read ahead before: the stream's next bytes. */
			n = (ssize_t)(want < rx->ahead_len ? want
							   : rx->ahead_len);
			memcpy(dst, rx->ahead + rx->ahead_off, (size_t)n);
			rx->ahead_off += (uint32_t)n;
			rx->ahead_len -= (uint32_t)n;
		} else if (ahead && want < TF_WIRE_AHEAD) {
			size_t ask = ahead < TF_WIRE_AHEAD - want
					     ? want + ahead
					     : TF_WIRE_AHEAD;

			n = recv(fd, rx->ahead, ask, MSG_DONTWAIT);
			if (n > 0) {
				rx->ahead_off = 0;
				rx->ahead_len = (uint32_t)n;
				continue;
			}
		} else {
			n = recv(fd, dst, want, MSG_DONTWAIT);
		}
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

int tf__wire_rx_step(int fd, struct tf_wire_rx *rx)
{
	return rx_step(fd, rx, 0);
}

int tf__wire_rx_step_ahead(int fd, struct tf_wire_rx *rx, size_t ahead)
{
	return rx_step(fd, rx, ahead);
}

int tf__wire_recv_spin(int fd, struct tf_wire_rx *rx, unsigned spin_us,
		       unsigned yield_us, int timeout_ms, size_t ahead)
{
	uint64_t start = tf__now_ns(), yielded = start;
	uint64_t deadline = start + (uint64_t)timeout_ms * 1000000;

	for (;;) {
		int ret = rx_step(fd, rx, ahead);
		uint64_t now;

		if (ret)
			return ret;
		/* An answer due within the spin is read without sleeping:
		 * a recv that does not wait costs far less than a wake-up
		 * across cores. */
		now = tf__now_ns();
		if (now - start < (uint64_t)spin_us * 1000) {
			tf__spin_pause(now, (uint64_t)yield_us * 1000,
				       &yielded);
			continue;
		}
		ret = wait_fd(fd, POLLIN, remaining_ms(deadline));
		if (ret)
			return ret;
	}
}

int tf__wire_recv(int fd, struct tf_wire_rx *rx, int timeout_ms)
{
	return tf__wire_recv_spin(fd, rx, 0, 0, timeout_ms, 0);
}

/* ----------------------------------------------------------- bodies */

static const char *const op_names[] = {
	[TF_WIRE_HELLO] = "HELLO",   [TF_WIRE_CHALLENGE] = "CHALLENGE",
	[TF_WIRE_OPEN] = "OPEN",     [TF_WIRE_ACCEPT] = "ACCEPT",
	[TF_WIRE_REJECT] = "REJECT", [TF_WIRE_EXPOSE] = "EXPOSE",
	[TF_WIRE_CLOSE] = "CLOSE",   [TF_WIRE_GRANT] = "GRANT",
	[TF_WIRE_ADDR] = "ADDR",
};

const char *tf__wire_op_name(unsigned op)
{
	return op && op <= TF_WIRE_OP_MAX ? op_names[op] : "op?";
}

/* Start parsing @rx as a message of @op; false (logged) if it is not. */
static bool parse_start(const struct tf_wire_rx *rx, enum tf_wire_op op,
			struct tf_wire_cur *cur)
{
	if (rx->h.op != op) {
		tf_log_warn("session", "handshake: expected %s, got op %u",
			    op_names[op], rx->h.op);
		return false;
	}
	tf__wire_cur_init(cur, rx);
	return true;
}

/* The fields an OPEN carries, at @cur (the rest of the body). */
static int get_open(struct tf_wire_cur *cur, uint32_t reuse,
		    const struct tf_wire_rx *rx, struct tf_wire_open *m)
{
	const uint8_t *blob, *priv, *ctl;
	uint16_t blob_len, priv_len, ctl_len;
	uint32_t grant;
	uint8_t flags;

	blob_len = tf__wire_get_u16(cur);
	blob = tf__wire_get_bytes(cur, blob_len);
	priv_len = tf__wire_get_u16(cur);
	priv = tf__wire_get_bytes(cur, priv_len);
	ctl_len = tf__wire_get_u16(cur);
	ctl = tf__wire_get_bytes(cur, ctl_len);
	grant = tf__wire_get_u32(cur);
	flags = tf__wire_get_u8(cur);
	/* A grant is taken on a kept connection only, and is not answered
	 * (so no server agrees to a remote invalidation there); only an
	 * OPEN that takes one may be its session's CLOSE too. */
	if (cur->bad || blob_len > TF_QP_ADDR_MAX ||
	    priv_len > TF_WIRE_MAX_PRIV || ctl_len > TF_QP_ADDR_MAX ||
	    (!reuse && (!blob_len || grant)) ||
	    (reuse && (blob_len || ctl_len)) ||
	    (flags & ~(TF_WIRE_OPEN_RINV | TF_WIRE_OPEN_CLOSED)) ||
	    (grant && (flags & TF_WIRE_OPEN_RINV)) ||
	    (!grant && (flags & TF_WIRE_OPEN_CLOSED))) {
		tf_log_warn("session",
			    "handshake: malformed %s (%u bytes, connection "
			    "%u, blob %u, control blob %u, grant %u, flags "
			    "0x%x)",
			    op_names[rx->h.op], rx->h.size, reuse, blob_len,
			    ctl_len, grant, flags);
		return -TF_EWIRE;
	}
	m->grant = grant;
	m->flags = flags;
	m->reuse_id = reuse;
	m->blob = blob;
	m->blob_len = blob_len;
	m->priv = priv;
	m->priv_len = priv_len;
	m->ctl = ctl_len ? ctl : NULL;
	m->ctl_len = ctl_len;
	return 0;
}

int tf__wire_parse_hello(const struct tf_wire_rx *rx, struct tf_wire_hello *m)
{
	struct tf_wire_open open = {0};
	struct tf_wire_cur cur;
	const uint8_t *nonce;
	uint64_t sent_ns = 0;
	uint8_t flags;
	int ret;

	if (!parse_start(rx, TF_WIRE_HELLO, &cur))
		return -TF_EWIRE;
	nonce = tf__wire_get_bytes(&cur, TF_WIRE_NONCE);
	flags = tf__wire_get_u8(&cur);
	/* An early OPEN follows only a HELLO with a key; its time first. */
	if (flags & TF_WIRE_HELLO_EARLY)
		sent_ns = tf__wire_get_u64(&cur);
	if (cur.bad || (flags & ~(TF_WIRE_HELLO_AUTH | TF_WIRE_HELLO_EARLY)) ||
	    ((flags & TF_WIRE_HELLO_EARLY) && !(flags & TF_WIRE_HELLO_AUTH))) {
		tf_log_warn("session",
			    "handshake: malformed HELLO (%u bytes, flags "
			    "0x%x)",
			    rx->h.size, flags);
		return -TF_EWIRE;
	}
	/* With a key, nothing else: the client's QP goes in the sealed
	 * OPEN, after the server proved the key. */
	if (!(flags & TF_WIRE_HELLO_AUTH)) {
		ret = get_open(&cur, 0, rx, &open);
		if (ret)
			return ret;
	}
	m->nonce = nonce;
	m->auth = flags & TF_WIRE_HELLO_AUTH;
	m->early = flags & TF_WIRE_HELLO_EARLY;
	m->sent_ns = sent_ns;
	m->open = open;
	return 0;
}

int tf__wire_parse_challenge(const struct tf_wire_rx *rx,
			     struct tf_wire_challenge *m)
{
	const uint8_t *nonce, *mac;
	struct tf_wire_cur cur;
	uint8_t flags;

	if (!parse_start(rx, TF_WIRE_CHALLENGE, &cur))
		return -TF_EWIRE;
	nonce = tf__wire_get_bytes(&cur, TF_WIRE_NONCE);
	flags = tf__wire_get_u8(&cur);
	mac = tf__wire_get_bytes(&cur, TF_WIRE_MAC);
	if (cur.bad || (flags & ~TF_WIRE_CHALLENGE_EARLY)) {
		tf_log_warn("session",
			    "handshake: malformed CHALLENGE (%u bytes, flags "
			    "0x%x)",
			    rx->h.size, flags);
		return -TF_EWIRE;
	}
	m->nonce = nonce;
	m->early = flags & TF_WIRE_CHALLENGE_EARLY;
	m->mac = mac;
	return 0;
}

int tf__wire_parse_open(const struct tf_wire_rx *rx, struct tf_wire_open *m)
{
	struct tf_wire_cur cur;
	uint32_t reuse;

	if (!parse_start(rx, TF_WIRE_OPEN, &cur))
		return -TF_EWIRE;
	reuse = tf__wire_get_u32(&cur);
	return get_open(&cur, reuse, rx, m);
}

static void get_exposure(struct tf_wire_cur *cur, tf_exposure_info_t *e)
{
	e->addr = tf__wire_get_u64(cur);
	e->length = tf__wire_get_u64(cur);
	e->rkey = tf__wire_get_u32(cur);
	e->rights = tf__wire_get_u32(cur);
}

/* Whether @e is an exposure a peer may describe: a non-empty range that
 * does not wrap, with a non-empty subset of the remote rights. */
static bool exposure_ok(const tf_exposure_info_t *e)
{
	if (!e->length || e->addr + e->length < e->addr || !e->rights ||
	    (e->rights & ~(uint32_t)TF_WIRE_EXPOSURE_RIGHTS)) {
		tf_log_warn("session",
			    "peer sent a bad exposure (len %llu, rights 0x%x)",
			    (unsigned long long)e->length, e->rights);
		return false;
	}
	return true;
}

/* The exposure list that ends the body at @cur. */
static int get_exposures(struct tf_wire_cur *cur, struct tf_wire_exposures *x)
{
	uint16_t n = tf__wire_get_u16(cur);
	struct tf_wire_cur check;

	if (cur->bad || n > TF_WIRE_MAX_EXPOSE ||
	    cur->left != (size_t)n * TF_WIRE_EXPOSURE_SIZE) {
		tf_log_warn("session",
			    "peer sent a malformed list of %u exposures "
			    "(%zu bytes)",
			    n, cur->left);
		return -TF_EWIRE;
	}
	/* Every entry is checked before any is stored, so that *@x is
	 * written only on success. */
	check = *cur;
	for (unsigned i = 0; i < n; i++) {
		tf_exposure_info_t e;

		get_exposure(&check, &e);
		if (!exposure_ok(&e))
			return -TF_EWIRE;
	}
	for (unsigned i = 0; i < n; i++)
		get_exposure(cur, &x->e[i]);
	x->n = n;
	return 0;
}

/* The connection id and QP addresses that open an ACCEPT and make an ADDR
 * (tf__wire_put_qps), into @q; false if they overrun the body or a bound. */
struct wire_qps {
	uint32_t id;
	const uint8_t *blob, *ctl;
	uint16_t blob_len, ctl_len;
};

static bool get_qps(struct tf_wire_cur *cur, struct wire_qps *q)
{
	q->id = tf__wire_get_u32(cur);
	q->blob_len = tf__wire_get_u16(cur);
	q->blob = tf__wire_get_bytes(cur, q->blob_len);
	q->ctl_len = tf__wire_get_u16(cur);
	q->ctl = tf__wire_get_bytes(cur, q->ctl_len);
	return !cur->bad && q->blob_len <= TF_QP_ADDR_MAX &&
	       q->ctl_len <= TF_QP_ADDR_MAX;
}

static void set_qps(struct tf_wire_accept *m, const struct wire_qps *q)
{
	m->conn_id = q->id;
	m->blob = q->blob;
	m->blob_len = q->blob_len;
	m->ctl = q->ctl;
	m->ctl_len = q->ctl_len;
}

int tf__wire_parse_accept(const struct tf_wire_rx *rx, struct tf_wire_accept *m)
{
	struct tf_wire_cur cur;
	struct wire_qps q;
	uint8_t flags;
	bool ok;
	int ret;

	if (!parse_start(rx, TF_WIRE_ACCEPT, &cur))
		return -TF_EWIRE;
	ok = get_qps(&cur, &q);
	flags = tf__wire_get_u8(&cur);
	if (!ok || cur.bad || (flags & ~TF_WIRE_ACCEPT_RINV)) {
		tf_log_warn("session",
			    "handshake: malformed ACCEPT (%u bytes, flags "
			    "0x%x)",
			    rx->h.size, flags);
		return -TF_EWIRE;
	}
	ret = get_exposures(&cur, &m->exps);
	if (ret)
		return ret;
	/* The remote invalidation is of exposure 0. */
	if ((flags & TF_WIRE_ACCEPT_RINV) && !m->exps.n) {
		tf_log_warn("session", "handshake: ACCEPT offers a remote "
				       "invalidation and no exposure");
		return -TF_EWIRE;
	}
	set_qps(m, &q);
	m->flags = flags;
	return 0;
}

void tf__wire_put_qps(struct tf_wire_msg *m, uint32_t conn_id,
		      const uint8_t *blob, size_t blob_len, const uint8_t *ctl,
		      size_t ctl_len)
{
	tf__wire_put_u32(m, conn_id);
	tf__wire_put_u16(m, (uint16_t)blob_len);
	tf__wire_put_bytes(m, blob, blob_len);
	tf__wire_put_u16(m, (uint16_t)ctl_len);
	tf__wire_put_bytes(m, ctl, ctl_len);
}

int tf__wire_parse_addr(const struct tf_wire_rx *rx, struct tf_wire_accept *m)
{
	struct tf_wire_cur cur;
	struct wire_qps q;

	if (!parse_start(rx, TF_WIRE_ADDR, &cur))
		return -TF_EWIRE;
	if (!get_qps(&cur, &q) || !q.id || !q.blob_len) {
		tf_log_warn("session", "handshake: malformed ADDR (%u bytes)",
			    rx->h.size);
		return -TF_EWIRE;
	}
	set_qps(m, &q);
	m->flags = 0;
	m->exps.n = 0;
	return 0;
}

static void put_name(struct tf_wire_msg *m, const char *s)
{
	size_t n = strnlen(s, TF_WIRE_NAME_MAX - 1);

	tf__wire_put_u8(m, (uint8_t)n);
	tf__wire_put_bytes(m, s, n);
}

void tf__wire_put_reject(struct tf_wire_msg *m, int err, const char *provider,
			 const char *transport)
{
	tf__wire_init(m, TF_WIRE_REJECT);
	tf__wire_put_u32(m, (uint32_t)(err < 0 ? -err : err));
	if ((err == -TF_EPEER || err == TF_EPEER) && provider && transport) {
		put_name(m, provider);
		put_name(m, transport);
	}
}

/* A name of the REJECT's detail: printable, shorter than
 * TF_WIRE_NAME_MAX; false if not. */
static bool get_name(struct tf_wire_cur *cur, char *out)
{
	uint8_t n = tf__wire_get_u8(cur);
	const uint8_t *p = tf__wire_get_bytes(cur, n);

	if (cur->bad || n >= TF_WIRE_NAME_MAX)
		return false;
	for (uint8_t i = 0; i < n; i++)
		if (p[i] < 0x20 || p[i] > 0x7e)
			return false;
	memcpy(out, p, n);
	out[n] = 0;
	return true;
}

int tf__wire_parse_reject(const struct tf_wire_rx *rx, struct tf_wire_reject *m)
{
	struct tf_wire_cur cur;
	uint32_t err;

	memset(m, 0, sizeof(*m));
	if (!parse_start(rx, TF_WIRE_REJECT, &cur))
		return -TF_EWIRE;
	/* errno values and the library's own codes are all below 4096. */
	err = tf__wire_get_u32(&cur);
	if (cur.bad || !err || err > 4096) {
		tf_log_debug("session", "malformed REJECT (%u bytes, error %u)",
			     rx->h.size, err);
		return -TF_EWIRE;
	}
	m->err = -(int)err;
	/* The detail only helps the message: without it, or malformed, the
	 * refusal stands as it is. */
	if (m->err == -TF_EPEER && cur.left &&
	    (!get_name(&cur, m->provider) || !get_name(&cur, m->transport))) {
		tf_log_debug("session", "REJECT: malformed detail ignored");
		m->provider[0] = m->transport[0] = 0;
	}
	return 0;
}

int tf__wire_parse_expose(const struct tf_wire_rx *rx,
			  struct tf_wire_exposures *m)
{
	struct tf_wire_cur cur;

	if (!parse_start(rx, TF_WIRE_EXPOSE, &cur))
		return -TF_EWIRE;
	return get_exposures(&cur, m);
}

void tf__wire_put_grant(struct tf_wire_msg *m, uint32_t grant,
			const tf_exposure_info_t *e)
{
	tf__wire_init(m, TF_WIRE_GRANT);
	tf__wire_put_u32(m, grant);
	tf__wire_put_u64(m, e->addr);
	tf__wire_put_u64(m, e->length);
	tf__wire_put_u32(m, e->rkey);
	tf__wire_put_u32(m, e->rights);
}

int tf__wire_parse_grant(const struct tf_wire_rx *rx, struct tf_wire_grant *m)
{
	struct tf_wire_cur cur;
	tf_exposure_info_t e;
	uint32_t grant;

	if (!parse_start(rx, TF_WIRE_GRANT, &cur))
		return -TF_EWIRE;
	grant = tf__wire_get_u32(&cur);
	get_exposure(&cur, &e);
	if (cur.bad || cur.left || !grant) {
		tf_log_warn("session", "peer sent a malformed GRANT (%u bytes)",
			    rx->h.size);
		return -TF_EWIRE;
	}
	if (!exposure_ok(&e))
		return -TF_EWIRE;
	m->grant = grant;
	m->e = e;
	return 0;
}
