/* SPDX-License-Identifier: MIT */
/*
 * seal.c - the cryptography of an authenticated connection (a node with a
 * pre-shared key): key derivation, the handshake transcript, the server's
 * key proof, and sealing (AES-256-GCM) of every message after it.
 *
 * Keys (RFC 5869 HKDF with SHA-256, as TLS 1.3 derives its traffic keys):
 *   prk   = HKDF-Extract(salt = nonce_c | nonce_s, ikm = psk)
 *   fin_s = HKDF-Expand(prk, "tollfree v3 s fin", 32)   server's proof
 *   key_c = HKDF-Expand(prk, "tollfree v3 c key", 32)   client -> server
 *   iv_c  = HKDF-Expand(prk, "tollfree v3 c iv", 12)
 *   key_s, iv_s likewise with "s".
 * Both nonces are fresh per connection (32 random bytes each side), so no
 * two connections share keys, and nothing sealed on one can be replayed on
 * another.
 *
 * Sealing: the body is encrypted in place and a 16-byte tag appended; the
 * header (with the sealed size and TF_WIRE_F_SEALED) is authenticated as
 * associated data, and during the handshake the SHA-256 of every message
 * exchanged before this one as well (the transcript), so that a relay that
 * changes, drops, reorders or replays any byte of the handshake makes the
 * next seal fail.  The GCM nonce is the direction's IV XOR (channel << 63 |
 * sequence number): each channel (the socket, the control QP) is ordered,
 * and each side counts the messages it sealed and opened on it, so a
 * replayed, dropped or reordered message fails to open as well.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

/*
 * SHA-256 through its plain context (SHA256_CTX), which OpenSSL 3 marks
 * deprecated in favour of EVP: an EVP digest context lives on the heap and
 * every copy of one frees and allocates its state, while HMAC keyed once
 * and HKDF (below) copy a hash state for every output.  With EVP a
 * client took about 12 us from the CHALLENGE to its checked proof and
 * keys, with plain contexts about 7 (the server's CHALLENGE: 5.2 and 3.8
 * us); the plain context is a struct copied by assignment.  The same
 * assembly does the hashing either way.  AES-256-GCM stays with EVP.
 */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

#include "session_int.h"

#define S TF_SESS_SUBSYS

/*
 * The cipher, looked up once.  OpenSSL 3 looks an algorithm up in its
 * provider store, under a lock, each time EVP_aes_256_gcm() is used
 * without a fetched object.  Fetched objects are immutable and may be
 * shared by threads.
 */
static pthread_once_t algs_once = PTHREAD_ONCE_INIT;
static const EVP_CIPHER *alg_gcm;

static void algs_fetch(void)
{
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
	alg_gcm = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
#endif
	/* Where fetching is not available or failed: the built-in. */
	if (!alg_gcm)
		alg_gcm = EVP_aes_256_gcm();
}

static void algs(void)
{
	pthread_once(&algs_once, algs_fetch);
}

struct tf_sess_keys {
	EVP_CIPHER_CTX *tx, *rx; /* keyed once; the IV is set per message */
	uint8_t iv_tx[TF_WIRE_IV], iv_rx[TF_WIRE_IV];
	uint64_t tx_seq[TF_WIRE_CHANNELS], rx_seq[TF_WIRE_CHANNELS];
};

struct tf_transcript {
	SHA256_CTX md;
};

static int crypto_fail(const char *what)
{
	tf_log_error(S, "%s failed in libcrypto", what);
	return -EIO;
}

/*
 * HMAC-SHA256 (RFC 2104) keyed once: the hash states after the inner and
 * outer padded keys, copied for each message (HKDF expands five times
 * from one key).
 */
struct hmac_key {
	SHA256_CTX in, out;
};

/* Wipes the keyed states. */
static void hmac_free(struct hmac_key *h)
{
	OPENSSL_cleanse(h, sizeof(*h));
}

static int hmac_init(struct hmac_key *h, const uint8_t *key, size_t key_len)
{
	uint8_t k[64] = {0}, pad[64];
	int ok = 1;

	/* A key longer than the block is hashed first. */
	if (key_len > sizeof(k))
		ok = SHA256(key, key_len, k) != NULL;
	else
		memcpy(k, key, key_len);
	for (size_t i = 0; i < sizeof(pad); i++)
		pad[i] = k[i] ^ 0x36;
	ok = ok && SHA256_Init(&h->in) == 1 &&
	     SHA256_Update(&h->in, pad, sizeof(pad)) == 1;
	for (size_t i = 0; i < sizeof(pad); i++)
		pad[i] = k[i] ^ 0x5c;
	ok = ok && SHA256_Init(&h->out) == 1 &&
	     SHA256_Update(&h->out, pad, sizeof(pad)) == 1;
	OPENSSL_cleanse(k, sizeof(k));
	OPENSSL_cleanse(pad, sizeof(pad));
	if (!ok) {
		hmac_free(h);
		return crypto_fail("HMAC-SHA256 set-up");
	}
	return 0;
}

