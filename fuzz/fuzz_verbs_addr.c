/* SPDX-License-Identifier: MIT */
/*
 * fuzz_verbs_addr - QP address blobs of the verbs provider
 * (tf_verbs_addr_decode and tf_verbs_addr_reachable in
 * src/providers/verbs/verbs_blob.c, which tf_qp_connect on a verbs context
 * calls before anything touches the device; no device is needed here).
 *
 * The input is the blob itself.  Properties checked:
 *   - decode returns 0, -TF_EWIRE, -TF_EVERSION or -TF_EPEER, and leaves
 *     its output untouched unless it returns 0;
 *   - a decoded blob has every field in range, and encoding it again gives
 *     back the input byte for byte (the format has one encoding per
 *     address, so nothing the decoder accepts is silently changed);
 *   - the reachability check answers 0 or -TF_EPEER for either link
 *     layer and either way of connecting, and 0 for a foreign link layer
 *     or the other way of connecting never.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"
#include "verbs_blob.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_quiet();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tf_verbs_addr a, guard;
	uint8_t again[VERBS_ADDR_LEN_CM];
	size_t len = sizeof(again);
	int ret;

	memset(&a, 0x5c, sizeof(a));
	guard = a;
	ret = tf_verbs_addr_decode(data, size, &a);
	if (ret) {
		FUZZ_CHECK(ret == -TF_EWIRE || ret == -TF_EVERSION ||
			   ret == -TF_EPEER);
		FUZZ_CHECK(a.qpn == guard.qpn && a.psn == guard.psn &&
			   !memcmp(a.gid, guard.gid, 16) &&
			   a.lid == guard.lid && a.mtu == guard.mtu &&
			   a.link_layer == guard.link_layer &&
			   a.port == guard.port && a.cm == guard.cm &&
			   a.cm_token == guard.cm_token);
		return 0;
	}
	FUZZ_CHECK(size == (a.cm ? VERBS_ADDR_LEN_CM : VERBS_ADDR_LEN));
	if (a.cm)
		FUZZ_CHECK(a.qpn && a.cm_port && a.cm_token &&
			   (a.cm_family == 4 || a.cm_family == 6));
	else
		FUZZ_CHECK(a.qpn >= VERBS_QPN_MIN && a.qpn <= VERBS_24B_MASK);
	FUZZ_CHECK(a.psn <= VERBS_24B_MASK);
	FUZZ_CHECK(a.mtu >= VERBS_MTU_MIN && a.mtu <= VERBS_MTU_MAX);
	FUZZ_CHECK(a.link_layer == VERBS_LL_IB || a.link_layer == VERBS_LL_ETH);
	FUZZ_CHECK(a.port != 0);
	FUZZ_CHECK(tf_verbs_addr_encode(&a, again, &len) == 0);
	FUZZ_CHECK(len == size && !memcmp(again, data, len));
	for (uint8_t ll = VERBS_LL_IB; ll <= VERBS_LL_ETH; ll++)
		for (int cm = 0; cm <= 1; cm++) {
			ret = tf_verbs_addr_reachable(&a, ll, cm);
			FUZZ_CHECK(ret == 0 || ret == -TF_EPEER);
			FUZZ_CHECK((ll == a.link_layer && cm == a.cm) ||
				   ret == -TF_EPEER);
		}
	return 0;
}
