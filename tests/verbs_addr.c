/* SPDX-License-Identifier: MIT */
/*
 * verbs_addr: the verbs provider's QP address blob codec (verbs_blob.c),
 * which needs neither libibverbs nor a device.  A blob round-trips through
 * encode and decode for every MTU and both link layers at the field
 * limits; decode rejects each bad field on its own (length field, every
 * truncation and extension, magic, version, link layer, QPN and PSN past
 * 24 bits, QPN 0 and 1, MTU sizes that are not 256..4096, port 0, each
 * reserved byte) and leaves its output untouched when it does; encode
 * refuses a short buffer and each out-of-range field; the reachability
 * check wants the same link layer and a GID (RoCE) or LID (IB).  The
 * rdma_cm form (version 2) round-trips with IPv4 and IPv6 listeners, any
 * QPN but 0, and is rejected for each bad field of its own; it reaches
 * only a device that connects through rdma_cm too, and of two blobs
 * exactly one side starts the connection.
 */
#include <string.h>

#include "tf_test.h"
#include "verbs_blob.h"

static struct tf_verbs_addr sample(void)
{
	struct tf_verbs_addr a = {.qpn = 0x123456,
				  .psn = 0xabcdef,
				  .lid = 0x4321,
				  .mtu = 3,
				  .link_layer = VERBS_LL_ETH,
				  .port = 1};

	for (int i = 0; i < 16; i++)
		a.gid[i] = (uint8_t)(0xf0 + i);
	return a;
}

/* An rdma_cm blob's fields: IPv4 10.1.2.3, port 0x4d2, token. */
static struct tf_verbs_addr sample_cm(void)
{
	struct tf_verbs_addr a = sample();

	a.qpn = 1; /* siw counts from 1 */
	a.cm = 1;
	a.cm_family = 4;
	a.cm_port = 0x4d2;
	memcpy(a.cm_ip, "\x0a\x01\x02\x03", 4);
	a.cm_token = 0xdeadbeef;
	return a;
}

static void encode(const struct tf_verbs_addr *a, uint8_t *blob)
{
	size_t want = a->cm ? VERBS_ADDR_LEN_CM : VERBS_ADDR_LEN;
	size_t len = VERBS_ADDR_LEN_CM;

	CHECK_OK(tf_verbs_addr_encode(a, blob, &len));
	CHECK(len == want);
}

static bool same(const struct tf_verbs_addr *a, const struct tf_verbs_addr *b)
{
	return a->qpn == b->qpn && a->psn == b->psn &&
	       !memcmp(a->gid, b->gid, 16) && a->lid == b->lid &&
	       a->mtu == b->mtu && a->link_layer == b->link_layer &&
	       a->port == b->port && a->cm == b->cm &&
	       a->cm_family == b->cm_family && a->cm_port == b->cm_port &&
	       !memcmp(a->cm_ip, b->cm_ip, 16) && a->cm_token == b->cm_token;
}

/* Decode @blob of @len bytes, expecting @err and, on failure, an
 * untouched output. */
static void expect(const uint8_t *blob, size_t len, int err, const char *what)
{
	struct tf_verbs_addr out, guard;
	int ret;

	memset(&out, 0x77, sizeof(out));
	guard = out;
	ret = tf_verbs_addr_decode(blob, len, &out);
	CHECKF(ret == err, "%s: decode = %d (%s), expected %d (%s)", what, ret,
	       tf_strerror(ret), err, tf_strerror(err));
	if (err)
		CHECKF(same(&out, &guard), "%s: output written on failure",
		       what);
}

