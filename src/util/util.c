/* SPDX-License-Identifier: MIT */
/*
 * util.c - errors, version, allocator hook, randomness and time.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

#define TF__STR2(x) #x
#define TF__STR(x)  TF__STR2(x)

const char *tf_strerror(int err)
{
	/* In a long: negating INT_MIN does not fit in an int. */
	long e = err < 0 ? -(long)err : err;
	const char *s = NULL;

	switch (e) {
	case 0:
		return "success";
#define TF__ERRNO_CASE(_name, _val, _str) \
	case _val:                        \
		return _str;
		TF_ERRNO_MAP(TF__ERRNO_CASE)
#undef TF__ERRNO_CASE
	default:
		break;
	}
	/*
	 * Not strerror(): for a code it does not know, glibc formats
	 * "Unknown error N" into a per-thread buffer that its next call (and
	 * thread exit) frees, so two tf_strerror() calls in one printf would
	 * read freed memory.  strerrordesc_np() returns glibc's static
	 * (untranslated) description, or NULL.
	 */
#if defined(__GLIBC__) && \
	(__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
	if (e <= INT_MAX)
		s = strerrordesc_np((int)e);
#endif
	return s ? s : "unknown error";
}

const char *tf_wc_status_str(enum tf_wc_status status)
{
	static const char *const names[] = {
		[TF_WC_SUCCESS] = "success",
		[TF_WC_LOC_LEN_ERR] = "local length error",
		[TF_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[TF_WC_LOC_PROT_ERR] = "local protection error",
		[TF_WC_WR_FLUSH_ERR] = "WR flushed",
		[TF_WC_MW_BIND_ERR] = "memory window bind error",
		[TF_WC_REM_INV_REQ_ERR] = "remote invalid request error",
		[TF_WC_REM_ACCESS_ERR] = "remote access error",
		[TF_WC_REM_OP_ERR] = "remote operation error",
		[TF_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
		[TF_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
		[TF_WC_FATAL_ERR] = "fatal error",
		[TF_WC_GENERAL_ERR] = "general error",
	};

	if ((unsigned)status >= sizeof(names) / sizeof(names[0]))
		return "unknown";
	return names[status];
}

unsigned tf_version(void)
{
	return TOLLFREE_VERSION;
}

const char *tf_version_string(void)
{
	return TF__STR(TOLLFREE_VERSION_MAJOR) "." TF__STR(
		TOLLFREE_VERSION_MINOR) "." TF__STR(TOLLFREE_VERSION_PATCH);
}

static tf_allocator_t alloc = {malloc, calloc, realloc, free};

void tf_set_allocator(const tf_allocator_t *a)
{
	alloc.malloc_fn = (a && a->malloc_fn) ? a->malloc_fn : malloc;
	alloc.calloc_fn = (a && a->calloc_fn) ? a->calloc_fn : calloc;
	alloc.realloc_fn = (a && a->realloc_fn) ? a->realloc_fn : realloc;
	alloc.free_fn = (a && a->free_fn) ? a->free_fn : free;
}

void *tf__malloc(size_t size)
{
	return alloc.malloc_fn(size);
}

void *tf__calloc(size_t nmemb, size_t size)
{
	return alloc.calloc_fn(nmemb, size);
}

void *tf__realloc(void *ptr, size_t size)
{
	return alloc.realloc_fn(ptr, size);
}

void tf__free(void *ptr)
{
	if (ptr)
		alloc.free_fn(ptr);
}

/* The kernel's CSPRNG through /dev/urandom, for a process whose
 * getrandom() is refused (an old seccomp profile returns ENOSYS or
 * EPERM for system calls it does not know). */
static int urandom(char *p, size_t len)
{
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	int ret = 0;

	if (fd < 0)
		return -errno;
	while (len) {
		ssize_t n = read(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			ret = n < 0 ? -errno : -EIO;
			break;
		}
		p += n;
		len -= (size_t)n;
	}
	close(fd);
	return ret;
}

int tf__random(void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = getrandom(p, len, 0);

		if (n < 0) {
			int ret;

			if (errno == EINTR)
				continue;
			if (errno != ENOSYS && errno != EPERM) {
				tf_log_error("core", "getrandom failed: %m");
				return -errno;
			}
			ret = urandom(p, len);
			if (ret)
				tf_log_error("core",
					     "no randomness: getrandom and "
					     "/dev/urandom failed: %s",
					     strerror(-ret));
			return ret;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * Keys (one per registration and per window bind, so one per session) and
 * session nonces come from a per-thread buffer of getrandom() output,
 * refilled 256 bytes at a time: one system call per 64 keys instead of one
 * per key.  The bytes are
 * the kernel's CSPRNG output, each used once and wiped as it is taken.  A
 * child after fork() discards what it inherited, so that parent and child
 * never hand out the same keys.
 */
#define RND_BUF 256

static _Atomic unsigned rnd_fork_gen;
static pthread_once_t rnd_once = PTHREAD_ONCE_INIT;

static void rnd_atfork_child(void)
{
	atomic_fetch_add(&rnd_fork_gen, 1);
}

static void rnd_init(void)
{
	pthread_atfork(NULL, NULL, rnd_atfork_child);
}

static _Thread_local struct {
	uint8_t b[RND_BUF];
	unsigned left;
	unsigned gen;
} rnd;

int tf__random_buffered(void *buf, size_t len)
{
	unsigned gen;

	if (len > RND_BUF / 4)
		return tf__random(buf, len);
	pthread_once(&rnd_once, rnd_init);
	gen = atomic_load_explicit(&rnd_fork_gen, memory_order_relaxed);
	if (rnd.gen != gen) {
		rnd.gen = gen;
		rnd.left = 0;
	}
	if (rnd.left < len) {
		int ret = tf__random(rnd.b, sizeof(rnd.b));

		if (ret)
			return ret;
		rnd.left = sizeof(rnd.b);
	}
	rnd.left -= (unsigned)len;
	memcpy(buf, rnd.b + rnd.left, len);
	memset(rnd.b + rnd.left, 0, len);
	return 0;
}

static int random_u32_buffered(uint32_t *v)
{
	return tf__random_buffered(v, sizeof(*v));
}

uint32_t tf__random_u32(void)
{
	uint32_t v;

	do {
		/* No predictable fallback: a key drawn from the clock could
		 * be guessed.  The failure was logged; callers refuse. */
		if (random_u32_buffered(&v))
			return 0;
	} while (v == 0 || v == UINT32_MAX);
	return v;
}

uint64_t tf__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t tf__realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
