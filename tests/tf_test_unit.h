/* SPDX-License-Identifier: MIT */
/*
 * tf_test_unit.h - what the unit tests add to the harness (tf_test.h).
 *
 * Unit tests (every test not named conf_*) link the static library
 * and may include the internal headers of src/; their harness is
 * tf_test.c compiled against that library plus tf_test_unit.c.  The
 * conformance tests link the shared library and see only the public API,
 * so nothing here is for them: this header does not compile in their
 * build (tests/README.md).
 */
#ifndef TF_TEST_UNIT_H
#define TF_TEST_UNIT_H

#ifndef TF_TEST_UNIT
#error "tf_test_unit.h is for unit tests; conformance tests use tf_test.h only"
#endif

#include "tf_test.h"

/* Drop CAP_IPC_LOCK from this process (so that RLIMIT_MEMLOCK binds
 * root too): 0 or -errno. */
int tf_test_drop_ipc_lock(void);

/*
 * TF_TEST_INFO_BIN (a compile definition of the unit harness): the path
 * of the tollfree-info built with the tests, for the tests that check
 * what it prints.
 */

#endif /* TF_TEST_UNIT_H */