static void test_round_trip(void)
{
	static const uint32_t qpns[] = {VERBS_QPN_MIN, 0x11, VERBS_24B_MASK};
	static const uint32_t psns[] = {0, 1, VERBS_24B_MASK};
	uint8_t blob[VERBS_ADDR_LEN_CM];
	struct tf_verbs_addr a = sample(), b;
	int n = 0;

	for (uint8_t ll = VERBS_LL_IB; ll <= VERBS_LL_ETH; ll++)
		for (uint8_t mtu = VERBS_MTU_MIN; mtu <= VERBS_MTU_MAX; mtu++)
			for (int i = 0; i < 3; i++) {
				a.link_layer = ll;
				a.mtu = mtu;
				a.qpn = qpns[i];
				a.psn = psns[2 - i];
				a.lid = (uint16_t)(i ? 0xffff : 0);
				a.port = (uint8_t)(i ? 255 : 1);
				encode(&a, blob);
				/* The MTU travels in bytes. */
				CHECK((blob[34] << 8 | blob[35]) == 128 << mtu);
				memset(&b, 0, sizeof(b));
				CHECK_OK(tf_verbs_addr_decode(
					blob, VERBS_ADDR_LEN, &b));
				CHECK(same(&a, &b));
				n++;
			}
	/* The byte layout of verbs_blob.h, for one blob. */
	a = sample();
	encode(&a, blob);
	CHECK(!memcmp(blob, "TFVB", 4));
	CHECK(blob[4] == VERBS_ADDR_VERSION && blob[5] == VERBS_LL_ETH);
	CHECK(blob[6] == 0 && blob[7] == VERBS_ADDR_LEN);
	CHECK(!memcmp(blob + 8, "\x00\x12\x34\x56\x00\xab\xcd\xef", 8));
	CHECK(blob[16] == 0xf0 && blob[31] == 0xff);
	CHECK(blob[32] == 0x43 && blob[33] == 0x21);
	CHECK(blob[34] == 0x04 && blob[35] == 0x00);
	CHECK(blob[36] == 1 && !blob[37] && !blob[38] && !blob[39]);
	tf_test_info("%d blobs round-tripped", n);
}

static void test_decode_rejects(void)
{
	static const uint16_t bad_mtus[] = {0,	 128,  255,  257,
					    768, 3000, 8192, 0xffff};
	struct tf_verbs_addr a = sample();
	uint8_t good[VERBS_ADDR_LEN], b[VERBS_ADDR_LEN + 1];

	encode(&a, good);
	expect(good, VERBS_ADDR_LEN, 0, "good blob");

	/* Every truncation, and one extra byte. */
	for (size_t len = 0; len < VERBS_ADDR_LEN; len++)
		expect(good, len, -TF_EWIRE, "truncated");
	memcpy(b, good, VERBS_ADDR_LEN);
	b[VERBS_ADDR_LEN] = 0;
	expect(b, VERBS_ADDR_LEN + 1, -TF_EWIRE, "one byte too long");

#define MUTATE(_what, _err, _stmt)                      \
	do {                                            \
		memcpy(b, good, VERBS_ADDR_LEN);        \
		_stmt;                                  \
		expect(b, VERBS_ADDR_LEN, _err, _what); \
	} while (0)

	MUTATE("magic", -TF_EPEER, b[0] ^= 0x20);
	MUTATE("soft magic", -TF_EPEER, memcpy(b, "TFSO", 4));
	MUTATE("version 0", -TF_EVERSION, b[4] = 0);
	MUTATE("version 3", -TF_EVERSION, b[4] = 3);
	MUTATE("version 2, length of version 1", -TF_EWIRE, b[4] = 2);
	MUTATE("length field 39", -TF_EWIRE, b[7] = VERBS_ADDR_LEN - 1);
	MUTATE("length field 41", -TF_EWIRE, b[7] = VERBS_ADDR_LEN + 1);
	MUTATE("length field high byte", -TF_EWIRE, b[6] = 1);
	MUTATE("link layer 0", -TF_EWIRE, b[5] = 0);
	MUTATE("link layer 3", -TF_EWIRE, b[5] = 3);
	MUTATE("QPN 0", -TF_EWIRE, memset(b + 8, 0, 4));
	MUTATE("QPN 1", -TF_EWIRE, memcpy(b + 8, "\0\0\0\1", 4));
	MUTATE("QPN 25 bits", -TF_EWIRE, b[8] = 0x01);
	MUTATE("QPN top byte", -TF_EWIRE, b[8] = 0x80);
	MUTATE("PSN 25 bits", -TF_EWIRE, b[12] = 0x01);
	MUTATE("PSN top byte", -TF_EWIRE, b[12] = 0xff);
	for (size_t i = 0; i < sizeof(bad_mtus) / sizeof(bad_mtus[0]); i++)
		MUTATE("MTU size", -TF_EWIRE,
		       (b[34] = (uint8_t)(bad_mtus[i] >> 8),
			b[35] = (uint8_t)bad_mtus[i]));
	MUTATE("port 0", -TF_EWIRE, b[36] = 0);
	for (int i = 37; i < VERBS_ADDR_LEN; i++)
		MUTATE("reserved byte", -TF_EWIRE, b[i] = 1);
	/* The magic is looked at before the version, the version before
	 * the length: a foreign or newer blob gets the precise error. */
	MUTATE("magic and version", -TF_EPEER, (b[0] = 0, b[4] = 9));
	MUTATE("version and length", -TF_EVERSION, (b[4] = 9, b[7] = 64));
	/* GID and LID take any value. */
	MUTATE("zero GID and LID", 0,
	       (memset(b + 16, 0, 16), memset(b + 32, 0, 2)));
#undef MUTATE
}