static int hmac_run(const struct hmac_key *h, const uint8_t *data, size_t len,
		    uint8_t out[32])
{
	uint8_t inner[32];
	SHA256_CTX c = h->in;
	int ok;

	ok = SHA256_Update(&c, data, len) == 1 && SHA256_Final(inner, &c) == 1;
	c = h->out;
	ok = ok && SHA256_Update(&c, inner, sizeof(inner)) == 1 &&
	     SHA256_Final(out, &c) == 1;
	OPENSSL_cleanse(inner, sizeof(inner));
	OPENSSL_cleanse(&c, sizeof(c));
	return ok ? 0 : crypto_fail("HMAC-SHA256");
}

int tf__hmac_sha256(const uint8_t *key, size_t key_len, const uint8_t *data,
		    size_t len, uint8_t out[32])
{
	struct hmac_key h;
	int ret = hmac_init(&h, key, key_len);

	if (ret)
		return ret;
	ret = hmac_run(&h, data, len, out);
	hmac_free(&h);
	return ret;
}

/* HKDF-Expand for outputs of at most one block (RFC 5869 2.3, N = 1). */
static int hkdf_expand(struct hmac_key *prk, const char *label, uint8_t *out,
		       size_t len)
{
	uint8_t info[64], t[32];
	size_t ll = strlen(label);
	int ret;

	if (ll + 1 > sizeof(info) || len > sizeof(t))
		return -EINVAL;
	memcpy(info, label, ll);
	info[ll] = 1;
	ret = hmac_run(prk, info, ll + 1, t);
	if (!ret)
		memcpy(out, t, len);
	OPENSSL_cleanse(t, sizeof(t));
	return ret;
}

int tf__hkdf_expand(const uint8_t prk[32], const char *label, uint8_t *out,
		    size_t len)
{
	struct hmac_key hk;
	int ret = hmac_init(&hk, prk, 32);

	if (ret)
		return ret;
	ret = hkdf_expand(&hk, label, out, len);
	hmac_free(&hk);
	return ret;
}

/* An AES-256-GCM context for one direction, keyed with @key, or with none
 * yet if @key is NULL (keyed later with EVP_CipherInit_ex). */
static EVP_CIPHER_CTX *gcm_ctx(const uint8_t *key, bool enc)
{
	EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();

	if (!x)
		return NULL;
	algs();
	if (EVP_CipherInit_ex(x, alg_gcm, NULL, NULL, NULL, enc ? 1 : 0) != 1 ||
	    EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_GCM_SET_IVLEN, TF_WIRE_IV, NULL) !=
		    1 ||
	    (key && EVP_CipherInit_ex(x, NULL, NULL, key, NULL, -1) != 1)) {
		EVP_CIPHER_CTX_free(x);
		return NULL;
	}
	return x;
}

/* HKDF-Extract (HMAC(salt = nonce_c | nonce_s, ikm = psk)) into @prk,
 * keyed into @hk, and the server's proof key from it. */
static int keys_prk(const uint8_t *psk, size_t psk_len,
		    const uint8_t nonce_c[TF_WIRE_NONCE],
		    const uint8_t nonce_s[TF_WIRE_NONCE], uint8_t prk[32],
		    struct hmac_key *hk, uint8_t fin_s[TF_WIRE_MAC])
{
	uint8_t salt[2 * TF_WIRE_NONCE];
	int ret;

	memcpy(salt, nonce_c, TF_WIRE_NONCE);
	memcpy(salt + TF_WIRE_NONCE, nonce_s, TF_WIRE_NONCE);
	ret = tf__hmac_sha256(salt, sizeof(salt), psk, psk_len, prk);
	if (!ret)
		ret = hmac_init(hk, prk, 32);
	if (!ret)
		ret = hkdf_expand(hk, "tollfree v3 s fin", fin_s, TF_WIRE_MAC);
	return ret;
}

/* Key the cipher @x, made by gcm_ctx(NULL, ...), with @key. */
static int gcm_key(EVP_CIPHER_CTX *x, const uint8_t *key)
{
	return EVP_CipherInit_ex(x, NULL, NULL, key, NULL, -1) == 1 ? 0 : -EIO;
}

