/* SPDX-License-Identifier: MIT */
/*
 * verbs_blob.h - the verbs provider's QP address blob (tf_qp_get_addr),
 * encoded and decoded without libibverbs: the blob comes from a peer, so
 * its decoder is unit tested (tests/verbs_addr.c) and fuzzed
 * (fuzz/fuzz_verbs_addr.c) on hosts without an RDMA device.  Only plain
 * integer types here; verbs_qp.c maps them to libibverbs' types.
 *
 * Layout (every field big-endian).  Version 1, VERBS_ADDR_LEN bytes, is the
 * address of a QP that the peer moves to RTS itself (modify_qp):
 *    0 magic "TFVB"   4 version   5 link layer   6 length (u16)
 *    8 QPN            12 PSN      16 GID (16 bytes)
 *   32 LID (u16)      34 MTU in bytes (u16)       36 port   37 zero[3]
 * Version 2, VERBS_ADDR_LEN_CM bytes, is the address of a QP that connects
 * through rdma_cm (iWARP devices, or TOLLFREE_VERBS_CM=rdmacm): version 1's
 * fields, then where the sender's rdma_cm listener is and the token a
 * connection request for this QP must carry:
 *   40 address family (4 or 6)   41 zero   42 listener port (u16)
 *   44 IP address (16 bytes; IPv4 in the first 4, the rest zero)
 *   60 token (u32, not 0)
 * Its QPN is any 32-bit number but 0 (iWARP has no special QPs, and siw
 * counts from 1).  The magic comes first so that a blob of another
 * provider is told apart (-TF_EPEER) before its version is looked at.
 */
#ifndef TOLLFREE_VERBS_BLOB_H
#define TOLLFREE_VERBS_BLOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VERBS_ADDR_MAGIC      0x54465642u /* "TFVB" */
#define VERBS_ADDR_VERSION    1
#define VERBS_ADDR_LEN	      40
#define VERBS_ADDR_VERSION_CM 2
#define VERBS_ADDR_LEN_CM     64

/* Link-layer codes carried in the blob. */
#define VERBS_LL_IB  1
#define VERBS_LL_ETH 2

/* IB MTU codes, the values of enum ibv_mtu: 1 (256 bytes) to 5 (4096). */
#define VERBS_MTU_MIN 1
#define VERBS_MTU_MAX 5

/* QP numbers and PSNs are 24-bit; QPs 0 and 1 are the special QPs. */
#define VERBS_QPN_MIN  2
#define VERBS_24B_MASK 0xffffffu

/* The fields of a blob, each within the range the comments give. */
struct tf_verbs_addr {
	uint32_t qpn; /* VERBS_QPN_MIN..VERBS_24B_MASK; rdma_cm: not 0 */
	uint32_t psn; /* 0..VERBS_24B_MASK */
	uint8_t gid[16];
	uint16_t lid;
	uint8_t mtu;	    /* VERBS_MTU_MIN..VERBS_MTU_MAX */
	uint8_t link_layer; /* VERBS_LL_IB or VERBS_LL_ETH */
	uint8_t port;	    /* the sender's port, not 0 */
	/* Version 2 only (cm set): the sender's rdma_cm listener. */
	uint8_t cm;	   /* 1: the QP connects through rdma_cm */
	uint8_t cm_family; /* 4 or 6 */
	uint16_t cm_port;  /* not 0 */
	uint8_t cm_ip[16]; /* IPv4: the first 4 bytes, the rest zero */
	uint32_t cm_token; /* not 0 */
};

/*
 * Write @a as a blob into @buf of *@len_p bytes; *@len_p becomes
 * VERBS_ADDR_LEN, or VERBS_ADDR_LEN_CM if @a->cm is set.  Returns 0, -ENOSPC (buffer too small) or -EINVAL (a
 * field out of range: the peer would refuse the blob).
 */
int tf_verbs_addr_encode(const struct tf_verbs_addr *a, void *buf,
			 size_t *len_p);
/*
 * Decode the blob of @len bytes at @buf into *@a (written only on
 * success).  Returns 0, -TF_EPEER (not a verbs blob), -TF_EVERSION or
 * -TF_EWIRE (wrong length, a field out of range, reserved bytes set).
 */
int tf_verbs_addr_decode(const void *buf, size_t len, struct tf_verbs_addr *a);
/*
 * Whether a device whose port has link layer @local_ll, connecting through
 * rdma_cm if @local_cm, can reach @peer (a decoded blob): the same link
 * layer and the same way of connecting, and a GID (RoCE) or LID (IB) to
 * route to unless rdma_cm finds the route.  Returns 0 or -TF_EPEER.
 */
int tf_verbs_addr_reachable(const struct tf_verbs_addr *peer, uint8_t local_ll,
			    bool local_cm);
/*
 * Which side of an rdma_cm connection starts it: the one whose (address,
 * listener port, QPN) is larger, so that both sides agree from the two
 * blobs alone.  Returns true if @self starts it.
 */
bool tf_verbs_addr_cm_active(const struct tf_verbs_addr *self,
			     const struct tf_verbs_addr *peer);

#endif /* TOLLFREE_VERBS_BLOB_H */
