/* SPDX-License-Identifier: MIT */
/*
 * log.c - the library's only output channel: a settable hook with a level
 * filter and a rate limit.  The default handler writes one line to stderr.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

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

/*
 * Rate limit.  A peer that dies under a busy client makes every connect
 * fail and log the same warning, tens of thousands of lines that bury the
 * first one.  A message is its call site: the format string and the
 * subsystem (both string literals, compared by address).  In each window
 * of one second a message prints at most log_rate lines; the others are
 * counted, and the count is appended to the first line the message prints
 * in a later window.  Debug and trace lines, asked for explicitly, are
 * never limited.
 *
 * Messages live in a small direct-mapped table: a message that takes the
 * slot of another ends that one's count, which is then reported on its own
 * line, so that nothing is dropped silently.
 */
#define RL_SLOTS     64
#define RL_WINDOW_NS 1000000000ull

struct rl_slot {
	const char *fmt; /* NULL: free */
	const char *subsys;
	tf_log_level_t level;
	uint64_t start_ns; /* of the current window */
	unsigned printed;  /* in the current window */
	unsigned suppressed;
};

static pthread_mutex_t rl_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rl_slot rl_tab[RL_SLOTS];
static _Atomic unsigned log_rate = 10; /* TOLLFREE_LOG_RATE's default */

void tf__log_set_config_rate(unsigned per_second)
{
	atomic_store(&log_rate, per_second);
}

/*
 * Whether the message (@subsys, @fmt) may print now.  *@suppressed_p is the
 * number of its lines held back in earlier windows, to be reported with
 * this one; *@evicted is set to another message's slot when this one takes
 * it over with lines still to report.
 */
static bool rl_admit(tf_log_level_t level, const char *subsys, const char *fmt,
		     unsigned rate, unsigned *suppressed_p,
		     struct rl_slot *evicted)
{
	uintptr_t h = (uintptr_t)fmt ^ ((uintptr_t)subsys << 7);
	struct rl_slot *sl;
	uint64_t now = tf__now_ns();
	bool ok;

	h ^= h >> 17;
	h *= 0x9e3779b97f4a7c15ull & UINTPTR_MAX;
	sl = &rl_tab[(h >> 20) % RL_SLOTS];
	pthread_mutex_lock(&rl_lock);
	if (sl->fmt != fmt || sl->subsys != subsys) {
		if (sl->fmt && sl->suppressed)
			*evicted = *sl;
		*sl = (struct rl_slot){.fmt = fmt,
				       .subsys = subsys,
				       .level = level,
				       .start_ns = now};
	}
	if (now - sl->start_ns >= RL_WINDOW_NS) {
		*suppressed_p = sl->suppressed;
		sl->suppressed = 0;
		sl->printed = 0;
		sl->start_ns = now;
	}
	ok = sl->printed < rate;
	if (ok)
		sl->printed++;
	else
		sl->suppressed++;
	pthread_mutex_unlock(&rl_lock);
	return ok;
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
	struct rl_slot evicted = {0};
	unsigned rate, suppressed = 0;
	char msg[512];
	tf_log_fn_t fn;
	void *arg;
	va_list ap;
	bool ok = true;
	int n;

	if (!tf__log_enabled(level))
		return;
	rate = atomic_load_explicit(&log_rate, memory_order_relaxed);
	if (rate && level <= TF_LOG_INFO)
		ok = rl_admit(level, subsys, fmt, rate, &suppressed, &evicted);
	pthread_mutex_lock(&log_lock);
	fn = log_fn;
	arg = log_arg;
	pthread_mutex_unlock(&log_lock);
	if (evicted.suppressed) {
		snprintf(msg, sizeof(msg), "(%u similar messages suppressed)",
			 evicted.suppressed);
		fn(evicted.level, evicted.subsys, msg, arg);
	}
	if (!ok)
		return;
	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (suppressed && n >= 0) {
		char note[48];
		size_t len = (size_t)snprintf(
			note, sizeof(note), " (%u similar messages suppressed)",
			suppressed);
		size_t at = (size_t)n;

		/* A long line gives way to the count, which matters more. */
		if (at > sizeof(msg) - 1 - len)
			at = sizeof(msg) - 1 - len;
		memcpy(msg + at, note, len + 1);
	}
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
