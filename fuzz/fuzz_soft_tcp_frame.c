/* SPDX-License-Identifier: MIT */
/*
 * fuzz_soft_tcp_frame - the soft provider's tcp frame header parser
 * (soft_tcp_parse_hdr in src/providers/soft/soft_tcp_frame.c).
 *
 * The input is a stream of frames as a peer would send them: headers are
 * parsed one after the other, skipping each accepted frame's payload, as
 * the transport's receive path does.  For every header accepted, three
 * properties of the contract in soft_int.h are checked:
 *  - every shorter prefix of it parses as "need more bytes" (0), never as
 *    an error or a header (nothing in a valid header's bytes is invalid);
 *  - re-encoding the decoded fields gives back the same bytes (so no byte
 *    of a header is ignored by the parser: reserved bytes are checked);
 *  - the limits hold: payload and READ length within max_msg, no payload
 *    where the opcode has none.
 *
 * Input layout: byte 0 chooses max_msg (0: the 16 MiB default, else
 * 2^(byte % 33)); the rest is the stream.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"
#include "soft_int.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_quiet();
	return 0;
}

static void check_hdr(const uint8_t *p, int n, uint64_t max_msg,
		      const struct soft_tcp_hdr *h)
{
	struct soft_tcp_hdr h2;
	uint8_t enc[SOFT_TCP_HDR_MAX], enc2[SOFT_TCP_HDR_MAX];

	FUZZ_CHECK(n >= SOFT_TCP_HDR_COMMON && n <= SOFT_TCP_HDR_MAX);
	FUZZ_CHECK(h->hdr_size == n && h->version == SOFT_TCP_VERSION);
	FUZZ_CHECK(h->size <= max_msg && h->length <= max_msg);
	for (int k = 0; k < n; k++)
		FUZZ_CHECK(soft_tcp_parse_hdr(p, (size_t)k, max_msg, &h2) == 0);
	FUZZ_CHECK(soft_tcp_encode_hdr(h, enc) == n);
	FUZZ_CHECK(!memcmp(enc, p, (size_t)n));
	/* Decoding the encoding gives the same fields (compared through a
	 * second encoding, which covers every field the opcode carries). */
	FUZZ_CHECK(soft_tcp_parse_hdr(enc, (size_t)n, max_msg, &h2) == n);
	FUZZ_CHECK(soft_tcp_encode_hdr(&h2, enc2) == n);
	FUZZ_CHECK(!memcmp(enc, enc2, (size_t)n));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t max_msg;
	size_t off;

	if (size < 1)
		return 0;
	max_msg = data[0] ? 1ull << (data[0] % 33) : 16ull << 20;
	for (off = 1; off < size;) {
		struct soft_tcp_hdr h;
		int n;

		n = soft_tcp_parse_hdr(data + off, size - off, max_msg, &h);
		if (n <= 0) {
			FUZZ_CHECK(n == 0 || n == -TF_EWIRE ||
				   n == -TF_EVERSION);
			break;
		}
		check_hdr(data + off, n, max_msg, &h);
		off += (size_t)n;
		off += h.size < size - off ? h.size : size - off;
	}
	return 0;
}
