/* SPDX-License-Identifier: MIT */
/*
 * soft_tcp_frame.c - the tcp transport's frame codec: decoding and encoding
 * of the frame header (layout in soft_int.h, "tcp wire") and the rule that
 * tells which of two QPs opens their connection.  Pure functions (no state,
 * no allocation, no logging), so that tests/soft_tcp_frames.c and
 * fuzz/fuzz_soft_tcp_frame.c can call them directly.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <endian.h>
#include <errno.h>
#include <string.h>

#include "soft_int.h"

/* ---------------------------------------------------------------- codec */

static const uint16_t tcp_op_hdr[] = {
	[SOFT_TCP_OP_HELLO] = 40,     [SOFT_TCP_OP_SEND] = 24,
	[SOFT_TCP_OP_SEND_IMM] = 24,  [SOFT_TCP_OP_SEND_INV] = 24,
	[SOFT_TCP_OP_WRITE] = 32,     [SOFT_TCP_OP_WRITE_IMM] = 32,
	[SOFT_TCP_OP_READ_REQ] = 32,  [SOFT_TCP_OP_FETCH_ADD] = 48,
	[SOFT_TCP_OP_CMP_SWAP] = 48,  [SOFT_TCP_OP_ACK] = 16,
	[SOFT_TCP_OP_READ_RESP] = 16, [SOFT_TCP_OP_ATOMIC_RESP] = 24,
};
#define TCP_OP_MAX SOFT_TCP_OP_ATOMIC_RESP

static inline uint16_t get16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return be16toh(v);
}

static inline uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return be32toh(v);
}

static inline uint64_t get64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return be64toh(v);
}

static inline void put16(uint8_t *p, uint16_t v)
{
	v = htobe16(v);
	memcpy(p, &v, sizeof(v));
}

static inline void put32(uint8_t *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, sizeof(v));
}

static inline void put64(uint8_t *p, uint64_t v)
{
	v = htobe64(v);
	memcpy(p, &v, sizeof(v));
}

static bool tcp_op_has_payload(unsigned op)
{
	switch (op) {
	case SOFT_TCP_OP_SEND:
	case SOFT_TCP_OP_SEND_IMM:
	case SOFT_TCP_OP_SEND_INV:
	case SOFT_TCP_OP_WRITE:
	case SOFT_TCP_OP_WRITE_IMM:
	case SOFT_TCP_OP_READ_RESP:
		return true;
	default:
		return false;
	}
}

int soft_tcp_parse_hdr(const void *buf, size_t len, uint64_t max_msg,
		       struct soft_tcp_hdr *h)
{
	const uint8_t *p = buf;
	unsigned op;

	/* The version is checked first so that a peer speaking another
	 * version is told apart from garbage as early as possible. */
	if (len < 1)
		return 0;
	if (p[0] != SOFT_TCP_VERSION)
		return -TF_EVERSION;
	if (len < 2)
		return 0;
	op = p[1];
	if (op == 0 || op > TCP_OP_MAX)
		return -TF_EWIRE;
	if (len < SOFT_TCP_HDR_COMMON)
		return 0;

	memset(h, 0, sizeof(*h));
	h->version = p[0];
	h->opcode = op;
	h->flags = get16(p + 2);
	h->hdr_size = get16(p + 4);
	h->status = p[6];
	h->size = get32(p + 8);
	h->psn = get32(p + 12);
	/* No flags are defined in version 1 and the reserved byte is zero:
	 * accepting anything else would make them unusable later. */
	if (h->flags || p[7] || h->hdr_size != tcp_op_hdr[op])
		return -TF_EWIRE;
	if (tcp_op_has_payload(op) ? h->size > max_msg : h->size != 0)
		return -TF_EWIRE;
	if (op == SOFT_TCP_OP_ACK ? h->status > SOFT_TCP_ST_REM_OP
				  : h->status != 0)
		return -TF_EWIRE;
	if (len < h->hdr_size)
		return 0;

