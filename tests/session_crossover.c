/* SPDX-License-Identifier: MIT */
/*
 * session_crossover: the size up to which TF_REG_AUTO copies is the same
 * in every run unless a measurement is asked for.  Each case runs in a
 * child process, since the environment is read once per process: with
 * nothing configured it is 64 KiB (node param 0 included); a configured
 * size is taken as it is; "measure" (and "0", its old meaning), or the
 * node param TF_REG_CROSSOVER_MEASURE, measures it (between 4 KiB and the
 * largest slice); a value that is neither fails node creation with
 * -EINVAL and one logged error.  TF_ATTACH_INOUT is both directions.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tf_test.h"

_Static_assert(TF_ATTACH_INOUT == (TF_ATTACH_IN | TF_ATTACH_OUT),
	       "TF_ATTACH_INOUT copies both ways");

#define MAX_SLICE (1024 * 1024) /* TOLLFREE_POOL_MAX_SLICE default */

/* The crossover of a node made with @np on a fresh context, or the error
 * of tf_node_create. */
static long long node_crossover(const tf_node_params_t *np)
{
	tf_context_t *ctx;
	tf_node_t *node;
	tf_node_stats_t st;
	int ret;

	CHECK_OK(tf_context_open(NULL, &ctx));
	ret = tf_node_create(ctx, np, &node);
	if (!ret) {
		CHECK_OK(tf_node_query_stats(node, &st));
		CHECK(st.reg_mode == TF_REG_AUTO);
		tf_node_destroy(node);
	}
	tf_context_close(ctx);
	return ret ? ret : (long long)st.crossover;
}

static bool measured(long long x)
{
	return x >= 4096 && x <= MAX_SLICE;
}

/* In a child with TOLLFREE_REG_CROSSOVER=@env (NULL: unset). */
static void child(const char *env)
{
	tf_node_params_t param0 = {.field_mask = TF_NODE_PARAM_CROSSOVER,
				   .crossover = 0};
	tf_node_params_t measure = {.field_mask = TF_NODE_PARAM_CROSSOVER,
				    .crossover = TF_REG_CROSSOVER_MEASURE};
	tf_node_params_t fixed = {.field_mask = TF_NODE_PARAM_CROSSOVER,
				  .crossover = 12345};
	long long x;

	if (env)
		setenv("TOLLFREE_REG_CROSSOVER", env, 1);
	else
		unsetenv("TOLLFREE_REG_CROSSOVER");
	if (!env) {
		/* Twice: the same in every run, not a measurement. */
		for (int i = 0; i < 2; i++) {
			x = node_crossover(NULL);
			CHECKF(x == 65536, "default crossover %lld", x);
		}
		x = node_crossover(&param0);
		CHECKF(x == 65536, "param 0: crossover %lld", x);
		x = node_crossover(&measure);
		CHECKF(measured(x), "measured on request: %lld", x);
		tf_test_info("measured crossover: %lld bytes", x);
	} else if (!strcmp(env, "256K")) {
		x = node_crossover(NULL);
		CHECKF(x == 262144, "256K: crossover %lld", x);
		/* Params win over the environment. */
		x = node_crossover(&fixed);
		CHECKF(x == 12345, "param: crossover %lld", x);
	} else if (!strcmp(env, "measure") || !strcmp(env, "0")) {
		x = node_crossover(NULL);
		CHECKF(measured(x), "%s: crossover %lld", env, x);
	} else {
		tf_test_expect_log(1);
		x = node_crossover(NULL);
		CHECKF(x == -EINVAL, "%s: %lld", env, x);
		x = node_crossover(&fixed);
		CHECKF(x == 12345, "param over a bad value: %lld", x);
	}
	exit(tf_test_end());
}

int main(void)
{
	static const char *const envs[] = {NULL, "256K", "measure", "0",
					   "bogus"};

	tf_test_begin("session_crossover");
	for (size_t i = 0; i < sizeof(envs) / sizeof(envs[0]); i++) {
		pid_t pid = fork();
		int st;

		CHECK(pid >= 0);
		if (!pid)
			child(envs[i]);
		CHECK(waitpid(pid, &st, 0) == pid);
		CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		       "TOLLFREE_REG_CROSSOVER=%s: child status 0x%x",
		       envs[i] ? envs[i] : "(unset)", st);
	}
	return tf_test_end();
}