/* The traffic keys and ciphers from @hk (keyed with the PRK): into the
 * ciphers of @spare (tf__keys_spare_new; taken over, freed on failure)
 * or new ones. */
static int keys_traffic(struct hmac_key *hk, bool server,
			struct tf_sess_keys *spare, struct tf_sess_keys **k_p)
{
	uint8_t kc[32], ks[32];
	struct tf_sess_keys *k = spare;
	int ret;

	if (!k)
		k = tf__calloc(1, sizeof(*k));
	if (!k)
		return -ENOMEM;
	ret = hkdf_expand(hk, "tollfree v3 c key", kc, sizeof(kc));
	if (!ret)
		ret = hkdf_expand(hk, "tollfree v3 s key", ks, sizeof(ks));
	if (!ret)
		ret = hkdf_expand(hk, "tollfree v3 c iv",
				  server ? k->iv_rx : k->iv_tx, TF_WIRE_IV);
	if (!ret)
		ret = hkdf_expand(hk, "tollfree v3 s iv",
				  server ? k->iv_tx : k->iv_rx, TF_WIRE_IV);
	if (!ret && spare) {
		if (gcm_key(k->tx, server ? ks : kc) ||
		    gcm_key(k->rx, server ? kc : ks))
			ret = crypto_fail("AES-256-GCM set-up");
	} else if (!ret) {
		k->tx = gcm_ctx(server ? ks : kc, true);
		k->rx = gcm_ctx(server ? kc : ks, false);
		if (!k->tx || !k->rx)
			ret = crypto_fail("AES-256-GCM set-up");
	}
	OPENSSL_cleanse(kc, sizeof(kc));
	OPENSSL_cleanse(ks, sizeof(ks));
	if (ret) {
		tf__keys_free(k);
		return ret;
	}
	*k_p = k;
	return 0;
}

int tf__keys_spare_new(struct tf_sess_keys **k_p)
{
	struct tf_sess_keys *k = tf__calloc(1, sizeof(*k));

	if (!k)
		return -ENOMEM;
	k->tx = gcm_ctx(NULL, true);
	k->rx = gcm_ctx(NULL, false);
	if (!k->tx || !k->rx) {
		tf__keys_free(k);
		return crypto_fail("AES-256-GCM set-up");
	}
	*k_p = k;
	return 0;
}

int tf__keys_derive(const uint8_t *psk, size_t psk_len,
		    const uint8_t nonce_c[TF_WIRE_NONCE],
		    const uint8_t nonce_s[TF_WIRE_NONCE], bool server,
		    uint8_t fin_s[TF_WIRE_MAC], struct tf_sess_keys *spare,
		    struct tf_sess_keys **k_p)
{
	struct hmac_key hk = {0};
	uint8_t prk[32];
	int ret;

	ret = keys_prk(psk, psk_len, nonce_c, nonce_s, prk, &hk, fin_s);
	if (!ret)
		ret = keys_traffic(&hk, server, spare, k_p);
	else
		tf__keys_free(spare);
	hmac_free(&hk);
	OPENSSL_cleanse(prk, sizeof(prk));
	return ret;
}

int tf__keys_proof_key(const uint8_t *psk, size_t psk_len,
		       const uint8_t nonce_c[TF_WIRE_NONCE],
		       const uint8_t nonce_s[TF_WIRE_NONCE], uint8_t prk[32],
		       uint8_t fin_s[TF_WIRE_MAC])
{
	struct hmac_key hk = {0};
	int ret = keys_prk(psk, psk_len, nonce_c, nonce_s, prk, &hk, fin_s);

	hmac_free(&hk);
	if (ret)
		OPENSSL_cleanse(prk, 32);
	return ret;
}

int tf__keys_from_prk(const uint8_t prk[32], bool server,
		      struct tf_sess_keys *spare, struct tf_sess_keys **k_p)
{
	struct hmac_key hk = {0};
	int ret = hmac_init(&hk, prk, 32);

	if (!ret)
		ret = keys_traffic(&hk, server, spare, k_p);
	else
		tf__keys_free(spare);
	hmac_free(&hk);
	return ret;
}

/* A node's early key K_e = HKDF-Extract(salt = its label, ikm = psk),
 * keyed for HMAC once: each early OPEN's key is HMAC(K_e, nonce_c). */
struct tf_early_key {
	struct hmac_key hk;
};

int tf__early_key_new(const uint8_t *psk, size_t psk_len,
		      struct tf_early_key **e_p)
{
	static const char label[] = "tollfree v7 early";
	struct tf_early_key *e = tf__calloc(1, sizeof(*e));
	uint8_t ke[32];
	int ret;

