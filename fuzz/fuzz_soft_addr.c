/* SPDX-License-Identifier: MIT */
/*
 * fuzz_soft_addr - QP address blobs handed to tf_qp_connect on a soft
 * context (addr_decode in src/providers/soft/soft.c, which is static: the
 * public entry point is the nearest one that reaches it).
 *
 * Safety: a blob that decodes must not make the fuzzer talk to anything.
 * The context is opened with the shm transport only, so the tcp part of a
 * blob is never used; and shm is chosen only for a peer with this host's
 * boot id, which the harness makes sure an input never carries (it flips a
 * bit of it).  Every decodable blob therefore ends in "no common
 * transport" (-TF_EPEER) and the QP stays in INIT for the next input.
 *
 * The input is the blob itself.  Blobs of the verbs provider ("TFVB") are
 * part of the seed corpus: soft must tell them apart (-TF_EPEER).
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"

static tf_context_t *ctx;
static tf_pd_t *pd;
static tf_cq_t *cq;
static tf_qp_t *qp;
static uint8_t host_id[16];

/* Offset and length of the boot id in a soft blob (soft.c). */
#define BLOB_HOST_OFF 32
#define BLOB_HOST_LEN 16

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	tf_context_params_t cp = {.field_mask = TF_CONTEXT_PARAM_PROVIDER |
						TF_CONTEXT_PARAM_TRANSPORT,
				  .provider = "soft",
				  .transport = "shm"};
	tf_qp_params_t qpp = {0};
	uint8_t blob[TF_QP_ADDR_MAX];
	size_t len = sizeof(blob);

	(void)argc;
	(void)argv;
	fuzz_quiet();
	if (tf_context_open(&cp, &ctx) || tf_pd_create(ctx, &pd) ||
	    tf_cq_create(ctx, NULL, &cq))
		goto fail;
	qpp.send_cq = cq;
	qpp.recv_cq = cq;
	if (tf_qp_create(pd, &qpp, &qp) || tf_qp_get_addr(qp, blob, &len) ||
	    len < BLOB_HOST_OFF + BLOB_HOST_LEN)
		goto fail;
	memcpy(host_id, blob + BLOB_HOST_OFF, BLOB_HOST_LEN);
	return 0;
fail:
	fprintf(stderr, "fuzz_soft_addr: cannot set up a soft context\n");
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t blob[TF_QP_ADDR_MAX + 16];
	int ret;

	if (size > sizeof(blob))
		return 0;
	memcpy(blob, data, size);
	if (size >= BLOB_HOST_OFF + BLOB_HOST_LEN &&
	    !memcmp(blob + BLOB_HOST_OFF, host_id, BLOB_HOST_LEN))
		blob[BLOB_HOST_OFF] ^= 1;
	ret = tf_qp_connect(qp, blob, size);
	/* Nothing can connect (see above); anything else is a bug. */
	FUZZ_CHECK(ret == -TF_EWIRE || ret == -TF_EVERSION || ret == -TF_EPEER);
	FUZZ_CHECK(tf_qp_state(qp) == TF_QPS_INIT);
	return 0;
}
