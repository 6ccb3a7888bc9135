/* SPDX-License-Identifier: MIT */
/* verbs.c - placeholder until the verbs provider lands. */
#include "provider.h"

static int verbs_probe(const struct tf_config *cfg)
{
	(void)cfg;
	return 0;
}

const struct tf_provider_ops tf_verbs_provider_ops = {
	.size = sizeof(struct tf_provider_ops),
	.name = "verbs",
	.probe = verbs_probe,
};
