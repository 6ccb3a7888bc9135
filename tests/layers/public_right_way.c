/* SPDX-License-Identifier: MIT */
/*
 * public_right_way.c - the twin of public_wrong_way.c, built the same way
 * (as a conformance test) with the harness headers only: it must compile,
 * so that a failure of public_wrong_way.c means the include rule and
 * nothing else.
 */
#include "fault_util.h"
#include "session_util.h"

int tf_test_public_probe_right(void);
int tf_test_public_probe_right(void)
{
	return (int)sizeof(struct tf_pair);
}
