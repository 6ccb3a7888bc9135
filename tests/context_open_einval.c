/* SPDX-License-Identifier: MIT */
/*
 * context_open_einval: tf_context_open() returns the codes its man page
 * lists.  An invalid value gives -EINVAL whichever provider is asked for:
 * with provider "auto", a bad transport used to be swallowed by the
 * fallback loop and reported as -TF_ENOPROVIDER.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tf_test.h"

static int open_with(const char *provider, const char *transport)
{
	tf_context_params_t p = {.provider = provider, .transport = transport};
	tf_context_t *ctx = NULL;
	int ret;

	if (provider)
		p.field_mask |= TF_CONTEXT_PARAM_PROVIDER;
	if (transport)
		p.field_mask |= TF_CONTEXT_PARAM_TRANSPORT;
	ret = TOLERATED(tf_context_open(&p, &ctx));
	if (!ret)
		tf_context_close(ctx);
	return ret;
}

int main(void)
{
	tf_context_params_t null_provider = {.field_mask =
						     TF_CONTEXT_PARAM_PROVIDER};
	tf_context_t *ctx;
	char prov[16];

	tf_test_begin("context_open_einval");
	/* Only the soft provider is sure to open here; with an RDMA device
	 * "auto" takes verbs, which has no transport to reject. */
	CHECK_OK(tf_context_open(NULL, &ctx));
	snprintf(prov, sizeof(prov), "%s", tf_context_provider(ctx));
	tf_context_close(ctx);
	if (strcmp(prov, "soft"))
		tf_test_skip("provider auto opens %s here, not soft", prov);

	CHECK_ERR(open_with("auto", "bogus"), -EINVAL);
	CHECK_ERR(open_with("soft", "bogus"), -EINVAL);
	CHECK_ERR(open_with("auto", ""), -EINVAL);
	CHECK_OK(open_with("auto", "auto"));
	CHECK_OK(open_with("soft", "shm"));
	CHECK_ERR(open_with("nosuch", NULL), -TF_ENOPROVIDER);
	CHECK_ERR(TOLERATED(tf_context_open(&null_provider, &ctx)), -EINVAL);
	CHECK_ERR(tf_context_open(NULL, NULL), -EINVAL);
	return tf_test_end();
}
