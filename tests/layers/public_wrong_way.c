/* SPDX-License-Identifier: MIT */
/*
 * public_wrong_way.c - a conformance test that includes an internal
 * header.  It must NOT compile: conformance tests see only the public API
 * (tests/README.md), and the CTest public_include_wrong passes only if
 * the build of this file fails.
 */
#include "session_util.h"
#include "session_int.h"

int tf_test_public_probe_wrong(void);
int tf_test_public_probe_wrong(void)
{
	return (int)sizeof(struct tf_session);
}
