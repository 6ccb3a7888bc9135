/* SPDX-License-Identifier: MIT */
/*
 * wrong_way.c - a util-layer file that includes a session-layer header.
 * It must NOT compile: the CTest layers_include_wrong passes only if the
 * build of this file fails (src/README.md, "How it is enforced").
 */
#include "util.h"
#include "session_int.h"

int tf__layer_probe_wrong(void);
int tf__layer_probe_wrong(void)
{
	return (int)sizeof(struct tf_session);
}
