/* SPDX-License-Identifier: MIT */
/*
 * verbs_blob.c - encoding and decoding of the verbs QP address blob
 * (layout in verbs_blob.h).  Compiled on every host, with or without
 * libibverbs, so that the unit test and the fuzzer reach the decoder.
 *
 * A rejected blob is logged here, at debug level: the caller (usually the
 * session layer) reports the failure itself, and this says which field.
 */
#include <errno.h>
#include <string.h>

#include "provider.h"
#include "verbs_blob.h"

#define SUBSYS "verbs"

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)(v >> 16));
	put16(p + 2, (uint16_t)v);
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)get16(p) << 16 | get16(p + 2);
}

static const uint8_t zero16[16];

/* The name of the first field of @a out of range, or NULL. */
static const char *bad_field(const struct tf_verbs_addr *a)
{
	if (a->link_layer != VERBS_LL_IB && a->link_layer != VERBS_LL_ETH)
		return "link layer";
	if (a->cm ? !a->qpn : a->qpn < VERBS_QPN_MIN || a->qpn > VERBS_24B_MASK)
		return "QPN";
	if (a->psn > VERBS_24B_MASK)
		return "PSN";
	if (a->mtu < VERBS_MTU_MIN || a->mtu > VERBS_MTU_MAX)
		return "MTU";
	if (!a->port)
		return "port";
	if (a->cm > 1)
		return "rdma_cm flag";
	if (!a->cm)
		return NULL;
	if (a->cm_family != 4 && a->cm_family != 6)
		return "address family";
	if (a->cm_family == 4 && memcmp(a->cm_ip + 4, zero16, 12))
		return "IPv4 address";
	if (!a->cm_port)
		return "listener port";
	if (!a->cm_token)
		return "token";
	return NULL;
}

int tf_verbs_addr_encode(const struct tf_verbs_addr *a, void *buf,
			 size_t *len_p)
{
	const char *bad = bad_field(a);
	size_t len = a->cm ? VERBS_ADDR_LEN_CM : VERBS_ADDR_LEN;
	uint8_t *p = buf;

	if (*len_p < len)
		return -ENOSPC;
	if (bad) {
		tf_log_error(SUBSYS, "local QP address has a bad %s", bad);
		return -EINVAL;
	}
	memset(p, 0, len);
	put32(p, VERBS_ADDR_MAGIC);
	p[4] = a->cm ? VERBS_ADDR_VERSION_CM : VERBS_ADDR_VERSION;
	p[5] = a->link_layer;
	put16(p + 6, (uint16_t)len);
	put32(p + 8, a->qpn);
	put32(p + 12, a->psn);
	memcpy(p + 16, a->gid, 16);
	put16(p + 32, a->lid);
	/* The MTU travels in bytes, not as a code of one API. */
	put16(p + 34, (uint16_t)(128u << a->mtu));
	p[36] = a->port;
	if (a->cm) {
		p[40] = a->cm_family;
		put16(p + 42, a->cm_port);
		memcpy(p + 44, a->cm_ip, 16);
		put32(p + 60, a->cm_token);
	}
	*len_p = len;
	return 0;
}

/* The IB MTU code of @bytes, or 0 if it is not one of 256..4096. */
static uint8_t mtu_code(uint16_t bytes)
{
	for (uint8_t m = VERBS_MTU_MIN; m <= VERBS_MTU_MAX; m++)
		if (bytes == 128u << m)
			return m;
	return 0;
}

