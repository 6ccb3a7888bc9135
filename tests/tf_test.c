/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <string.h>

#include "tf_test.h"

static const char *test_name = "test";
static int logged_bad;
static int expected_bad;

void tf_test_skip(const char *fmt, ...)
{
	const char *strict = getenv("TOLLFREE_TEST_STRICT");
	const char *prov = getenv("TOLLFREE_PROVIDER");
	va_list ap;

	printf("%s: SKIP: ", test_name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (strict && !strcmp(strict, "1") && (!prov || !strcmp(prov, "soft"))) {
		printf("%s: FAIL: skip not allowed (TOLLFREE_TEST_STRICT=1)\n",
		       test_name);
		exit(TF_TEST_FAIL);
	}
	exit(TF_TEST_SKIP);
}

void tf_test_fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	printf("%s: FAIL at %s:%d: ", test_name, file, line);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(TF_TEST_FAIL);
}

static void count_log(tf_log_level_t level, const char *subsys,
		      const char *msg, void *arg)
{
	(void)arg;
	fprintf(stderr, "[%s] tollfree %s: %s\n", test_name,
		level == TF_LOG_ERROR ? "error" : "warn", subsys ? subsys : "");
	fprintf(stderr, "    %s\n", msg);
	if (level <= TF_LOG_WARN)
		logged_bad++;
}

void tf_test_begin(const char *name)
{
	test_name = name;
	setvbuf(stdout, NULL, _IOLBF, 0);
	tf_log_set_handler(count_log, NULL);
}

void tf_test_expect_log(int n)
{
	expected_bad += n;
}

int tf_test_end(void)
{
	if (logged_bad > expected_bad) {
		printf("%s: FAIL: %d unexpected warnings/errors logged\n",
		       test_name, logged_bad - expected_bad);
		return TF_TEST_FAIL;
	}
	printf("%s: PASS\n", test_name);
	return TF_TEST_PASS;
}

long tf_test_vmlck(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmLck:", 6))
			kb = strtol(line + 6, NULL, 10);
	fclose(f);
	return kb < 0 ? -1 : kb * 1024;
}