static void test_cm_round_trip(void)
{
	static const uint32_t qpns[] = {1, VERBS_24B_MASK + 1, 0xffffffffu};
	struct tf_verbs_addr a = sample_cm(), b;
	uint8_t blob[VERBS_ADDR_LEN_CM];

	for (int i = 0; i < 3; i++) {
		a.qpn = qpns[i];
		a.cm_family = (uint8_t)(i == 1 ? 6 : 4);
		memset(a.cm_ip, 0, 16);
		memset(a.cm_ip, 0xfe, a.cm_family == 4 ? 4 : 16);
		encode(&a, blob);
		memset(&b, 0, sizeof(b));
		CHECK_OK(tf_verbs_addr_decode(blob, VERBS_ADDR_LEN_CM, &b));
		CHECK(same(&a, &b));
	}
	/* The byte layout of verbs_blob.h. */
	a = sample_cm();
	encode(&a, blob);
	CHECK(!memcmp(blob, "TFVB", 4));
	CHECK(blob[4] == VERBS_ADDR_VERSION_CM && blob[7] == VERBS_ADDR_LEN_CM);
	CHECK(!memcmp(blob + 8, "\x00\x00\x00\x01", 4));
	CHECK(blob[36] == 1 && !blob[37] && !blob[38] && !blob[39]);
	CHECK(blob[40] == 4 && !blob[41] && blob[42] == 0x04 &&
	      blob[43] == 0xd2);
	CHECK(!memcmp(blob + 44, "\x0a\x01\x02\x03", 4));
	for (int i = 48; i < 60; i++)
		CHECK(!blob[i]);
	CHECK(!memcmp(blob + 60, "\xde\xad\xbe\xef", 4));
}

static void test_cm_decode_rejects(void)
{
	struct tf_verbs_addr a = sample_cm();
	uint8_t good[VERBS_ADDR_LEN_CM], b[VERBS_ADDR_LEN_CM + 1];

	encode(&a, good);
	expect(good, VERBS_ADDR_LEN_CM, 0, "good rdma_cm blob");
	for (size_t len = 8; len < VERBS_ADDR_LEN_CM; len++)
		expect(good, len, -TF_EWIRE, "truncated rdma_cm blob");
	memcpy(b, good, VERBS_ADDR_LEN_CM);
	b[VERBS_ADDR_LEN_CM] = 0;
	expect(b, VERBS_ADDR_LEN_CM + 1, -TF_EWIRE, "one byte too long");

#define MUTATE(_what, _err, _stmt)                         \
	do {                                               \
		memcpy(b, good, VERBS_ADDR_LEN_CM);        \
		_stmt;                                     \
		expect(b, VERBS_ADDR_LEN_CM, _err, _what); \
	} while (0)

	MUTATE("version 1, length of version 2", -TF_EWIRE, b[4] = 1);
	MUTATE("length field 40", -TF_EWIRE, b[7] = VERBS_ADDR_LEN);
	MUTATE("QPN 0", -TF_EWIRE, memset(b + 8, 0, 4));
	MUTATE("port 0", -TF_EWIRE, b[36] = 0);
	MUTATE("family 0", -TF_EWIRE, b[40] = 0);
	MUTATE("family 5", -TF_EWIRE, b[40] = 5);
	MUTATE("IPv4 with more bytes", -TF_EWIRE, b[59] = 1);
	MUTATE("listener port 0", -TF_EWIRE, (b[42] = 0, b[43] = 0));
	MUTATE("token 0", -TF_EWIRE, memset(b + 60, 0, 4));
	for (int i = 37; i < 40; i++)
		MUTATE("reserved byte", -TF_EWIRE, b[i] = 1);
	MUTATE("reserved byte 41", -TF_EWIRE, b[41] = 1);
	/* IPv6 takes all 16 bytes; QPNs past 24 bits are iWARP's. */
	MUTATE("IPv6", 0, (b[40] = 6, b[59] = 1));
	MUTATE("QPN 32 bits", 0, b[8] = 0xff);
#undef MUTATE
}

