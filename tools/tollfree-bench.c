/* SPDX-License-Identifier: MIT */
/*
 * tollfree-bench - benchmarks over the public tollfree API (see
 * tollfree-bench(1)).  This file is only the dispatch to the subcommands:
 *
 *   lat    bench_lat.c    perftest-style latency between two processes
 *   reg    bench_reg.c    registration-side costs
 *   crr    bench_crr*.c   short sessions (RDMA_CRR) next to TCP
 *   churn  bench_churn.c  a victim's latency under registration churn
 *   load   bench_load*.c  many sessions at once: N x T clients, S server
 *                         threads, next to TCP
 *
 * What they share is in bench_common.c, bench_report.c (every table, in
 * every format, goes through report_emit) and bench_sock.c.  Timings are
 * measured, never judged: nothing compares a number with a threshold.
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s lat|reg|crr|churn|load [options]   (%s SUBCOMMAND "
		"-h "
		"for its options)\n"
		"  lat    perftest-style WRITE/READ/SEND latency between two "
		"processes\n"
		"  reg    cost of registration, deregistration, memory "
		"windows, cache and pool\n"
		"  crr    short sessions: connect, prepare, move, revoke, "
		"close (RDMA_CRR)\n"
		"  churn  a victim's latency while a neighbour churns "
		"registrations (NIC model)\n"
		"  load   crr's sessions under load: client processes x "
		"threads, server threads\n",
		prog, prog);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "lat"))
		return cmd_lat(argc - 1, argv + 1);
	if (!strcmp(argv[1], "reg"))
		return cmd_reg(argc - 1, argv + 1);
	if (!strcmp(argv[1], "crr"))
		return cmd_crr(argc - 1, argv + 1);
	if (!strcmp(argv[1], "churn"))
		return cmd_churn(argc - 1, argv + 1);
	if (!strcmp(argv[1], "load"))
		return cmd_load(argc - 1, argv + 1);
	fail("unknown subcommand '%s'", argv[1]);
	usage(stderr);
	return 2;
}
