/* SPDX-License-Identifier: MIT */
/*
 * verbs_blob.h - the verbs provider's QP address blob (tf_qp_get_addr),
 * encoded and decoded without libibverbs: the blob comes from a peer, so
 * its decoder is unit tested (tests/verbs_addr.c) and fuzzed
 * (fuzz/fuzz_verbs_addr.c) on hosts without an RDMA device.  Only plain
 * integer types here; verbs_qp.c maps them to libibverbs' types.
 *
 * Layout (VERBS_ADDR_LEN bytes, every field big-endian):
 *    0 magic "TFVB"   4 version   5 link layer   6 length (u16)
 *    8 QPN            12 PSN      16 GID (16 bytes)
 *   32 LID (u16)      34 MTU in bytes (u16)       36 port   37 zero[3]
 * The magic comes first so that a blob of another provider is told apart
 * (-TF_EPEER) before its version is looked at.
 */
#ifndef TOLLFREE_VERBS_BLOB_H
#define TOLLFREE_VERBS_BLOB_H

#include <stddef.h>
#include <stdint.h>

#define VERBS_ADDR_MAGIC   0x54465642u /* "TFVB" */
#define VERBS_ADDR_VERSION 1
#define VERBS_ADDR_LEN	   40

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
	uint32_t qpn; /* VERBS_QPN_MIN..VERBS_24B_MASK */
	uint32_t psn; /* 0..VERBS_24B_MASK */
	uint8_t gid[16];
	uint16_t lid;
	uint8_t mtu;	    /* VERBS_MTU_MIN..VERBS_MTU_MAX */
	uint8_t link_layer; /* VERBS_LL_IB or VERBS_LL_ETH */
	uint8_t port;	    /* the sender's port, not 0 */
};

/*
 * Write @a as a blob into @buf of *@len_p bytes; *@len_p becomes
 * VERBS_ADDR_LEN.  Returns 0, -ENOSPC (buffer too small) or -EINVAL (a
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
 * Whether a device whose port has link layer @local_ll can reach @peer (a
 * decoded blob): the same link layer, and a GID (RoCE) or LID (IB) to
 * route to.  Returns 0 or -TF_EPEER.
 */
int tf_verbs_addr_reachable(const struct tf_verbs_addr *peer, uint8_t local_ll);

#endif /* TOLLFREE_VERBS_BLOB_H */
