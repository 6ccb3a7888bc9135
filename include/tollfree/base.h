/* SPDX-License-Identifier: MIT */
/*
 * tollfree/base.h - version, errors, logging, allocator and configuration.
 *
 * Conventions for the whole API:
 *  - every fallible function returns int: 0 (or a count >= 0) on success,
 *    a negative errno value on failure; errno is never the error channel;
 *  - out-parameters come last, end in _p and are written only on success;
 *  - destroy functions accept NULL, cannot fail and log what goes wrong;
 *  - "not thread-safe unless stated": each declaration says whether it is
 *    thread-safe, must be serialized per object, or is not thread-safe.
 */
#ifndef TOLLFREE_BASE_H
#define TOLLFREE_BASE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Everything declared here is exported; the library is built with
 * -fvisibility=hidden and a version script. */
#pragma GCC visibility push(default)

#define TOLLFREE_VERSION_MAJOR 0
#define TOLLFREE_VERSION_MINOR 1
#define TOLLFREE_VERSION_PATCH 0
#define TOLLFREE_VERSION                                                  \
	((TOLLFREE_VERSION_MAJOR << 16) | (TOLLFREE_VERSION_MINOR << 8) | \
	 TOLLFREE_VERSION_PATCH)

/* True when the library the program runs with is at least _maj._min. */
#define TOLLFREE_CHECK_VERSION(_maj, _min) \
	(tf_version() >= (((_maj) << 16) | ((_min) << 8)))

/*
 * Library-only error codes.  They start at 256 so that they never collide
 * with errno values; functions return them negated, like errno values.
 */
#define TF_ERRNO_OFFSET 256
#define TF_ERRNO_MAP(XX)                                                    \
	XX(TF_ENOPROVIDER, 256, "no usable provider")                       \
	XX(TF_EWIRE, 257, "malformed message from peer")                    \
	XX(TF_EVERSION, 258, "unsupported wire version")                    \
	XX(TF_EAUTH, 259, "peer failed authentication")                     \
	XX(TF_EQPERR, 260, "queue pair is in the error state")              \
	XX(TF_EPEER, 261, "peer address blob does not match this provider") \
	XX(TF_ESTALE, 262, "stale registration detected")                   \
	XX(TF_EFORK, 263, "object unusable in a forked child")

enum {
#define TF__ERRNO_ENUM(_name, _val, _str) _name = _val,
	TF_ERRNO_MAP(TF__ERRNO_ENUM)
#undef TF__ERRNO_ENUM
		TF_ERRNO_LAST
};

/*
 * tf_strerror - describe an error code.
 * @err: an error code as returned by a tf_ function (negative) or its
 *       absolute value; errno values and TF_E* codes are both accepted.
 * Returns a static string ("unknown error" for a code that is neither);
 * never NULL.  Thread-safe.
 */
const char *tf_strerror(int err);

/* tf_version - the runtime library version, encoded as TOLLFREE_VERSION. */
unsigned tf_version(void);
/* tf_version_string - "MAJOR.MINOR.PATCH" of the runtime library. */
const char *tf_version_string(void);

/* Log levels, in increasing verbosity (TOLLFREE_LOG_LEVEL takes the names). */
typedef enum tf_log_level {
	TF_LOG_ERROR = 0,
	TF_LOG_WARN,
	TF_LOG_INFO,
	TF_LOG_DEBUG,
	TF_LOG_TRACE,
} tf_log_level_t;

typedef void (*tf_log_fn_t)(tf_log_level_t level, const char *subsys,
			    const char *msg, void *arg);

/*
 * tf_log_set_handler - route the library's log lines to @fn.
 * @fn: the handler, or NULL for the default (stderr, "tollfree: " prefix).
 * The level filter (TOLLFREE_LOG_LEVEL, default "warn") applies before the
 * handler is called.  The library never prints except through this hook.
 * Thread-safe; the handler may be called from any thread that uses the
 * library, including provider progress threads.
 */
void tf_log_set_handler(tf_log_fn_t fn, void *arg);
/* tf_log_set_level - override TOLLFREE_LOG_LEVEL.  Thread-safe. */
void tf_log_set_level(tf_log_level_t level);

/*
 * tf_set_allocator - replace the allocator used for all of the library's
 * own bookkeeping (not for registered memory, which is the caller's or is
 * mapped with mmap).  Any NULL argument restores that default.  Call it
 * before any other tf_ function; not thread-safe.
 */
typedef struct tf_allocator {
	void *(*malloc_fn)(size_t size);
	void *(*calloc_fn)(size_t nmemb, size_t size);
	void *(*realloc_fn)(void *ptr, size_t size);
	void (*free_fn)(void *ptr);
} tf_allocator_t;
void tf_set_allocator(const tf_allocator_t *alloc);

/*
 * Configuration.  Every TOLLFREE_* variable is declared in one table; the
 * environment is read once, when the first context is opened, and values
 * passed through the API win over the environment.
 *
 * tf_config_foreach - call @fn for every variable.
 * @fn: receives the full name (TOLLFREE_...), the default, the value in
 *      effect for new contexts (the environment's, or the default), the
 *      component ("core", "soft", "verbs", ...) and a one-line help text.
 * Returns the number of variables.  Thread-safe.
 */
typedef void (*tf_config_var_fn_t)(const char *name, const char *deflt,
				   const char *value, const char *component,
				   const char *help, void *arg);
int tf_config_foreach(tf_config_var_fn_t fn, void *arg);

/*
 * tf_config_get - the value in effect for variable @name (with or without
 * the TOLLFREE_ prefix), as text, copied into @buf.
 * Returns the length, -ENOENT for an unknown name, -ENOSPC if @len is too
 * small.  Thread-safe.
 */
int tf_config_get(const char *name, char *buf, size_t len);

/*
 * tf_config_check - parse @value as variable @name would be parsed.
 * Returns 0 if valid, -EINVAL if not, -ENOENT for an unknown name.
 * Thread-safe.
 */
int tf_config_check(const char *name, const char *value);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif /* TOLLFREE_BASE_H */
