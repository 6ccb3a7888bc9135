/* SPDX-License-Identifier: MIT */
/* soft.c - placeholder until the soft provider lands. */
#include "soft_int.h"

static int soft_probe(const struct tf_config *cfg)
{
	(void)cfg;
	return 1;
}

const struct tf_provider_ops tf_soft_provider_ops = {
	.size = sizeof(struct tf_provider_ops),
	.name = "soft",
	.probe = soft_probe,
};
