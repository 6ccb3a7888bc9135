/* SPDX-License-Identifier: MIT */
/*
 * fuzz_seal.h - the fixed connection keys of fuzz_wire's sealed messages,
 * shared with gen_corpus.c so that the sealed seeds it writes open in the
 * fuzzer.
 *
 * A real connection derives its keys from two fresh nonces; here both
 * nonces and the pre-shared key are constants, so that an input means the
 * same on every run.  The client seals (as it does OPEN, EXPOSE and CLOSE)
 * and the server opens.  A sealed handshake message is also bound to the
 * transcript hash; fuzz_wire uses the constant FUZZ_SEAL_TH_BYTE instead,
 * on the socket channel only, as conn.c does.
 */
#ifndef TOLLFREE_FUZZ_SEAL_H
#define TOLLFREE_FUZZ_SEAL_H

#include <stdbool.h>
#include <string.h>

#include "wire_int.h"

#define FUZZ_SEAL_PSK	  "fuzz wire key"
#define FUZZ_SEAL_NONCE_C 0xc1
#define FUZZ_SEAL_NONCE_S 0x5e
#define FUZZ_SEAL_TH_BYTE 0x7a

/* The server's (@server) or the client's keys of the fixed connection. */
static inline int fuzz_seal_keys(bool server, struct tf_sess_keys **k_p)
{
	uint8_t nc[TF_WIRE_NONCE], ns[TF_WIRE_NONCE], fin[TF_WIRE_MAC];

	memset(nc, FUZZ_SEAL_NONCE_C, sizeof(nc));
	memset(ns, FUZZ_SEAL_NONCE_S, sizeof(ns));
	return tf__keys_derive((const uint8_t *)FUZZ_SEAL_PSK,
			       sizeof(FUZZ_SEAL_PSK) - 1, nc, ns, server, fin,
			       NULL, k_p);
}

#endif /* TOLLFREE_FUZZ_SEAL_H */
