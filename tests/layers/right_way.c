/* SPDX-License-Identifier: MIT */
/*
 * right_way.c - the twin of wrong_way.c, built with the same (util-layer)
 * include path but including only util's own header: it must compile, so
 * that a failure of wrong_way.c means the include rule and nothing else.
 */
#include "util.h"

int tf__layer_probe_right(void);
int tf__layer_probe_right(void)
{
	return (int)sizeof(struct tf_backoff);
}
