/* SPDX-License-Identifier: MIT */
/*
 * conf_session_slow_accept: a client whose OPEN on a kept connection is
 * answered late gets its session, and sleeps while it waits.
 *
 * Round 0 makes the connection.  In rounds 1..ROUNDS the server accepts
 * with TF_SESSION_DEFER_ESTABLISH and establishes only DELAY_MS later,
 * longer than the client's spin and yields (TOLLFREE_POLL_SPIN_US, then
 * 1 ms): the client's wait for the ACCEPT then sleeps on the control QP's
 * receive completion descriptor and the socket (ctl.c), and must be woken
 * by the ACCEPT.  Each round the client's connect returns 0 on the kept
 * connection and its WRITE lands.  The client thread's CPU time over the
 * delayed rounds stays under half of the time it waited: a wait that
 * yielded to the end, as before, burned about all of it.
 */
#include <sys/resource.h>
#include <unistd.h>

#include "session_util.h"

#define LEN	 256
#define ROUNDS	 3
#define DELAY_MS 50

static void server(struct tf_pair *p, tf_listener_t *l)
{
	for (int r = 0; r <= ROUNDS; r++) {
		tf_session_t *s = st_accept(l, TF_SESSION_DEFER_ESTABLISH);
		uint8_t *m;
		int b, x;

		CHECK(tf_session_reused(s) == (r > 0));
		CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&m));
		memset(m, 0, LEN);
		CHECK_OK(tf_session_expose(s, b, 0, LEN, TF_ACCESS_REMOTE_WRITE,
					   &x));
		if (r > 0)
			usleep(DELAY_MS * 1000);
		CHECK_OK(tf_session_establish(s));
		CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
		CHECK_FILL(m, LEN, (uint32_t)r);
		tf_session_close(s);
	}
	tf_test_sync(p);
}

static uint64_t thread_cpu_us(void)
{
	struct rusage ru;

	CHECK(getrusage(RUSAGE_THREAD, &ru) == 0);
	return (uint64_t)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec +
	       (uint64_t)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec;
}

static void client(struct tf_pair *p, tf_node_t *node, uint16_t port)
{
	uint64_t cpu = 0, waited = 0;

	for (int r = 0; r <= ROUNDS; r++) {
		uint64_t c0 = thread_cpu_us();
		int64_t t0 = st_now_ms();
		tf_session_t *s;
		uint8_t *m;
		int b;

		CHECK_OK(tf_session_connect(node, st_host(), port, NULL, &s));
		if (r > 0) {
			cpu += thread_cpu_us() - c0;
			waited += (uint64_t)(st_now_ms() - t0) * 1000;
		}
		CHECK(tf_session_reused(s) == (r > 0));
		CHECK(tf_session_peer_exposures(s) == 1);
		CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&m));
		tf_test_fill(m, LEN, (uint32_t)r);
		CHECK_OK(tf_session_write(s, b, 0, 0, 0, LEN, 1));
		st_expect(s, 1, TF_WC_SUCCESS, NULL);
		tf_session_close(s);
	}
	tf_test_info("%d late ACCEPTs: waited %llu us, %llu us of CPU", ROUNDS,
		     (unsigned long long)waited, (unsigned long long)cpu);
	CHECK(waited >= ROUNDS * DELAY_MS * 1000ull);
	CHECKF(cpu < waited / 2,
	       "the client burned %llu us of CPU in %llu us of waiting",
	       (unsigned long long)cpu, (unsigned long long)waited);
	tf_test_sync(p);
}

int main(void)
{
	struct tf_pair p;

	tf_test_begin("conf_session_slow_accept");
	tf_test_pair_open(&p);
	return st_run(&p, server, client);
}
