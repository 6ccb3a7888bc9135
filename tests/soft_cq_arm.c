/* SPDX-License-Identifier: MIT */
/*
 * soft_cq_arm: a completion that lands while its CQ is being armed is
 * found by the look that follows the arm or signals the CQ's fd, never
 * neither.  Neither is a lost wake-up: an application (or the session
 * layer's listener) that armed, looked, found nothing and slept on
 * tf_cq_fd would sleep past the completion, until something else woke it.
 *
 * The producer's "store the completion, then load the arm flag" against
 * the consumer's "store the arm flag, then load the count" is the
 * store-buffering pattern: without an order between each side's store and
 * its load, both loads may miss the other side's store (x86 allows it).
 * A thread pushes one completion (soft_cq_push, as the provider's progress
 * does) while the main thread arms and polls, at random offsets around
 * each other, many times; every round must end with the completion found
 * by the poll or the fd readable.
 */
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "soft_int.h"
#include "tf_test.h"

#define ROUNDS_DEFAULT 200000
/* Each side waits up to this many pause loops before its part of a
 * round, so that the two parts meet at every offset. */
#define SPREAD 256

static struct soft_cq *cq;
static _Atomic uint32_t go, done;
static atomic_bool stop;

/* Spin for the other thread, yielding after a while: on a loaded
 * machine (or one CPU) it may not be running. */
static void spin_wait(const _Atomic uint32_t *v, uint32_t want)
{
	for (unsigned k = 0;
	     atomic_load_explicit(v, memory_order_acquire) != want &&
	     !atomic_load_explicit(&stop, memory_order_relaxed);
	     k++) {
		if (k < 4096)
			tf__cpu_relax();
		else
			sched_yield();
	}
}

static void delay(unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		tf__cpu_relax();
}

static uint32_t next_rand(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

static void *producer(void *arg)
{
	struct tf_wc wc = {.status = TF_WC_SUCCESS, .opcode = TF_WC_RECV};
	uint32_t seed = 0x9e3779b9u, r = 0;

	(void)arg;
	for (;;) {
		spin_wait(&go, r + 1);
		if (atomic_load_explicit(&go, memory_order_acquire) != r + 1)
			return NULL;
		r++;
		delay(next_rand(&seed) % SPREAD);
		wc.wr_id = r;
		soft_cq_push(cq, &wc);
		atomic_store_explicit(&done, r, memory_order_release);
	}
}

static bool fd_readable(int fd)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};

	return poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLIN);
}

int main(void)
{
	tf_context_params_t cp = {.field_mask = TF_CONTEXT_PARAM_PROVIDER,
				  .provider = "soft"};
	const char *e = getenv("TF_TEST_CQ_ARM_ROUNDS");
	long rounds = ROUNDS_DEFAULT;
	unsigned found = 0, signalled = 0, lost = 0;
	uint32_t seed = 0x2545f491u;
	tf_context_t *ctx;
	tf_cq_t *base;
	pthread_t th;
	int efd;

	tf_test_begin("soft_cq_arm");
	if (e) {
		char *end;

		rounds = strtol(e, &end, 10);
		CHECKF(end != e && !*end && rounds > 0 && rounds <= INT32_MAX,
		       "TF_TEST_CQ_ARM_ROUNDS='%s': expected a positive count",
		       e);
	}
	CHECK_OK(tf_context_open(&cp, &ctx));
	CHECK_OK(tf_cq_create(ctx, NULL, &base));
	cq = (struct soft_cq *)base;
	efd = tf_cq_fd(base);
	CHECK(efd >= 0);
	CHECK(!pthread_create(&th, NULL, producer, NULL));
	for (uint32_t r = 1; r <= (uint32_t)rounds; r++) {
		struct tf_wc wc;
		bool readable;
		int n;

		/* The CQ is empty, not armed, its fd not readable. */
		atomic_store_explicit(&go, r, memory_order_release);
		delay(next_rand(&seed) % SPREAD);
		CHECK_OK(tf_cq_arm(base));
		n = tf_cq_poll(base, 1, &wc);
		CHECK(n >= 0);
		spin_wait(&done, r);
		readable = fd_readable(efd);
		if (n) {
			CHECK(wc.wr_id == r);
			found++;
		} else if (readable) {
			signalled++;
		} else {
			lost++;
		}
		/* Back to the start: the completion taken, the fd read, and
		 * the arm, if the push did not consume it, consumed by a
		 * push of our own (the only way a CQ disarms). */
		if (!n)
			CHECK(tf_cq_poll(base, 1, &wc) == 1 && wc.wr_id == r);
		if (!readable) {
			struct tf_wc w0 = {.status = TF_WC_SUCCESS};

			CHECK_OK(soft_cq_push(cq, &w0));
			CHECK(fd_readable(efd));
			CHECK(tf_cq_poll(base, 1, &wc) == 1);
		}
		CHECK(!atomic_load(&cq->armed));
		CHECK(read(efd, &(uint64_t){0}, sizeof(uint64_t)) ==
		      sizeof(uint64_t));
		CHECK(!fd_readable(efd));
	}
	atomic_store(&stop, true);
	pthread_join(th, NULL);
	tf_test_info("%ld rounds: %u found by the look after the arm, %u "
		     "signalled on the fd, %u lost",
		     rounds, found, signalled, lost);
	CHECKF(!lost, "%u of %ld completions neither found nor signalled", lost,
	       rounds);
	tf_cq_destroy(base);
	tf_context_close(ctx);
	return tf_test_end();
}
