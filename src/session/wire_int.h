/* SPDX-License-Identifier: MIT */
/*
 * wire_int.h - the session bootstrap wire format.
 *
 * Every message is a fixed 16-byte header followed by a body of at most
 * TF_WIRE_MAX_BODY bytes.  All fields are big-endian (network order):
 *
 *   0  u32 magic     TF_WIRE_MAGIC ("TFSS")
 *   4  u8  version   TF_WIRE_VERSION
 *   5  u8  op        enum tf_wire_op
 *   6  u16 flags     enum tf_wire_flags
 *   8  u16 hdr_size  sizeof the header as the sender knows it (>= 16; a
 *                    later version may append fields, which are skipped)
 *  10  u16 reserved  0
 *  12  u32 size      body bytes that follow the header
 *
 * A message whose magic, version, hdr_size or size is wrong is rejected
 * before its body is read (no allocation is sized by the peer beyond the
 * fixed bound).  Bodies are parsed with tf__wire_get_*(), which check every
 * length against what remains.
 *
 * Exchange (client C, server S):
 *   C->S HELLO      nonce_c[32]
 *   S->C CHALLENGE  nonce_s[32], u8 auth, mac_s[32] if auth
 *   C->S OPEN       mac_c[32] if auth, u32 reuse_id, u16 blob_len, blob,
 *                   u16 priv_len, priv, and optionally (first OPEN only)
 *                   u16 ctl_len, ctl_blob: the client's control QP
 *   S->C ACCEPT     u32 conn_id, u16 blob_len, blob (0 when reused),
 *                   u16 ctl_len, ctl_blob (the server's control QP, or 0:
 *                   none; always 0 when reused), u16 n, n * exposure
 *     or REJECT     i32 error (a TF_E* or errno value, positive)
 * then, in either direction while the session lives:
 *        EXPOSE     u16 n, n * exposure
 *        CLOSE      (empty): the sender revoked everything it exposed
 * and for the next session on a kept connection C->S OPEN again (no auth:
 * the connection is the authenticated one).
 *
 * Channels: the first session of a connection sends all its messages on
 * the TCP socket.  If both sides exchanged control QP blobs (and both
 * connected them), every later session on the connection sends all its
 * messages (OPEN, ACCEPT/REJECT, EXPOSE, CLOSE) as SENDs on the control
 * QP instead, one message per SEND, in this same format; the receiver
 * checks that the SEND's length is exactly hdr_size + size
 * (ctl.c).  The socket then carries nothing; its end still means
 * the peer's end.
 *
 * mac_s = HMAC-SHA256(psk, "tollfree-s" | nonce_c | nonce_s)
 * mac_c = HMAC-SHA256(psk, "tollfree-c" | nonce_s | nonce_c)
 * Both sides prove the key; the distinct labels stop a reflection.
 */
#ifndef TOLLFREE_WIRE_INT_H
#define TOLLFREE_WIRE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tollfree/session.h>

#define TF_WIRE_MAGIC 0x54465353u /* "TFSS" */
/* 2: ACCEPT carries the server's control QP (and OPEN may carry the
 * client's); a peer of version 1 gets -TF_EVERSION, not a misparse. */
#define TF_WIRE_VERSION	 2
#define TF_WIRE_HDR_SIZE 16
/* Bounds on what a peer may send; every one is checked. */
#define TF_WIRE_MAX_BODY      4096
#define TF_WIRE_MAX_HDR	      64
#define TF_WIRE_NONCE	      32
#define TF_WIRE_MAC	      32
#define TF_WIRE_MAX_PRIV      1024
#define TF_WIRE_MAX_EXPOSE    64
#define TF_WIRE_EXPOSURE_SIZE 24 /* u64 addr, u64 len, u32 rkey, u32 rights */

enum tf_wire_op {
	TF_WIRE_HELLO = 1,
	TF_WIRE_CHALLENGE = 2,
	TF_WIRE_OPEN = 3,
	TF_WIRE_ACCEPT = 4,
	TF_WIRE_REJECT = 5,
	TF_WIRE_EXPOSE = 6,
	TF_WIRE_CLOSE = 7,
	TF_WIRE_OP_MAX = 7,
};

struct tf_wire_hdr {
	uint32_t magic;
	uint8_t version;
	uint8_t op;
	uint16_t flags;
	uint16_t hdr_size;
	uint16_t reserved;
	uint32_t size;
};

/* A message being assembled for sending. */
struct tf_wire_msg {
	uint8_t buf[TF_WIRE_HDR_SIZE + TF_WIRE_MAX_BODY];
	size_t len; /* header included */
	bool overflow;
};

/* A message being received (possibly a byte at a time, non-blocking). */
struct tf_wire_rx {
	uint8_t hdr[TF_WIRE_MAX_HDR];
	uint8_t body[TF_WIRE_MAX_BODY];
	size_t got; /* bytes of header (up to hdr_size) plus body */
	struct tf_wire_hdr h;
	bool have_hdr;
};

/* A cursor over a received body. */
struct tf_wire_cur {
	const uint8_t *p;
	size_t left;
	bool bad; /* set by a get that ran past the end */
};

void tf__wire_init(struct tf_wire_msg *m, enum tf_wire_op op);
void tf__wire_put_u8(struct tf_wire_msg *m, uint8_t v);
void tf__wire_put_u16(struct tf_wire_msg *m, uint16_t v);
void tf__wire_put_u32(struct tf_wire_msg *m, uint32_t v);
void tf__wire_put_u64(struct tf_wire_msg *m, uint64_t v);
void tf__wire_put_bytes(struct tf_wire_msg *m, const void *b, size_t n);
/* Write the header's size field; -EMSGSIZE if the body overflowed. */
int tf__wire_finish(struct tf_wire_msg *m);

