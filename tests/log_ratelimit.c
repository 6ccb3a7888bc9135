/* SPDX-License-Identifier: MIT */
/*
 * log_ratelimit: a message repeated in a flood prints TOLLFREE_LOG_RATE
 * lines per second; the rest are counted and the count rides on its next
 * line.  Other messages, the same format in another subsystem, and debug
 * lines are not held back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tf_test.h"
#include "util.h"

#define MAX_LINES 256

static char lines[MAX_LINES][160];
static int n_lines;

static void capture(tf_log_level_t level, const char *subsys, const char *msg,
		    void *arg)
{
	(void)level, (void)arg;
	if (n_lines < MAX_LINES)
		snprintf(lines[n_lines++], sizeof(lines[0]), "%s: %s", subsys,
			 msg);
}

static int count_prefix(const char *prefix)
{
	int n = 0;

	for (int i = 0; i < n_lines; i++)
		n += !strncmp(lines[i], prefix, strlen(prefix));
	return n;
}

/* One call site, as a library message is. */
static void flood(const char *subsys, int i)
{
	tf__log(TF_LOG_WARN, subsys, "connect to peer %d failed", i);
}

int main(void)
{
	char buf[32];
	uint64_t t0, dt;

	/* Read before the configuration is loaded (by the first call that
	 * needs it), as any TOLLFREE_* variable. */
	setenv("TOLLFREE_LOG_RATE", "5", 1);
	tf_test_begin("log_ratelimit");
	CHECK_OK(tf_config_get("LOG_RATE", buf, sizeof(buf)));
	CHECK(!strcmp(buf, "5"));
	tf_log_set_handler(capture, NULL);

	/* One message alone first: the table is direct-mapped by the
	 * addresses of the format and subsystem, which differ from run to
	 * run (ASLR), so another message in the same window could take its
	 * slot and report its count on a line of its own (by design). */
	t0 = tf__now_ns();
	for (int i = 0; i < 100; i++)
		flood("test", i);
	dt = tf__now_ns() - t0;
	if (dt >= 900000000ull)
		tf_test_skip("the flood took %llu ms, not within one window",
			     (unsigned long long)(dt / 1000000));
	CHECKF(count_prefix("test: connect to peer") == 5, "%d flood lines",
	       count_prefix("test: connect to peer"));
	CHECK(!strcmp(lines[0], "test: connect to peer 0 failed"));
	CHECK(!strcmp(lines[4], "test: connect to peer 4 failed"));

	/* The next window: the message prints again, with the count. */
	usleep(1100 * 1000);
	n_lines = 0;
	flood("test", 100);
	CHECKF(n_lines == 1 &&
		       !strcmp(lines[0], "test: connect to peer 100 failed "
					 "(95 similar messages suppressed)"),
	       "got %d lines, first '%s'", n_lines, n_lines ? lines[0] : "");

	/* Other messages are limited on their own; debug lines never. */
	n_lines = 0;
	tf__log(TF_LOG_WARN, "test", "another message");
	for (int i = 0; i < 3; i++)
		flood("other", i);
	tf_log_set_level(TF_LOG_DEBUG);
	for (int i = 0; i < 20; i++)
		tf__log(TF_LOG_DEBUG, "test", "debug line %d", i);
	tf_log_set_level(TF_LOG_WARN);
	CHECK(count_prefix("test: another message") == 1);
	CHECK(count_prefix("other: connect to peer") == 3);
	CHECK(count_prefix("test: debug line") == 20);

	/* 0: no limit. */
	tf__log_set_config_rate(0);
	n_lines = 0;
	for (int i = 0; i < 50; i++)
		flood("test", i);
	CHECK(n_lines == 50);

	tf_log_set_handler(NULL, NULL);
	return tf_test_end();
}
