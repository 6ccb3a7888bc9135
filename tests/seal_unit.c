/* SPDX-License-Identifier: MIT */
/*
 * seal_unit: the primitives of the authenticated handshake (seal.c)
 * against published answers, since both sides run the same code and an
 * interoperating pair would not notice a wrong but consistent one:
 * HMAC-SHA256 (RFC 4231 test cases 1, 2 and 6, the last with a key longer
 * than a block), the first block of HKDF (RFC 5869 test case 1: extract
 * with HMAC, expand with tf__hkdf_expand), and the transcript hash
 * (SHA-256 of "abc", FIPS 180-2), which must go on after a hash is taken.
 * Then HMAC against OpenSSL's own one-shot HMAC() over keys and messages
 * of every length from 0 to 200 bytes.  Last, the traffic keys: ciphers
 * made ahead and keyed later (tf__keys_spare_new) interoperate with
 * ciphers made keyed, in both directions and on both channels, and keys
 * from other nonces do not open what they sealed.
 */
#include <errno.h>
#include <string.h>

#include <openssl/hmac.h>

#include "session_int.h"
#include "tf_test.h"

static unsigned nibble(char c)
{
	if (c >= '0' && c <= '9')
		return (unsigned)(c - '0');
	CHECKF(c >= 'a' && c <= 'f', "not a hex digit: %c", c);
	return (unsigned)(c - 'a' + 10);
}

static void unhex(const char *h, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] =
			(uint8_t)(nibble(h[2 * i]) << 4 | nibble(h[2 * i + 1]));
}

static void check_eq(const char *what, const uint8_t *got, const char *hex,
		     size_t n)
{
	uint8_t want[64];

	unhex(hex, want, n);
	CHECKF(!memcmp(got, want, n), "%s differs from the published answer",
	       what);
}

static void rfc4231(void)
{
	uint8_t key[131], out[32];
	const char *d6 =
		"Test Using Larger Than Block-Size Key - Hash Key First";

	memset(key, 0x0b, 20);
	CHECK_OK(tf__hmac_sha256(key, 20, (const uint8_t *)"Hi There", 8, out));
	check_eq("HMAC test case 1", out,
		 "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32"
		 "cff7",
		 32);
	CHECK_OK(tf__hmac_sha256(
		(const uint8_t *)"Jefe", 4,
		(const uint8_t *)"what do ya want for nothing?", 28, out));
	check_eq("HMAC test case 2", out,
		 "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec"
		 "3843",
		 32);
	memset(key, 0xaa, sizeof(key));
	CHECK_OK(tf__hmac_sha256(key, sizeof(key), (const uint8_t *)d6,
				 strlen(d6), out));
	check_eq("HMAC test case 6", out,
		 "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee3"
		 "7f54",
		 32);
}

static void rfc5869(void)
{
	uint8_t ikm[22], salt[13], prk[32], okm[32];

	memset(ikm, 0x0b, sizeof(ikm));
	for (int i = 0; i < 13; i++)
		salt[i] = (uint8_t)i;
	CHECK_OK(tf__hmac_sha256(salt, sizeof(salt), ikm, sizeof(ikm), prk));
	check_eq("HKDF PRK", prk,
		 "077709362c2e32df0ddc3f0dc47bba6390b6c73bb50f9c3122ec844ad7c2"
		 "b3e5",
		 32);
	CHECK_OK(tf__hkdf_expand(
		prk, "\xf0\xf1\xf2\xf3\xf4\xf5\xf6\xf7\xf8\xf9", okm, 32));
	check_eq("HKDF OKM", okm,
		 "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4"
		 "c5bf",
		 32);
	/* Shorter outputs are its prefix; longer ones are refused. */
	memset(okm, 0, sizeof(okm));
	CHECK_OK(tf__hkdf_expand(
		prk, "\xf0\xf1\xf2\xf3\xf4\xf5\xf6\xf7\xf8\xf9", okm, 12));
	check_eq("HKDF OKM, 12 bytes", okm, "3cb25f25faacd57a90434f64", 12);
	CHECK(tf__hkdf_expand(prk, "x", okm, 33) == -EINVAL);
}

static void transcript(void)
{
	struct tf_transcript *t;
	uint8_t h[TF_WIRE_HASH];

	CHECK_OK(tf__transcript_new(&t));
	CHECK_OK(tf__transcript_add(t, "a", 1));
	CHECK_OK(tf__transcript_hash(t, h));
	check_eq("SHA-256 of \"a\"", h,
		 "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee"
		 "48bb",
		 32);
	/* The same transcript, continued. */
	CHECK_OK(tf__transcript_add(t, "bc", 2));
	CHECK_OK(tf__transcript_hash(t, h));
	check_eq("SHA-256 of \"abc\"", h,
		 "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f200"
		 "15ad",
		 32);
	tf__transcript_free(t);
}

