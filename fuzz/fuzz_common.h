/* SPDX-License-Identifier: MIT */
/*
 * fuzz_common.h - helpers shared by the libFuzzer targets.
 *
 * The targets link tollfree_static, so that internal parsers are reachable.
 * The library's log lines are formatted (a format bug in a log call on a
 * peer-supplied value is a bug worth finding) but discarded: printing them
 * would slow every execution down by an order of magnitude.
 */
#ifndef TOLLFREE_FUZZ_COMMON_H
#define TOLLFREE_FUZZ_COMMON_H

#include <stdio.h>
#include <stdlib.h>

#include <tollfree/tollfree.h>

static inline void fuzz_log_discard(tf_log_level_t level, const char *subsys,
				    const char *msg, void *arg)
{
	(void)level;
	(void)subsys;
	(void)msg;
	(void)arg;
}

static inline void fuzz_quiet(void)
{
	/* Debug level: every log call on a parse path formats its message. */
	tf_log_set_handler(fuzz_log_discard, NULL);
	tf_log_set_level(TF_LOG_DEBUG);
}

/* A violated invariant: abort, so that libFuzzer keeps the input. */
#define FUZZ_CHECK(_cond)                                                \
	do {                                                             \
		if (!(_cond)) {                                          \
			fprintf(stderr, "%s:%d: invariant failed: %s\n", \
				__FILE__, __LINE__, #_cond);             \
			abort();                                         \
		}                                                        \
	} while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* TOLLFREE_FUZZ_COMMON_H */
