/* SPDX-License-Identifier: MIT */
/*
 * log.c - the library's only output channel: a settable hook with a level
 * filter.  The default handler writes one line to stderr.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include "util.h"

static void default_handler(tf_log_level_t level, const char *subsys,
			    const char *msg, void *arg);

static const char *const level_tag[] = {"error", "warn", "info", "debug",
					"trace"};

/* The handler pair is swapped under a lock so that a caller never sees a
 * new function with the old argument. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static tf_log_fn_t log_fn = default_handler;
static void *log_arg;
/* -1: not set through the API, take TOLLFREE_LOG_LEVEL. */
static _Atomic int log_level_override = -1;
static _Atomic int log_level_cfg = -1;

static void default_handler(tf_log_level_t level, const char *subsys,
			    const char *msg, void *arg)
{
	(void)arg;
	fprintf(stderr, "tollfree: %s: %s: %s\n", level_tag[level], subsys,
		msg);
}

static int current_level(void)
{
	int lvl =
		atomic_load_explicit(&log_level_override, memory_order_relaxed);

	if (lvl >= 0)
		return lvl;
	lvl = atomic_load_explicit(&log_level_cfg, memory_order_relaxed);
	/* Until the configuration is read (the first context or node it
	 * configures), the default level applies. */
	return lvl >= 0 ? lvl : TF_LOG_WARN;
}

/* The configuration pushes TOLLFREE_LOG_LEVEL here once it is read: the
 * log never reads the configuration itself, so that the configuration
 * loader may log (a bad value) without re-entering itself. */
void tf__log_set_config_level(int level)
{
	atomic_store(&log_level_cfg, level);
}

bool tf__log_enabled(tf_log_level_t level)
{
	return (int)level <= current_level();
}

void tf__log(tf_log_level_t level, const char *subsys, const char *fmt, ...)
{
	char msg[512];
	tf_log_fn_t fn;
	void *arg;
	va_list ap;

	if (!tf__log_enabled(level))
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&log_lock);
	fn = log_fn;
	arg = log_arg;
	pthread_mutex_unlock(&log_lock);
	fn(level, subsys, msg, arg);
}

void tf_log_set_handler(tf_log_fn_t fn, void *arg)
{
	pthread_mutex_lock(&log_lock);
	log_fn = fn ? fn : default_handler;
	log_arg = fn ? arg : NULL;
	pthread_mutex_unlock(&log_lock);
}

void tf_log_set_level(tf_log_level_t level)
{
	if ((int)level < TF_LOG_ERROR || level > TF_LOG_TRACE)
		return;
	atomic_store(&log_level_override, (int)level);
}