static void against_openssl(void)
{
	uint8_t key[200], msg[200], out[32], want[32];
	unsigned n;

	for (size_t i = 0; i < sizeof(key); i++) {
		key[i] = (uint8_t)(i * 7 + 1);
		msg[i] = (uint8_t)(i * 13 + 5);
	}
	for (size_t kl = 0; kl <= sizeof(key); kl++) {
		size_t ml = (kl * 37) % (sizeof(msg) + 1);

		n = sizeof(want);
		CHECK(HMAC(EVP_sha256(), key, (int)kl, msg, ml, want, &n));
		CHECK_OK(tf__hmac_sha256(key, kl, msg, ml, out));
		CHECKF(n == 32 && !memcmp(out, want, 32),
		       "HMAC with a %zu-byte key over %zu bytes differs from "
		       "OpenSSL's",
		       kl, ml);
	}
}

/* A message of @n body bytes, sealed by @tx on @ch, opened by @rx. */
static int seal_open(struct tf_sess_keys *tx, struct tf_sess_keys *rx,
		     unsigned ch, size_t n)
{
	static struct tf_wire_msg m;
	static struct tf_wire_rx r;
	int ret;

	tf__wire_init(&m, TF_WIRE_EXPOSE);
	for (size_t i = 0; i < n; i++)
		tf__wire_put_u8(&m, (uint8_t)(i * 3 + ch));
	CHECK_OK(tf__wire_finish(&m));
	CHECK_OK(tf__wire_seal(tx, ch, &m, NULL));
	memset(&r, 0, sizeof(r));
	memcpy(r.hdr, m.buf, TF_WIRE_HDR_SIZE);
	CHECK_OK(tf__wire_hdr_decode(r.hdr, &r.h));
	memcpy(r.body, m.buf + TF_WIRE_HDR_SIZE, m.len - TF_WIRE_HDR_SIZE);
	ret = tf__wire_unseal(rx, ch, &r, NULL);
	if (!ret) {
		CHECK(r.h.size == n);
		for (size_t i = 0; i < n; i++)
			CHECK(r.body[i] == (uint8_t)(i * 3 + ch));
	}
	return ret;
}

static void traffic_keys(void)
{
	static const uint8_t psk[] = "seal_unit's pre-shared key";
	uint8_t nc[TF_WIRE_NONCE], ns[TF_WIRE_NONCE], prk[32];
	uint8_t fin_c[TF_WIRE_MAC], fin_s[TF_WIRE_MAC];
	struct tf_sess_keys *c, *s, *spare, *other;

	memset(nc, 0xc1, sizeof(nc));
	memset(ns, 0x5e, sizeof(ns));
	/* Client with a spare, server in two steps without one. */
	CHECK_OK(tf__keys_spare_new(&spare));
	CHECK_OK(tf__keys_derive(psk, sizeof(psk), nc, ns, false, fin_c, spare,
				 &c));
	CHECK(c == spare);
	CHECK_OK(tf__keys_proof_key(psk, sizeof(psk), nc, ns, prk, fin_s));
	CHECK(!memcmp(fin_c, fin_s, sizeof(fin_c)));
	CHECK_OK(tf__keys_from_prk(prk, true, NULL, &s));
	for (unsigned round = 0; round < 3; round++) {
		for (unsigned ch = 0; ch < TF_WIRE_CHANNELS; ch++) {
			CHECK_OK(seal_open(c, s, ch, 40 * round + ch));
			CHECK_OK(seal_open(s, c, ch, 7 * round));
		}
	}
	tf__keys_free(s);
	/* The other way round: the server's ciphers made ahead. */
	CHECK_OK(tf__keys_spare_new(&spare));
	CHECK_OK(tf__keys_from_prk(prk, true, spare, &s));
	tf__keys_free(c);
	CHECK_OK(tf__keys_derive(psk, sizeof(psk), nc, ns, false, fin_c, NULL,
				 &c));
	CHECK_OK(seal_open(c, s, 1, 100));
	CHECK_OK(seal_open(s, c, 0, 3));
	/* Another server nonce: nothing opens (each failure is logged). */
	tf_test_expect_log(2);
	ns[0] ^= 1;
	CHECK_OK(tf__keys_spare_new(&spare));
	CHECK_OK(tf__keys_derive(psk, sizeof(psk), nc, ns, true, fin_s, spare,
				 &other));
	CHECK(seal_open(c, other, 0, 10) == -TF_EAUTH);
	CHECK(seal_open(other, c, 0, 10) == -TF_EAUTH);
	tf__keys_free(other);
	tf__keys_free(c);
	tf__keys_free(s);
	explicit_bzero(prk, sizeof(prk));
}

int main(void)
{
	tf_test_begin("seal_unit");
	rfc4231();
	rfc5869();
	transcript();
	against_openssl();
	traffic_keys();
	return tf_test_end();
}