	if (!e)
		return -ENOMEM;
	ret = tf__hmac_sha256((const uint8_t *)label, sizeof(label) - 1, psk,
			      psk_len, ke);
	if (!ret)
		ret = hmac_init(&e->hk, ke, sizeof(ke));
	OPENSSL_cleanse(ke, sizeof(ke));
	if (ret) {
		tf__free(e);
		return ret;
	}
	*e_p = e;
	return 0;
}

void tf__early_key_free(struct tf_early_key *e)
{
	if (!e)
		return;
	hmac_free(&e->hk);
	tf__free(e);
}

int tf__keys_early_rekey(const struct tf_early_key *e,
			 const uint8_t nonce_c[TF_WIRE_NONCE],
			 struct tf_sess_keys *k)
{
	EVP_CIPHER_CTX *x = k->tx ? k->tx : k->rx;
	uint8_t key[32];
	int ret;

	/* One message under this key, the client's: one direction, and
	 * the IV all zeros (the nonce is unique since the key is). */
	ret = hmac_run(&e->hk, nonce_c, TF_WIRE_NONCE, key);
	if (!ret && gcm_key(x, key))
		ret = crypto_fail("AES-256-GCM set-up");
	OPENSSL_cleanse(key, sizeof(key));
	memset(k->tx_seq, 0, sizeof(k->tx_seq));
	memset(k->rx_seq, 0, sizeof(k->rx_seq));
	return ret;
}

int tf__keys_early(const struct tf_early_key *e,
		   const uint8_t nonce_c[TF_WIRE_NONCE], bool server,
		   struct tf_sess_keys **k_p)
{
	struct tf_sess_keys *k = tf__calloc(1, sizeof(*k));
	int ret;

	if (!k)
		return -ENOMEM;
	if (server)
		k->rx = gcm_ctx(NULL, false);
	else
		k->tx = gcm_ctx(NULL, true);
	ret = k->rx || k->tx ? tf__keys_early_rekey(e, nonce_c, k)
			     : crypto_fail("AES-256-GCM set-up");
	if (ret) {
		tf__keys_free(k);
		return ret;
	}
	*k_p = k;
	return 0;
}

void tf__keys_free(struct tf_sess_keys *k)
{
	if (!k)
		return;
	EVP_CIPHER_CTX_free(k->tx);
	EVP_CIPHER_CTX_free(k->rx);
	OPENSSL_cleanse(k, sizeof(*k));
	tf__free(k);
}

static void gcm_nonce(const uint8_t iv[TF_WIRE_IV], unsigned ch, uint64_t seq,
		      uint8_t out[TF_WIRE_IV])
{
	uint64_t v = ((uint64_t)ch << 63) | seq;

	memcpy(out, iv, TF_WIRE_IV);
	for (int i = 0; i < 8; i++)
		out[TF_WIRE_IV - 1 - i] ^= (uint8_t)(v >> (8 * i));
}

int tf__wire_seal(struct tf_sess_keys *k, unsigned ch, struct tf_wire_msg *m,
		  const uint8_t *th)
{
	size_t body = m->len - TF_WIRE_HDR_SIZE;
	uint8_t nonce[TF_WIRE_IV];
	int outl = 0, fin = 0;

	if (ch >= TF_WIRE_CHANNELS || m->overflow ||
	    body + TF_WIRE_TAG > TF_WIRE_MAX_BODY)
		return -EMSGSIZE;
	/* The header as it will travel: sealed flag and final size. */
	tf__wire_set_sealed(m, body + TF_WIRE_TAG);
	gcm_nonce(k->iv_tx, ch, k->tx_seq[ch], nonce);
	if (EVP_EncryptInit_ex(k->tx, NULL, NULL, NULL, nonce) != 1 ||
	    EVP_EncryptUpdate(k->tx, NULL, &outl, m->buf, TF_WIRE_HDR_SIZE) !=
		    1 ||
	    (th &&
	     EVP_EncryptUpdate(k->tx, NULL, &outl, th, TF_WIRE_HASH) != 1) ||
	    EVP_EncryptUpdate(k->tx, m->buf + TF_WIRE_HDR_SIZE, &outl,
			      m->buf + TF_WIRE_HDR_SIZE, (int)body) != 1 ||
	    EVP_EncryptFinal_ex(k->tx, m->buf + TF_WIRE_HDR_SIZE + outl,
				&fin) != 1 ||
	    EVP_CIPHER_CTX_ctrl(k->tx, EVP_CTRL_GCM_GET_TAG, TF_WIRE_TAG,
				m->buf + TF_WIRE_HDR_SIZE + body) != 1)
		return crypto_fail("AES-256-GCM seal");
	m->len += TF_WIRE_TAG;
	k->tx_seq[ch]++;
	return 0;
}

