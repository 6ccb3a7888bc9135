/* SPDX-License-Identifier: MIT */
/*
 * session_unit_util.h - helpers for the session unit tests that reach into
 * the session layer's internals (header only; not for conformance tests).
 */
#ifndef TF_SESSION_UNIT_UTIL_H
#define TF_SESSION_UNIT_UTIL_H

#include "session_util.h"
#include "session_int.h"

/* How su_forge_expose breaks its EXPOSE. */
enum su_forge {
	SU_FORGE_SHORT, /* the header says 16 + 26 bytes, the SEND carries 32 */
	SU_FORGE_COUNT, /* n = 2 with one exposure's bytes */
};

/* Send @s's peer a malformed EXPOSE on the control QP: the peer's session
 * must break on it (and log it). */
static inline void su_forge_expose(tf_session_t *s, enum su_forge how)
{
	struct tf_wire_msg m;

	tf__wire_init(&m, TF_WIRE_EXPOSE);
	tf__wire_put_u16(&m, 1);
	for (int i = 0; i < TF_WIRE_EXPOSURE_SIZE; i++)
		tf__wire_put_u8(&m, 1);
	CHECK_OK(tf__wire_finish(&m));
	if (how == SU_FORGE_SHORT)
		m.len -= 10;
	else
		m.buf[TF_WIRE_HDR_SIZE + 1] = 2;
	CHECK_OK(tf__ctl_send(s->c, &m, tf_test_timeout_ms()));
}

#endif /* TF_SESSION_UNIT_UTIL_H */