static void test_encode_rejects(void)
{
	struct tf_verbs_addr a;
	uint8_t blob[VERBS_ADDR_LEN_CM];
	size_t len = VERBS_ADDR_LEN - 1;

	a = sample();
	CHECK_ERR(tf_verbs_addr_encode(&a, blob, &len), -ENOSPC);
	CHECK(len == VERBS_ADDR_LEN - 1);

	/* A local field out of range is a bug: logged as an error. */
	tf_test_expect_log(7);
#define BAD(_stmt)                                                        \
	do {                                                              \
		a = sample();                                             \
		_stmt;                                                    \
		len = VERBS_ADDR_LEN_CM;                                  \
		CHECK_ERR(tf_verbs_addr_encode(&a, blob, &len), -EINVAL); \
	} while (0)

	BAD(a.qpn = 1);
	BAD(a.qpn = VERBS_24B_MASK + 1);
	BAD(a.psn = VERBS_24B_MASK + 1);
	BAD(a.mtu = VERBS_MTU_MIN - 1);
	BAD(a.mtu = VERBS_MTU_MAX + 1);
	BAD(a.link_layer = 0);
	BAD(a.port = 0);
	tf_test_expect_log(6);
	BAD((a = sample_cm(), a.qpn = 0));
	BAD((a = sample_cm(), a.cm = 2));
	BAD((a = sample_cm(), a.cm_family = 0));
	BAD((a = sample_cm(), a.cm_ip[4] = 1));
	BAD((a = sample_cm(), a.cm_port = 0));
	BAD((a = sample_cm(), a.cm_token = 0));
#undef BAD
	/* The rdma_cm form is longer. */
	a = sample_cm();
	len = VERBS_ADDR_LEN;
	CHECK_ERR(tf_verbs_addr_encode(&a, blob, &len), -ENOSPC);
}

static void test_reachable(void)
{
	struct tf_verbs_addr a = sample();

	struct tf_verbs_addr x, y;

	a.link_layer = VERBS_LL_ETH;
	CHECK_OK(tf_verbs_addr_reachable(&a, VERBS_LL_ETH, false));
	CHECK_ERR(tf_verbs_addr_reachable(&a, VERBS_LL_IB, false), -TF_EPEER);
	CHECK_ERR(tf_verbs_addr_reachable(&a, VERBS_LL_ETH, true), -TF_EPEER);
	memset(a.gid, 0, 16);
	CHECK_ERR(tf_verbs_addr_reachable(&a, VERBS_LL_ETH, false), -TF_EPEER);
	a.link_layer = VERBS_LL_IB;
	CHECK_OK(tf_verbs_addr_reachable(&a, VERBS_LL_IB, false));
	CHECK_ERR(tf_verbs_addr_reachable(&a, VERBS_LL_ETH, false), -TF_EPEER);
	a.lid = 0;
	CHECK_ERR(tf_verbs_addr_reachable(&a, VERBS_LL_IB, false), -TF_EPEER);

	/* rdma_cm finds the route itself: no GID needed, but both sides
	 * must connect through it. */
	a = sample_cm();
	memset(a.gid, 0, 16);
	CHECK_OK(tf_verbs_addr_reachable(&a, VERBS_LL_ETH, true));
	CHECK_ERR(tf_verbs_addr_reachable(&a, VERBS_LL_ETH, false), -TF_EPEER);
	CHECK_ERR(tf_verbs_addr_reachable(&a, VERBS_LL_IB, true), -TF_EPEER);

	/* One side starts: the larger address, then port, then QPN. */
	x = sample_cm();
	y = sample_cm();
	y.qpn = 2;
	CHECK(tf_verbs_addr_cm_active(&y, &x) &&
	      !tf_verbs_addr_cm_active(&x, &y));
	y.cm_port = 1;
	CHECK(tf_verbs_addr_cm_active(&x, &y) &&
	      !tf_verbs_addr_cm_active(&y, &x));
	y.cm_ip[3] = 4;
	CHECK(tf_verbs_addr_cm_active(&y, &x) &&
	      !tf_verbs_addr_cm_active(&x, &y));
}

int main(void)
{
	tf_test_begin("verbs_addr");
	test_round_trip();
	test_decode_rejects();
	test_cm_round_trip();
	test_cm_decode_rejects();
	test_encode_rejects();
	test_reachable();
	return tf_test_end();
}