int tf__wire_unseal(struct tf_sess_keys *k, unsigned ch, struct tf_wire_rx *rx,
		    const uint8_t *th)
{
	uint8_t nonce[TF_WIRE_IV];
	size_t body;
	int outl = 0, fin = 0;

	if (ch >= TF_WIRE_CHANNELS)
		return -EINVAL;
	if (!(rx->h.flags & TF_WIRE_F_SEALED) || rx->h.size < TF_WIRE_TAG) {
		tf_log_warn(S,
			    "peer sent an unsealed %s on an authenticated "
			    "connection",
			    tf__wire_op_name(rx->h.op));
		return -TF_EAUTH;
	}
	body = rx->h.size - TF_WIRE_TAG;
	gcm_nonce(k->iv_rx, ch, k->rx_seq[ch], nonce);
	/* The header is authenticated as it arrived: its first
	 * TF_WIRE_HDR_SIZE bytes (a longer header's extension is not). */
	if (EVP_DecryptInit_ex(k->rx, NULL, NULL, NULL, nonce) != 1 ||
	    EVP_DecryptUpdate(k->rx, NULL, &outl, rx->hdr, TF_WIRE_HDR_SIZE) !=
		    1 ||
	    (th &&
	     EVP_DecryptUpdate(k->rx, NULL, &outl, th, TF_WIRE_HASH) != 1) ||
	    EVP_DecryptUpdate(k->rx, rx->body, &outl, rx->body, (int)body) !=
		    1 ||
	    EVP_CIPHER_CTX_ctrl(k->rx, EVP_CTRL_GCM_SET_TAG, TF_WIRE_TAG,
				rx->body + body) != 1)
		return crypto_fail("AES-256-GCM open");
	if (EVP_DecryptFinal_ex(k->rx, rx->body + outl, &fin) != 1) {
		/* Whatever was decrypted is not to be looked at. */
		OPENSSL_cleanse(rx->body, body);
		tf_log_warn(S,
			    "%s failed authentication (wrong key, or "
			    "changed, replayed or reordered on the way)",
			    tf__wire_op_name(rx->h.op));
		return -TF_EAUTH;
	}
	rx->h.size = (uint32_t)body;
	k->rx_seq[ch]++;
	return 0;
}

/* ------------------------------------------------------------ transcript */

int tf__transcript_new(struct tf_transcript **t_p)
{
	struct tf_transcript *t = tf__calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	if (SHA256_Init(&t->md) != 1) {
		tf__transcript_free(t);
		return crypto_fail("SHA-256 set-up");
	}
	*t_p = t;
	return 0;
}

void tf__transcript_free(struct tf_transcript *t)
{
	if (!t)
		return;
	OPENSSL_cleanse(t, sizeof(*t));
	tf__free(t);
}

int tf__transcript_add(struct tf_transcript *t, const void *b, size_t n)
{
	if (SHA256_Update(&t->md, b, n) != 1)
		return crypto_fail("SHA-256");
	return 0;
}

int tf__transcript_add_msg(struct tf_transcript *t, const struct tf_wire_msg *m)
{
	return tf__transcript_add(t, m->buf, m->len);
}

int tf__transcript_add_rx(struct tf_transcript *t, const struct tf_wire_rx *rx)
{
	int ret = tf__transcript_add(t, rx->hdr, rx->h.hdr_size);

	return ret ? ret : tf__transcript_add(t, rx->body, rx->h.size);
}

int tf__transcript_hash(const struct tf_transcript *t,
			uint8_t out[TF_WIRE_HASH])
{
	/* A copy: the transcript goes on after this hash. */
	SHA256_CTX c = t->md;
	int ok = SHA256_Final(out, &c) == 1;

	OPENSSL_cleanse(&c, sizeof(c));
	return ok ? 0 : crypto_fail("SHA-256");
}

int tf__proof_make(const uint8_t fin[TF_WIRE_MAC], const uint8_t *th,
		   uint8_t out[TF_WIRE_MAC])
{
	return tf__hmac_sha256(fin, TF_WIRE_MAC, th, TF_WIRE_HASH, out);
}

bool tf__proof_equal(const uint8_t *a, const uint8_t *b)
{
	return CRYPTO_memcmp(a, b, TF_WIRE_MAC) == 0;
}
