/* SPDX-License-Identifier: MIT */
/*
 * shm_pingpong - the floor for same-host latency: two processes ping-pong
 * a message through a MAP_SHARED mapping with plain stores and busy-polled
 * loads, nothing else.  No library can move a message between two
 * processes faster than this, so bench/peers/run.sh reports every other
 * result next to it.
 *
 *   shm_pingpong [-n ITERS] [-w WARMUP] [SIZE...]   (default sizes 64 1024)
 *
 * Each message is SIZE bytes whose last 8 bytes carry a sequence number,
 * stored last with release order; the receiver spins on it with acquire
 * loads, then copies the message out (a receiver consumes the data).  One
 * sample is half a round trip.  Prints one line per size:
 *   shm_pingpong size=64 iters=100000 min_us=.. median_us=.. avg_us=.. p99_us=..
 *
 * Build: cc -O2 -o shm_pingpong shm_pingpong.c (or via bench/CMakeLists.txt)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SIZE  65536
#define MAX_SIZES 16

/* One direction's slot, on its own pages so that the two directions never
 * share a cache line. */
struct slot {
	_Alignas(4096) uint8_t data[MAX_SIZE];
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void pin(int nth)
{
	cpu_set_t set, one;
	int i, seen = 0;

	if (sched_getaffinity(0, sizeof(set), &set))
		return;
	if (CPU_COUNT(&set) < 2)
		return;
	for (i = 0; i < CPU_SETSIZE; i++) {
		if (!CPU_ISSET(i, &set) || seen++ != nth)
			continue;
		CPU_ZERO(&one);
		CPU_SET(i, &one);
		sched_setaffinity(0, sizeof(one), &one);
		return;
	}
}

static void put(struct slot *s, const uint8_t *src, size_t size, uint64_t seq)
{
	memcpy(s->data, src, size - 8);
	__atomic_store_n((uint64_t *)(s->data + size - 8), seq,
			 __ATOMIC_RELEASE);
}

/* Spin until @seq arrives, then copy the message out. */
static void get(struct slot *s, uint8_t *dst, size_t size, uint64_t seq,
		int yield)
{
	while (__atomic_load_n((uint64_t *)(s->data + size - 8),
			       __ATOMIC_ACQUIRE) != seq)
		if (yield)
			sched_yield();
	memcpy(dst, s->data, size - 8);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	size_t sizes[MAX_SIZES] = {64, 1024}, nsizes = 0, k;
	unsigned long iters = 100000, warm = 10000, i;
	uint8_t local[MAX_SIZE];
	struct slot *ping, *pong;
	uint64_t *rtt, seq = 0;
	int c, yield, status;
	pid_t pid;

	while ((c = getopt(argc, argv, "n:w:")) != -1) {
		switch (c) {
		case 'n':
			iters = strtoul(optarg, NULL, 10);
			break;
		case 'w':
			warm = strtoul(optarg, NULL, 10);
			break;
		default:
			fprintf(stderr,
				"usage: %s [-n ITERS] [-w WARMUP] "
				"[SIZE...]\n",
				argv[0]);
			return 2;
		}
	}
	for (; optind < argc && nsizes < MAX_SIZES; optind++) {
		sizes[nsizes] = strtoul(argv[optind], NULL, 10);
		if (sizes[nsizes] < 16 || sizes[nsizes] > MAX_SIZE) {
			fprintf(stderr, "size must be 16..%d\n", MAX_SIZE);
			return 2;
		}
		nsizes++;
	}
	if (!nsizes)
		nsizes = 2;
	if (!iters) {
		fprintf(stderr, "iterations must be > 0\n");
		return 2;
	}
	rtt = calloc(iters, sizeof(*rtt));
	ping = mmap(NULL, 2 * sizeof(struct slot), PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (!rtt || ping == MAP_FAILED) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	pong = ping + 1;
	memset(local, 0xa5, sizeof(local));
	/* On one CPU, spinning would burn the peer's time slice. */
	yield = sysconf(_SC_NPROCESSORS_ONLN) < 2;

	pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	pin(pid == 0 ? 1 : 0);
	for (k = 0; k < nsizes; k++) {
		size_t size = sizes[k];

		for (i = 0; i < warm + iters; i++) {
			uint64_t t0;

			seq++;
			if (pid == 0) {
				get(ping, local, size, seq, yield);
				put(pong, local, size, seq);
				continue;
			}
			t0 = now_ns();
			put(ping, local, size, seq);
			get(pong, local, size, seq, yield);
			if (i >= warm)
				rtt[i - warm] = now_ns() - t0;
		}
		if (pid == 0)
			continue;
		{
			double sum = 0;

			qsort(rtt, iters, sizeof(*rtt), cmp_u64);
			for (i = 0; i < iters; i++)
				sum += (double)rtt[i];
			printf("shm_pingpong size=%zu iters=%lu min_us=%.3f "
			       "median_us=%.3f avg_us=%.3f p99_us=%.3f\n",
			       size, iters, rtt[0] / 2e3, rtt[iters / 2] / 2e3,
			       sum / (double)iters / 2e3,
			       rtt[(size_t)((double)iters * 0.99)] / 2e3);
			fflush(stdout);
		}
	}
	if (pid == 0)
		_exit(0);
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
	    WEXITSTATUS(status)) {
		fprintf(stderr, "child failed\n");
		return 1;
	}
	return 0;
}