	switch (op) {
	case SOFT_TCP_OP_HELLO:
		h->dst_qpn = get32(p + 16);
		h->src_qpn = get32(p + 20);
		h->dst_nonce = get64(p + 24);
		h->src_nonce = get64(p + 32);
		if (h->psn)
			return -TF_EWIRE;
		break;
	case SOFT_TCP_OP_SEND:
	case SOFT_TCP_OP_SEND_IMM:
	case SOFT_TCP_OP_SEND_INV:
		h->imm = get32(p + 16);
		h->inv_rkey = get32(p + 20);
		if ((op != SOFT_TCP_OP_SEND_IMM && h->imm) ||
		    (op != SOFT_TCP_OP_SEND_INV && h->inv_rkey))
			return -TF_EWIRE;
		break;
	case SOFT_TCP_OP_WRITE:
	case SOFT_TCP_OP_WRITE_IMM:
		h->raddr = get64(p + 16);
		h->rkey = get32(p + 24);
		h->imm = get32(p + 28);
		/* A range that wraps is a well-formed request the target
		 * refuses (remote access error), not a protocol error. */
		if (op == SOFT_TCP_OP_WRITE && h->imm)
			return -TF_EWIRE;
		break;
	case SOFT_TCP_OP_READ_REQ:
		h->raddr = get64(p + 16);
		h->rkey = get32(p + 24);
		h->length = get32(p + 28);
		if (h->length > max_msg)
			return -TF_EWIRE;
		break;
	case SOFT_TCP_OP_FETCH_ADD:
	case SOFT_TCP_OP_CMP_SWAP:
		h->raddr = get64(p + 16);
		h->rkey = get32(p + 24);
		h->compare_add = get64(p + 32);
		h->swap = get64(p + 40);
		if (get32(p + 28) || (op == SOFT_TCP_OP_FETCH_ADD && h->swap))
			return -TF_EWIRE;
		break;
	case SOFT_TCP_OP_ATOMIC_RESP:
		h->orig = get64(p + 16);
		break;
	default: /* ACK, READ_RESP: common header only */
		break;
	}
	return h->hdr_size;
}

int soft_tcp_encode_hdr(const struct soft_tcp_hdr *h, void *buf)
{
	uint8_t *p = buf;
	unsigned op = h->opcode;
	uint16_t hs;

	if (op == 0 || op > TCP_OP_MAX)
		return -EINVAL;
	hs = tcp_op_hdr[op];
	memset(p, 0, hs);
	p[0] = SOFT_TCP_VERSION;
	p[1] = (uint8_t)op;
	put16(p + 2, h->flags);
	put16(p + 4, hs);
	p[6] = h->status;
	put32(p + 8, h->size);
	put32(p + 12, h->psn);
	switch (op) {
	case SOFT_TCP_OP_HELLO:
		put32(p + 16, h->dst_qpn);
		put32(p + 20, h->src_qpn);
		put64(p + 24, h->dst_nonce);
		put64(p + 32, h->src_nonce);
		break;
	case SOFT_TCP_OP_SEND:
	case SOFT_TCP_OP_SEND_IMM:
	case SOFT_TCP_OP_SEND_INV:
		put32(p + 16, h->imm);
		put32(p + 20, h->inv_rkey);
		break;
	case SOFT_TCP_OP_WRITE:
	case SOFT_TCP_OP_WRITE_IMM:
		put64(p + 16, h->raddr);
		put32(p + 24, h->rkey);
		put32(p + 28, h->imm);
		break;
	case SOFT_TCP_OP_READ_REQ:
		put64(p + 16, h->raddr);
		put32(p + 24, h->rkey);
		put32(p + 28, h->length);
		break;
	case SOFT_TCP_OP_FETCH_ADD:
	case SOFT_TCP_OP_CMP_SWAP:
		put64(p + 16, h->raddr);
		put32(p + 24, h->rkey);
		put64(p + 32, h->compare_add);
		put64(p + 40, h->swap);
		break;
	case SOFT_TCP_OP_ATOMIC_RESP:
		put64(p + 16, h->orig);
		break;
	default:
		break;
	}
	return hs;
}

bool soft_tcp_is_connector(uint64_t my_nonce, uint32_t my_qpn,
			   uint64_t peer_nonce, uint32_t peer_qpn)
{
	if (my_nonce != peer_nonce)
		return my_nonce < peer_nonce;
	return my_qpn < peer_qpn;
}
