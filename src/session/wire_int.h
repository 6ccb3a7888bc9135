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
 * Flags: TF_WIRE_F_SEALED: the body is sealed (seal.c): encrypted with
 * AES-256-GCM and followed by a 16-byte tag; the header, and during the
 * handshake the transcript hash, are authenticated with it.  On a
 * connection made with a pre-shared key every message after CHALLENGE
 * must be sealed; an unsealed one fails the connection (-TF_EAUTH).
 *
 * Handshake without a pre-shared key: one round trip after the TCP
 * connect (client C, server S):
 *   C->S HELLO      nonce_c[32], u8 flags = 0, then what OPEN carries:
 *                   u16 blob_len, blob (the client's QP), u16 priv_len,
 *                   priv, u16 ctl_len, ctl_blob (its control QP, or 0),
 *                   u32 grant = 0, u8 open_flags (TF_WIRE_OPEN_*)
 *   S->C ACCEPT     u32 conn_id, u16 blob_len, blob, u16 ctl_len,
 *                   ctl_blob (0: none), u8 accept_flags
 *                   (TF_WIRE_ACCEPT_*), u16 n, n * exposure
 *     or REJECT     i32 error (a TF_E* or errno value, positive); for
 *                   TF_EPEER (the server could not connect its QP to
 *                   the client's) also u8 len, provider, u8 len,
 *                   transport: the server's tf_caps_t names, up to 15
 *                   bytes each, so that the client can say why.  A
 *                   parser ignores bytes after the error it does not
 *                   expect.  The server's bounds refuse with EBUSY (its
 *                   handshakes in progress, or TOLLFREE_SESSION_MAX_
 *                   SESSIONS), EUSERS (the client's address holds
 *                   _MAX_SESSIONS_PEER sessions) or ENOBUFS (pinned
 *                   memory), here or in answer to a kept connection's
 *                   OPEN; the client returns the error negated.
 *
 * Early addresses (version 5), where connecting a QP is a device command
 * (TOLLFREE_SESSION_EARLY_ADDR): the server answers a new connection's
 * OPEN (the HELLO without a key, the sealed OPEN with one) first with
 *   S->C ADDR       u32 conn_id (non-zero), u16 blob_len (> 0), blob,
 *                   u16 ctl_len, ctl_blob (0: none)
 * as soon as its QPs exist, and connects them to the client's after it
 * left; the client connects its own meanwhile, so that both sides' QP
 * transitions (RTR, RTS) overlap.  Its answer follows as usual: ACCEPT
 * with the same conn_id and no blobs, or REJECT.  The client sends
 * nothing on a QP before the ACCEPT, which leaves after the server's QPs
 * are connected.  With a key the ADDR is sealed like the ACCEPT (the
 * client proved the key with its OPEN), and both belong to the
 * handshake's transcript.
 *
 * With a pre-shared key: two round trips, and no QP address or key goes
 * to a peer before it proved the key:
 *   C->S HELLO      nonce_c[32], u8 flags = TF_WIRE_HELLO_AUTH
 *   S->C CHALLENGE  nonce_s[32], u8 flags = 0, mac_s[32]
 *   C->S OPEN       sealed: u32 reuse_id = 0, u16 blob_len, blob,
 *                   u16 priv_len, priv, u16 ctl_len, ctl_blob,
 *                   u32 grant = 0, u8 open_flags
 *   S->C ACCEPT     sealed, as above (or REJECT, sealed)
 * Keys are derived from the key and both nonces (seal.c).  mac_s =
 * HMAC-SHA256(fin_s, SHA-256(HELLO | CHALLENGE up to mac_s)) proves the
 * server's key before the client says anything more; the client's proof
 * is that its OPEN opens (its tag covers SHA-256 of HELLO and CHALLENGE).
 * A server with a key refuses a HELLO without the flag, and a server
 * without one a HELLO with it (REJECT -TF_EAUTH); a client with a key
 * refuses an ACCEPT that is not preceded by a valid CHALLENGE.
 *
 * Early OPEN (version 7; TOLLFREE_SESSION_PSK_EARLY_*): one round trip
 * with a key.  The client sends, in one write,
 *   C->S HELLO      nonce_c[32], u8 flags = AUTH | TF_WIRE_HELLO_EARLY,
 *                   u64 sent_ns (its CLOCK_REALTIME)
 *   C->S OPEN       sealed with the early key, HMAC-SHA256(K_e, nonce_c)
 *                   where K_e = HMAC-SHA256("tollfree v7 early", key)
 *                   (one message under it: IV zero), its tag covering
 *                   SHA-256(HELLO): the OPEN above
 * The server opens it (a failure: REJECT -TF_EAUTH, unsealed, as for a
 * HELLO of the wrong kind: it proves the client lacks the key) and takes
 * it only if sent_ns is within its window of the server's clock and
 * nonce_c is new (replay.c): then, in one write,
 *   S->C CHALLENGE  nonce_s, u8 flags = TF_WIRE_CHALLENGE_EARLY, mac_s
 *                   over HELLO | OPEN | CHALLENGE up to mac_s
 *   S->C ACCEPT     sealed with the traffic keys (or ADDR then ACCEPT,
 *                   or REJECT), as after a classic OPEN.
 * Otherwise it sends the CHALLENGE with flags 0 (mac_s over the same
 * transcript) and the client sends its OPEN again, sealed with the
 * traffic keys, as in the classic exchange: a replayed HELLO and OPEN get
 * no further.  The client's QP address leaves sealed under the key, so
 * only a holder of the key reads it; the server's QPs and keys leave only
 * after the client proved the key (its OPEN opened) and its nonce was
 * found fresh.
 *
 * A server reads a new connection's first write at once, in as few
 * system calls as it takes (tf__wire_rx_step_ahead): the HELLO and, if
 * it has TF_WIRE_HELLO_EARLY, the OPEN behind it.  A client sends nothing
 * more before the answer, so anything else read behind them is refused
 * (REJECT -TF_EWIRE) before the OPEN is looked at.  The client reads the
 * CHALLENGE that answers an early OPEN with the fixed header of what
 * follows it (the sealed ACCEPT: never a whole message).
 *
 * Then, in either direction while the session lives:
 *        EXPOSE     u16 n, n * exposure
 *        CLOSE      (empty): the sender revoked everything it exposed
 * and for the next session on a kept connection C->S OPEN with
 * reuse_id = the connection's id and no blobs, answered by ACCEPT without
 * blobs.  On an authenticated connection all of these are sealed, on the
 * channel they travel on (socket 0, control QP 1), each numbered.
 *
 * Grants (version 4), on a kept connection with a control QP, from a
 * listener that offers them (tf_listener_params_t.grant_len):
 *   S->C GRANT      u32 grant (non-zero, unique on the connection), then
 *                   one exposure: a window over a fresh slice, bound to
 *                   the connection's QP, for the next session
 *   C->S OPEN       reuse_id, no blobs, priv, grant = the grant it takes,
 *                   open_flags = 0 or TF_WIRE_OPEN_CLOSED
 * An OPEN that takes a grant is not answered: the session is open on
 * both sides as the OPEN leaves, and the grant is the server's exposure 0
 * (the client writes into it at once).  Version 8: a client that connects
 * with TF_SESSION_DEFER_OPEN sends that OPEN only with its session's
 * first message to the server or its first operation that needs the
 * server (a SEND, a receive, a wait for more exposures: tf_session_connect
 * (3)); until then it only writes, reads and runs atomics on the grant,
 * which its connection's QP could already reach.  A session that closes
 * first sends one message, the OPEN with TF_WIRE_OPEN_CLOSED, after its
 * data as a CLOSE goes (tf__sess_fence): the server opens the session
 * with the client's CLOSE already in, and answers with its own CLOSE.
 * A server that refuses it sends REJECT and ends the connection (its
 * windows end with it).  The server
 * sends a GRANT when a session on the connection ended and the
 * connection is kept, until the client holds grant_depth of them; a
 * client holds at most TF_WIRE_MAX_GRANTS and takes the oldest first.
 * The server's ACCEPT, CLOSE, EXPOSE and GRANT messages share the control
 * QP's order, so a client reads GRANTs wherever it reads that channel.
 *
 * Remote invalidation (version 6): a client that sends nothing taking a
 * receive at the server (no SEND, SEND_WITH_IMM or WRITE_WITH_IMM) may
 * set TF_WIRE_OPEN_RINV.  A server whose exposure 0 is a window on a
 * device with SEND_WITH_INV then posts one receive of its own (no buffer)
 * on the session's QP before its ACCEPT, and says so with
 * TF_WIRE_ACCEPT_RINV.  The client's close then posts, on that QP after
 * all its data, an empty SEND_WITH_INV naming exposure 0's key, and then
 * sends its CLOSE (on whichever channel) without waiting: the server's
 * device revokes the window as the SEND arrives, and the receive's
 * completion (with the invalidated key, which must be exposure 0's) tells
 * the server, which then skips its own invalidation.  A server that must
 * revoke before that completion came (it closes first, or the client
 * never sends it) invalidates the window itself and ends the connection:
 * its receive is still posted, and a SEND_WITH_INV arriving for a window
 * already revoked would fail the QP.
 *
 * Channels: the first session of a connection sends all its messages on
 * the TCP socket.  If both sides exchanged control QP blobs (and both
 * connected them), every later session on the connection sends all its
 * messages (OPEN, ACCEPT/REJECT, EXPOSE, CLOSE) as SENDs on the control
 * QP instead, one message per SEND, in this same format; the receiver
 * checks that the SEND's length is exactly hdr_size + size (ctl.c).  The
 * socket then carries nothing; its end still means the peer's end.
 */
#ifndef TOLLFREE_WIRE_INT_H
#define TOLLFREE_WIRE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tollfree/session.h>

#define TF_WIRE_MAGIC 0x54465353u /* "TFSS" */
/* 2: ACCEPT carries the server's control QP (and OPEN may carry the
 * client's).  3: one round trip without a key (HELLO carries the OPEN),
 * sealed messages with one.  4: grants (GRANT, and OPEN's grant field).
 * 5: early addresses (ADDR before a new connection's ACCEPT).
 * 6: remote invalidation (OPEN's and ACCEPT's flags).
 * 7: early OPEN with a key (HELLO's time, CHALLENGE's flags).
 * 8: a granted OPEN may come late, and be its session's CLOSE
 * (TF_WIRE_OPEN_CLOSED).
 * A peer of another version gets -TF_EVERSION, not a misparse. */
#define TF_WIRE_VERSION	 8
#define TF_WIRE_HDR_SIZE 16
/* Bounds on what a peer may send; every one is checked. */
#define TF_WIRE_MAX_BODY 4096
#define TF_WIRE_MAX_HDR	 64
#define TF_WIRE_NONCE	 32
#define TF_WIRE_MAC	 32
#define TF_WIRE_HASH	 32 /* SHA-256 of the transcript */
#define TF_WIRE_TAG	 16 /* AES-256-GCM tag of a sealed body */
#define TF_WIRE_IV	 12
/* Ordered channels of a connection, each with its own sequence numbers. */
#define TF_WIRE_CH_SOCK	      0
#define TF_WIRE_CH_CTL	      1
#define TF_WIRE_CHANNELS      2
#define TF_WIRE_MAX_PRIV      1024
#define TF_WIRE_MAX_EXPOSE    64
#define TF_WIRE_EXPOSURE_SIZE 24 /* u64 addr, u64 len, u32 rkey, u32 rights */
/* Grants a client holds on one connection, at most (a listener's
 * grant_depth is bounded by it). */
#define TF_WIRE_MAX_GRANTS 8

enum tf_wire_op {
	TF_WIRE_HELLO = 1,
	TF_WIRE_CHALLENGE = 2,
	TF_WIRE_OPEN = 3,
	TF_WIRE_ACCEPT = 4,
	TF_WIRE_REJECT = 5,
	TF_WIRE_EXPOSE = 6,
	TF_WIRE_CLOSE = 7,
	TF_WIRE_GRANT = 8,
	TF_WIRE_ADDR = 9,
	TF_WIRE_OP_MAX = 9,
};

enum tf_wire_flags {
	TF_WIRE_F_SEALED = 1u << 0,
};

/* HELLO flags: the client has a key; it sent its OPEN (sealed with the
 * early keys) right behind, and its realtime clock in the HELLO. */
#define TF_WIRE_HELLO_AUTH  1u
#define TF_WIRE_HELLO_EARLY 2u
/* CHALLENGE flags: the server took the early OPEN (its answer follows);
 * without it, the client sends its OPEN (again) after the CHALLENGE. */
#define TF_WIRE_CHALLENGE_EARLY 1u
/* OPEN flags: the client sends nothing that takes a receive at the server
 * and asks to revoke the server's exposure 0 with a SEND_WITH_INV at close
 * (TF_SESSION_REMOTE_INV).  Not with a grant. */
#define TF_WIRE_OPEN_RINV 1u
/* OPEN flags: the OPEN that takes a grant is its session's CLOSE too (the
 * client deferred it, TF_SESSION_DEFER_OPEN, and closed without sending
 * anything else).  Only with a grant. */
#define TF_WIRE_OPEN_CLOSED 2u
/* ACCEPT flags: the server posted a receive for that SEND_WITH_INV on the
 * session's QP, and its exposure 0 (the ACCEPT carries one) is a window. */
#define TF_WIRE_ACCEPT_RINV 1u

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

/* The most bytes a read ahead takes in one recv (tf__wire_rx_step_ahead). */
#define TF_WIRE_AHEAD 1024

/* A message being received (possibly a byte at a time, non-blocking).
 * Zero it before its first use: the bytes read ahead (ahead_len of them,
 * from ahead_off) belong to the stream and go into the next message
 * before anything more is read from the socket; tf__wire_rx_reset keeps
 * them. */
struct tf_wire_rx {
	uint8_t hdr[TF_WIRE_MAX_HDR];
	uint8_t body[TF_WIRE_MAX_BODY];
	size_t got; /* bytes of header (up to hdr_size) plus body */
	struct tf_wire_hdr h;
	bool have_hdr;
	uint8_t ahead[TF_WIRE_AHEAD];
	uint32_t ahead_off, ahead_len;
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
/* Write the header's size field; -EMSGSIZE if the body overflowed (a body
 * may take TF_WIRE_MAX_BODY - TF_WIRE_TAG bytes, so that it can be
 * sealed). */
int tf__wire_finish(struct tf_wire_msg *m);
/* Set the header's size to @size and its sealed flag (seal.c). */
void tf__wire_set_sealed(struct tf_wire_msg *m, size_t size);
/* "HELLO", "OPEN", ... or "op?" */
const char *tf__wire_op_name(unsigned op);

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
 * take it.  0, -ETIMEDOUT, -EPIPE/-ECONNRESET or -errno.
 * tf__wire_send_last: the socket's last message, which the caller closes
 * next: held (MSG_MORE) so that it leaves in one segment with the FIN. */
int tf__wire_send(int fd, const struct tf_wire_msg *m, int timeout_ms);
int tf__wire_send_last(int fd, const struct tf_wire_msg *m, int timeout_ms);
/* @pre_len bytes of messages held back, then @m, in one write where the
 * socket takes them (@last: as tf__wire_send_last). */
int tf__wire_send_pre(int fd, const uint8_t *pre, size_t pre_len,
		      const struct tf_wire_msg *m, int timeout_ms, bool last);
/*
 * Read more of a message from a non-blocking @fd into @rx.  Returns 1 when
 * a whole message is there (rx->h and rx->body valid), 0 when more bytes
 * are needed (EAGAIN), -ECONNRESET on EOF, -TF_EWIRE/-TF_EVERSION for a
 * bad header, or -errno.
 */
int tf__wire_rx_step(int fd, struct tf_wire_rx *rx);
/*
 * As tf__wire_rx_step, but each recv also asks for up to @ahead bytes
 * beyond the message (at most TF_WIRE_AHEAD in all), kept in @rx for the
 * next message: a message and what the peer sent behind it in the same
 * write cost one system call instead of two each (a header, then a
 * body).  Only where the next message is read without sleeping on @fd in
 * between, or where whatever is read ahead cannot be a whole message
 * (@ahead < TF_WIRE_HDR_SIZE + the least body that can follow): a whole
 * message held in @rx makes @fd no more readable, and a sleeper would
 * wait for it in vain.
 */
int tf__wire_rx_step_ahead(int fd, struct tf_wire_rx *rx, size_t ahead);
/* As tf__wire_rx_step, waiting up to @timeout_ms in all; -ETIMEDOUT. */
int tf__wire_recv(int fd, struct tf_wire_rx *rx, int timeout_ms);
/* As tf__wire_recv, reading without waiting for the first @spin_us (and
 * yielding every @yield_us of it: tf__spin_pause), and reading @ahead
 * bytes ahead (tf__wire_rx_step_ahead; 0: none). */
int tf__wire_recv_spin(int fd, struct tf_wire_rx *rx, unsigned spin_us,
		       unsigned yield_us, int timeout_ms, size_t ahead);
/* Reset @rx for the next message (what was read ahead stays). */
void tf__wire_rx_reset(struct tf_wire_rx *rx);

/* ------------------------------------------------------------- seal.c */
struct tf_sess_keys;
struct tf_transcript;

/* A connection's two ciphers made ahead, not keyed yet: the costly part
 * of a cipher's set-up (allocation, the cipher's look-up), done where a
 * caller would wait anyway.  0, -ENOMEM or -EIO. */
int tf__keys_spare_new(struct tf_sess_keys **k_p);
/* Derive a connection's keys from the pre-shared key and both nonces
 * (@server: which side this is); *@fin_s receives the server's proof
 * key.  The ciphers are @spare's (taken over, freed on failure) if not
 * NULL, else new.  0, -ENOMEM or -EIO. */
int tf__keys_derive(const uint8_t *psk, size_t psk_len,
		    const uint8_t nonce_c[TF_WIRE_NONCE],
		    const uint8_t nonce_s[TF_WIRE_NONCE], bool server,
		    uint8_t fin_s[TF_WIRE_MAC], struct tf_sess_keys *spare,
		    struct tf_sess_keys **k_p);
/* The same in two steps, for a server that answers with its proof before
 * it needs the traffic keys: the PRK (HKDF-Extract, kept by the caller,
 * who wipes it) and the proof key, then the keys from the PRK. */
int tf__keys_proof_key(const uint8_t *psk, size_t psk_len,
		       const uint8_t nonce_c[TF_WIRE_NONCE],
		       const uint8_t nonce_s[TF_WIRE_NONCE], uint8_t prk[32],
		       uint8_t fin_s[TF_WIRE_MAC]);
int tf__keys_from_prk(const uint8_t prk[32], bool server,
		      struct tf_sess_keys *spare, struct tf_sess_keys **k_p);
/* A node's key for early OPENs, from the pre-shared key alone, and the
 * keys of one early OPEN (its only use: the client's direction) from it
 * and the client's nonce.  tf__keys_early is thread-safe. */
struct tf_early_key;
int tf__early_key_new(const uint8_t *psk, size_t psk_len,
		      struct tf_early_key **e_p);
void tf__early_key_free(struct tf_early_key *e);
int tf__keys_early(const struct tf_early_key *e,
		   const uint8_t nonce_c[TF_WIRE_NONCE], bool server,
		   struct tf_sess_keys **k_p);
/* Key early keys @k (from tf__keys_early) again, for another nonce: no
 * allocation. */
int tf__keys_early_rekey(const struct tf_early_key *e,
			 const uint8_t nonce_c[TF_WIRE_NONCE],
			 struct tf_sess_keys *k);
void tf__keys_free(struct tf_sess_keys *k);
/* Seal the finished message @m for channel @ch, authenticating the
 * transcript hash @th too when not NULL.  0, -EMSGSIZE or -EIO. */
int tf__wire_seal(struct tf_sess_keys *k, unsigned ch, struct tf_wire_msg *m,
		  const uint8_t *th);
/* Open a received message in place (rx->h.size becomes the plain body's
 * size).  0, or -TF_EAUTH (logged) if it is not sealed, or does not
 * open: wrong key, changed, replayed, reordered or dropped before. */
int tf__wire_unseal(struct tf_sess_keys *k, unsigned ch, struct tf_wire_rx *rx,
		    const uint8_t *th);

/* The SHA-256 of the handshake's messages, in order. */
int tf__transcript_new(struct tf_transcript **t_p);
void tf__transcript_free(struct tf_transcript *t);
int tf__transcript_add(struct tf_transcript *t, const void *b, size_t n);
int tf__transcript_add_msg(struct tf_transcript *t,
			   const struct tf_wire_msg *m);
int tf__transcript_add_rx(struct tf_transcript *t, const struct tf_wire_rx *rx);
/* The hash of what was added so far (the transcript goes on). */
int tf__transcript_hash(const struct tf_transcript *t,
			uint8_t out[TF_WIRE_HASH]);
/* The server's key proof: HMAC-SHA256(@fin, @th); constant-time compare. */
int tf__proof_make(const uint8_t fin[TF_WIRE_MAC], const uint8_t *th,
		   uint8_t out[TF_WIRE_MAC]);
bool tf__proof_equal(const uint8_t *a, const uint8_t *b);
/* The primitives beneath, for their known-answer test (seal_unit):
 * HMAC-SHA256 (RFC 2104), and HKDF-Expand (RFC 5869) of at most one
 * block (@len <= 32) with @info = @label.  0, -EINVAL or -EIO. */
int tf__hmac_sha256(const uint8_t *key, size_t key_len, const uint8_t *data,
		    size_t len, uint8_t out[32]);
int tf__hkdf_expand(const uint8_t prk[32], const char *label, uint8_t *out,
		    size_t len);

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

struct tf_wire_challenge {
	const uint8_t *nonce; /* TF_WIRE_NONCE bytes */
	bool early;	      /* TF_WIRE_CHALLENGE_EARLY */
	const uint8_t *mac;   /* TF_WIRE_MAC bytes */
};

struct tf_wire_open {
	uint32_t reuse_id;
	const uint8_t *blob; /* blob_len <= TF_QP_ADDR_MAX */
	const uint8_t *priv; /* priv_len <= TF_WIRE_MAX_PRIV */
	/* The client's control QP: ctl_len <= TF_QP_ADDR_MAX, 0 if absent */
	const uint8_t *ctl;
	uint16_t blob_len, priv_len, ctl_len;
	uint32_t grant; /* the grant a kept connection's session takes, 0 */
	uint8_t flags;	/* TF_WIRE_OPEN_* */
};

struct tf_wire_hello {
	const uint8_t *nonce; /* TF_WIRE_NONCE bytes */
	bool auth;	      /* TF_WIRE_HELLO_AUTH: the client has a key */
	bool early;	      /* TF_WIRE_HELLO_EARLY: an early OPEN follows */
	uint64_t sent_ns;     /* with early: the client's realtime clock */
	/* Without auth, what the client's OPEN would carry (reuse_id 0,
	 * blob_len > 0). */
	struct tf_wire_open open;
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
	uint8_t flags; /* TF_WIRE_ACCEPT_* (an ADDR has none) */
	struct tf_wire_exposures exps;
};

int tf__wire_parse_hello(const struct tf_wire_rx *rx, struct tf_wire_hello *m);
int tf__wire_parse_challenge(const struct tf_wire_rx *rx,
			     struct tf_wire_challenge *m);
/* An OPEN: a new connection's (reuse_id 0, with the client's QP) or a
 * kept one's (its id, no blobs); which one fits is the caller's check. */
int tf__wire_parse_open(const struct tf_wire_rx *rx, struct tf_wire_open *m);
int tf__wire_parse_accept(const struct tf_wire_rx *rx,
			  struct tf_wire_accept *m);
/* The connection id and QP addresses that open an ACCEPT, and all of an
 * ADDR (@ctl_len 0: none). */
void tf__wire_put_qps(struct tf_wire_msg *m, uint32_t conn_id,
		      const uint8_t *blob, size_t blob_len, const uint8_t *ctl,
		      size_t ctl_len);
/* An ADDR: a non-zero conn_id and the server's QP (blob_len > 0), with
 * its control QP or none; in struct tf_wire_accept, without exposures. */
int tf__wire_parse_addr(const struct tf_wire_rx *rx, struct tf_wire_accept *m);
/* A REJECT: the error the peer reports, negative (-4096..-1), and for
 * -TF_EPEER the server's provider and transport if it sent them (else
 * empty strings; a malformed detail is ignored). */
#define TF_WIRE_NAME_MAX 16 /* with its NUL, as tf_caps_t's names */
struct tf_wire_reject {
	int err;
	char provider[TF_WIRE_NAME_MAX];
	char transport[TF_WIRE_NAME_MAX];
};

/* A REJECT with @err (negative or positive); @provider and @transport
 * (NULL: none) follow it for -TF_EPEER. */
void tf__wire_put_reject(struct tf_wire_msg *m, int err, const char *provider,
			 const char *transport);
/* A malformed REJECT is logged at debug level only: the caller reports
 * the refusal. */
int tf__wire_parse_reject(const struct tf_wire_rx *rx,
			  struct tf_wire_reject *m);
int tf__wire_parse_expose(const struct tf_wire_rx *rx,
			  struct tf_wire_exposures *m);

/* A GRANT: a non-zero id and one valid exposure, which end the body. */
struct tf_wire_grant {
	uint32_t grant;
	tf_exposure_info_t e;
};

void tf__wire_put_grant(struct tf_wire_msg *m, uint32_t grant,
			const tf_exposure_info_t *e);
int tf__wire_parse_grant(const struct tf_wire_rx *rx, struct tf_wire_grant *m);

#endif /* TOLLFREE_WIRE_INT_H */
