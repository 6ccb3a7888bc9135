/* SPDX-License-Identifier: MIT */
/*
 * tf_test.h - the small harness every test uses.  Exit codes follow
 * liburing: 0 pass, 1 fail, 77 skip (with the reason printed).
 */
#ifndef TF_TEST_H
#define TF_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <tollfree/tollfree.h>

#define TF_TEST_PASS 0
#define TF_TEST_FAIL 1
#define TF_TEST_SKIP 77

/* Print the reason and exit 77 (fails instead under TOLLFREE_TEST_STRICT=1
 * on the soft provider, where nothing should be skipped). */
void tf_test_skip(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));
/* Print the reason and exit 1. */
void tf_test_fail(const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4), noreturn));

#define CHECK(_cond)                                                           \
	do {                                                                   \
		if (!(_cond))                                                  \
			tf_test_fail(__FILE__, __LINE__, "CHECK(%s)", #_cond); \
	} while (0)
/* Check that a tf_ call returned 0 (or >= 0), printing tf_strerror. */
#define CHECK_OK(_expr)                                                        \
	do {                                                                   \
		int _r = (_expr);                                              \
		if (_r < 0)                                                    \
			tf_test_fail(__FILE__, __LINE__, "%s = %d (%s)",       \
				     #_expr, _r, tf_strerror(_r));             \
	} while (0)
#define CHECK_ERR(_expr, _err)                                                 \
	do {                                                                   \
		int _r = (_expr);                                              \
		if (_r != (_err))                                              \
			tf_test_fail(__FILE__, __LINE__,                       \
				     "%s = %d (%s), expected %d (%s)", #_expr, \
				     _r, tf_strerror(_r), (_err),              \
				     tf_strerror(_err));                       \
	} while (0)

/* Install a log handler that counts warnings and errors; tf_test_end()
 * fails the test if any were logged that the test did not expect. */
void tf_test_begin(const char *name);
void tf_test_expect_log(int n_warn_or_err);
int tf_test_end(void);

/* Locked memory of this process (VmLck, bytes). */
long tf_test_vmlck(void);

#endif /* TF_TEST_H */