/* Encode/decode the fixed header (16 bytes at @p). */
void tf__wire_hdr_encode(const struct tf_wire_hdr *h, uint8_t *p);
/* Decode and validate; 0, -TF_EWIRE (magic, sizes, op) or -TF_EVERSION. */
int tf__wire_hdr_decode(const uint8_t *p, struct tf_wire_hdr *h);

void tf__wire_cur_init(struct tf_wire_cur *c, const struct tf_wire_rx *rx);
uint8_t tf__wire_get_u8(struct tf_wire_cur *c);
uint16_t tf__wire_get_u16(struct tf_wire_cur *c);
uint32_t tf__wire_get_u32(struct tf_wire_cur *c);
uint64_t tf__wire_get_u64(struct tf_wire_cur *c);
/* A pointer to the next @n bytes, or NULL (and c->bad) past the end. */
const uint8_t *tf__wire_get_bytes(struct tf_wire_cur *c, size_t n);

/* Send a finished message, waiting up to @timeout_ms for the socket to
 * take it.  0, -ETIMEDOUT, -EPIPE/-ECONNRESET or -errno. */
int tf__wire_send(int fd, const struct tf_wire_msg *m, int timeout_ms);
/*
 * Read more of a message from a non-blocking @fd into @rx.  Returns 1 when
 * a whole message is there (rx->h and rx->body valid), 0 when more bytes
 * are needed (EAGAIN), -ECONNRESET on EOF, -TF_EWIRE/-TF_EVERSION for a
 * bad header, or -errno.
 */
int tf__wire_rx_step(int fd, struct tf_wire_rx *rx);
/* As tf__wire_rx_step, waiting up to @timeout_ms in all; -ETIMEDOUT. */
int tf__wire_recv(int fd, struct tf_wire_rx *rx, int timeout_ms);
/* Reset @rx for the next message. */
void tf__wire_rx_reset(struct tf_wire_rx *rx);

/* HMAC-SHA256 over the concatenation of @label, @a and @b. */
int tf__wire_mac(const void *key, size_t key_len, const char *label,
		 const uint8_t *a, const uint8_t *b, uint8_t out[TF_WIRE_MAC]);
/* Constant-time comparison of two MACs; true if equal. */
bool tf__wire_mac_equal(const uint8_t *a, const uint8_t *b);

/*
 * Parsers of the message bodies.  They are pure functions of a message as
 * tf__wire_rx_step handed it over, shared by the session code and the
 * fuzzer (fuzz/fuzz_wire.c), so that what is fuzzed is what runs.  Each
 * checks the op, every length and count against the body and the bounds
 * above, and every field the format constrains; it logs what is wrong and
 * returns -TF_EWIRE, or returns 0 and fills *@m (written only on success).
 * Pointers in *@m point into rx->body: valid until @rx is reset.  Checks
 * that need the connection's state (MACs, connection ids, room for more
 * exposures) are the caller's.  Bytes after the last field are ignored,
 * except after an exposure list, which must end the body.
 */

/* Rights an exposure may grant the peer. */
#define TF_WIRE_EXPOSURE_RIGHTS                           \
	(TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_WRITE | \
	 TF_ACCESS_REMOTE_ATOMIC)

struct tf_wire_hello {
	const uint8_t *nonce; /* TF_WIRE_NONCE bytes */
};

struct tf_wire_challenge {
	const uint8_t *nonce; /* TF_WIRE_NONCE bytes */
	const uint8_t *mac;   /* TF_WIRE_MAC bytes; NULL: server has no key */
};

struct tf_wire_open {
	const uint8_t *mac; /* TF_WIRE_MAC bytes if asked for, else NULL */
	uint32_t reuse_id;
	const uint8_t *blob; /* blob_len <= TF_QP_ADDR_MAX */
	const uint8_t *priv; /* priv_len <= TF_WIRE_MAX_PRIV */
	/* The client's control QP: ctl_len <= TF_QP_ADDR_MAX, 0 if absent */
	const uint8_t *ctl;
	uint16_t blob_len, priv_len, ctl_len;
};

/* An exposure list: non-empty ranges that do not wrap, with rights that
 * are a non-empty subset of TF_WIRE_EXPOSURE_RIGHTS. */
struct tf_wire_exposures {
	unsigned n; /* <= TF_WIRE_MAX_EXPOSE */
	tf_exposure_info_t e[TF_WIRE_MAX_EXPOSE];
};

struct tf_wire_accept {
	uint32_t conn_id;
	const uint8_t *blob; /* blob_len <= TF_QP_ADDR_MAX */
	const uint8_t *ctl;  /* ctl_len <= TF_QP_ADDR_MAX, 0: none */
	uint16_t blob_len, ctl_len;
	struct tf_wire_exposures exps;
};

int tf__wire_parse_hello(const struct tf_wire_rx *rx, struct tf_wire_hello *m);
int tf__wire_parse_challenge(const struct tf_wire_rx *rx,
			     struct tf_wire_challenge *m);
/* @with_mac: the OPEN must carry a MAC (the server has a key and the
 * connection is new). */
int tf__wire_parse_open(const struct tf_wire_rx *rx, bool with_mac,
			struct tf_wire_open *m);
int tf__wire_parse_accept(const struct tf_wire_rx *rx,
			  struct tf_wire_accept *m);
/* *@err_p: the error the peer reports, negative (-4096..-1).  A malformed
 * REJECT is logged at debug level only: the caller reports the refusal. */
int tf__wire_parse_reject(const struct tf_wire_rx *rx, int *err_p);
int tf__wire_parse_expose(const struct tf_wire_rx *rx,
			  struct tf_wire_exposures *m);

#endif /* TOLLFREE_WIRE_INT_H */
