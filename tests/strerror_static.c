/* SPDX-License-Identifier: MIT */
/*
 * strerror_static: tf_strerror() returns static strings for every code,
 * as its man page promises.  glibc's strerror() formats an unknown code
 * into a buffer that its next call frees (and that thread exit frees), so
 * passing it through made two calls in one printf a use-after-free and
 * printed the second message twice.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "tf_test.h"

static void *describe_in_thread(void *arg)
{
	return (void *)tf_strerror(*(int *)arg);
}

int main(void)
{
	const char *a, *b, *t;
	char copy[128], line[256];
	pthread_t th;
	int code = -1002;

	tf_test_begin("strerror_static");

	/* Two unknown codes in one call: the first string must survive the
	 * second call unchanged. */
	a = tf_strerror(-1000);
	snprintf(copy, sizeof(copy), "%s", a);
	b = tf_strerror(-1001);
	CHECKF(!strcmp(a, copy), "first string changed to '%s' (was '%s')", a,
	       copy);
	CHECK(!strcmp(b, "unknown error"));
	snprintf(line, sizeof(line), "%s|%s", tf_strerror(-1000),
		 tf_strerror(-1001));
	CHECKF(!strcmp(line, "unknown error|unknown error"), "got '%s'", line);

	/* A string obtained on a thread outlives the thread. */
	CHECK(!pthread_create(&th, NULL, describe_in_thread, &code));
	CHECK(!pthread_join(th, (void **)&t));
	CHECKF(!strcmp(t, "unknown error"), "thread string is '%s'", t);

	/* Known codes: distinct, stable, negated or not. */
	a = tf_strerror(-EINVAL);
	b = tf_strerror(-ENOENT);
	CHECK(a != b && strcmp(a, b));
	CHECK(!strcmp(a, "Invalid argument"));
	CHECK(!strcmp(b, "No such file or directory"));
	CHECK(tf_strerror(EINVAL) == a);
	CHECK(!strcmp(tf_strerror(-TF_EPEER), tf_strerror(TF_EPEER)));
	CHECK(!strcmp(tf_strerror(0), "success"));
	snprintf(line, sizeof(line), "%s|%s", tf_strerror(-TF_EWIRE),
		 tf_strerror(-ETIMEDOUT));
	CHECKF(!strcmp(line,
		       "malformed message from peer|Connection timed out"),
	       "got '%s'", line);

	/* The extremes of int (negating INT_MIN must not overflow). */
	CHECK(!strcmp(tf_strerror(INT_MIN), "unknown error"));
	CHECK(!strcmp(tf_strerror(INT_MAX), "unknown error"));
	return tf_test_end();
}