int tf_verbs_addr_decode(const void *buf, size_t len, struct tf_verbs_addr *a)
{
	const uint8_t *p = buf;
	struct tf_verbs_addr d;
	const char *bad;
	uint16_t mtu_bytes;
	size_t want;

	/* Magic, version and length first, so that a short blob of another
	 * provider is a wire error rather than a read past its end. */
	if (len < 8) {
		tf_log_debug(SUBSYS, "peer address of %zu bytes", len);
		return -TF_EWIRE;
	}
	if (get32(p) != VERBS_ADDR_MAGIC) {
		tf_log_debug(SUBSYS, "peer address is not a verbs one");
		return -TF_EPEER;
	}
	if (p[4] != VERBS_ADDR_VERSION && p[4] != VERBS_ADDR_VERSION_CM) {
		tf_log_debug(SUBSYS, "peer address version %u (want %u or %u)",
			     p[4], VERBS_ADDR_VERSION, VERBS_ADDR_VERSION_CM);
		return -TF_EVERSION;
	}
	want = p[4] == VERBS_ADDR_VERSION ? VERBS_ADDR_LEN : VERBS_ADDR_LEN_CM;
	if (get16(p + 6) != want || len != want) {
		tf_log_debug(SUBSYS,
			     "peer address of %zu bytes says %u (want %zu)",
			     len, get16(p + 6), want);
		return -TF_EWIRE;
	}
	memset(&d, 0, sizeof(d));
	d.link_layer = p[5];
	d.qpn = get32(p + 8);
	d.psn = get32(p + 12);
	memcpy(d.gid, p + 16, 16);
	d.lid = get16(p + 32);
	mtu_bytes = get16(p + 34);
	d.mtu = mtu_code(mtu_bytes);
	d.port = p[36];
	if (want == VERBS_ADDR_LEN_CM) {
		d.cm = 1;
		d.cm_family = p[40];
		d.cm_port = get16(p + 42);
		memcpy(d.cm_ip, p + 44, 16);
		d.cm_token = get32(p + 60);
	}
	bad = bad_field(&d);
	if (!bad && (p[37] || p[38] || p[39] || (d.cm && p[41])))
		bad = "reserved byte";
	if (bad) {
		tf_log_debug(SUBSYS,
			     "peer address has a bad %s (link layer %u, QPN "
			     "0x%x, PSN 0x%x, MTU %u, port %u)",
			     bad, d.link_layer, d.qpn, d.psn, mtu_bytes,
			     d.port);
		return -TF_EWIRE;
	}
	*a = d;
	return 0;
}

int tf_verbs_addr_reachable(const struct tf_verbs_addr *peer, uint8_t local_ll,
			    bool local_cm)
{
	if (peer->link_layer != local_ll) {
		tf_log_debug(SUBSYS, "peer link layer %u, ours %u",
			     peer->link_layer, local_ll);
		return -TF_EPEER;
	}
	if (peer->cm != local_cm) {
		tf_log_debug(SUBSYS, "peer connects %s, we %s",
			     peer->cm ? "through rdma_cm" : "out of band",
			     local_cm ? "through rdma_cm" : "out of band");
		return -TF_EPEER;
	}
	/* rdma_cm resolves the route from the IP address. */
	if (peer->cm)
		return 0;
	if (local_ll == VERBS_LL_ETH && !memcmp(peer->gid, zero16, 16)) {
		tf_log_debug(SUBSYS, "RoCE peer without a GID");
		return -TF_EPEER;
	}
	if (local_ll == VERBS_LL_IB && !peer->lid) {
		tf_log_debug(SUBSYS, "IB peer without a LID");
		return -TF_EPEER;
	}
	return 0;
}

/* (address, listener port, QPN) as big-endian bytes, compared as such. */
static void cm_key(const struct tf_verbs_addr *a, uint8_t k[23])
{
	k[0] = a->cm_family;
	memcpy(k + 1, a->cm_ip, 16);
	put16(k + 17, a->cm_port);
	put32(k + 19, a->qpn);
}

bool tf_verbs_addr_cm_active(const struct tf_verbs_addr *self,
			     const struct tf_verbs_addr *peer)
{
	uint8_t ks[23], kp[23];

	cm_key(self, ks);
	cm_key(peer, kp);
	return memcmp(ks, kp, sizeof(ks)) > 0;
}
