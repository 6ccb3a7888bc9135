/* SPDX-License-Identifier: MIT */
/*
 * bench.h - what the tollfree-bench subcommands share: statistics, options,
 * context opening and CPU pinning (bench_common.c), the one report helper
 * every table goes through and the environment header (bench_report.c),
 * and the socket helpers (bench_sock.c).  Each subcommand lives in its own
 * files: lat in bench_lat.c, reg in bench_reg.c, crr in bench_crr*.c,
 * churn in bench_churn.c, load in bench_load*.c; tollfree-bench.c only
 * dispatches.
 */
#ifndef TF_BENCH_H
#define TF_BENCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <tollfree/tollfree.h>

#define ARRAY_SIZE(_a) (sizeof(_a) / sizeof((_a)[0]))

/* A wait for a peer or a completion that takes longer than this is an
 * error (the peer died or the transport is stuck), not a slow sample. */
#define WAIT_TIMEOUT_NS (30ull * 1000 * 1000 * 1000)
/* Spins between two clock reads while waiting: a clock read costs more
 * than a poll, so the deadline is checked only now and then. */
#define WAIT_CHECK_EVERY 1024

extern const char *prog;

void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t now_ns(void);
/* A turn of a busy-poll loop (a spinning server or client, TCP or
 * tollfree): a sched_yield every TOLLFREE_POLL_SPIN_YIELD_US (*@yielded:
 * the last), as the library's own waits do while they spin, so that every
 * spinning party of a benchmark gives way alike where threads outnumber
 * cores. */
void bench_spin_pause(uint64_t *yielded);

struct bench_stats {
	double min, max, median, avg, stdev, p99, p999; /* nanoseconds */
};

/* Sorts @v in place. */
void stats_compute(double *v, size_t n, struct bench_stats *st);
/* The median of @v (sorts it in place); 0 when @n is 0. */
double median_of(double *v, size_t n);

/* Phases of one short session (crr), in the order they happen. */
enum bench_phase {
	PH_CONNECT,
	PH_PREPARE,
	PH_MOVE,
	PH_REVOKE,
	PH_CLOSE,
	PH_COUNT,
};
extern const char *const bench_phase_names[PH_COUNT];

struct bench_row {
	const char *op;	   /* machine name: "write", "reg", "pool+mw/new" */
	const char *title; /* table title in text output */
	uint64_t size;
	unsigned iters;
	struct bench_stats st;
	/* Modes layout only: completed units per second (sessions/s) and
	 * the median of each phase, in nanoseconds. */
	double rate;
	double phases[PH_COUNT];
	/* Load only (report.load): sessions that failed, and the server's
	 * CPU time per completed session (ns). */
	uint64_t failed;
	double server_cpu;
};

/* Sized: one perftest table per op and one row per size (lat, reg,
 * churn).  Modes: one table, one row per mode, with a rate and a phase
 * breakdown (crr). */
enum report_layout {
	LAYOUT_SIZED,
	LAYOUT_MODES,
};

struct report {
	const char *bench; /* "lat", "reg", "crr", "churn" */
	enum report_layout layout;
	char provider[16];
	char device[64];
	char transport[16];
	char cpu[128];
	long nproc;
	/* Modes layout: what every row shares. */
	uint64_t size;
	unsigned transfers;
	unsigned sessions; /* per mode; 0: as many as a duration allows */
	bool load;	   /* modes layout with load's failed and CPU columns */
	/* JSON keys of the run after "sessions" (",\"k\":v,..."), or NULL. */
	const char *json_extra;
	struct bench_row *rows;
	size_t nrows, cap;
};

enum out_fmt {
	OUT_TEXT,
	OUT_CSV,
	OUT_JSON,
};

int report_add(struct report *r, const struct bench_row *row);
/* The one place that prints results, in every format and layout. */
void report_emit(const struct report *r, enum out_fmt fmt, FILE *f);
int report_write_json(const struct report *r, const char *path);
/* Row @a over row @b (by op): their rates (@rate) or their medians; 0
 * when either is missing or zero. */
double report_ratio(const struct report *r, const char *a, const char *b,
		    bool rate);
/* Fill the report's environment from an open context and print it. */
void report_header(struct report *r, tf_context_t *ctx, const char *transport,
		   const char *extra, enum out_fmt fmt);

int bench_open_ctx(const char *provider, const char *device,
		   const char *transport, tf_context_t **ctx_p);
/* Wait for one successful completion on @cq. */
int wait_one(tf_cq_t *cq, const char *what);
/* The first two CPUs this process may run on, or -1. */
void pick_cpus(int *a, int *b);
void pin_to(int cpu);
int parse_size(const char *arg, uint64_t max, uint64_t *out);
/* A bar on stderr: @done of @total, and what runs now (crr, load). */
void progress_bar(unsigned done, unsigned total, const char *what);

/* The options every subcommand takes: where it runs, how it reports. */
struct bench_common {
	const char *provider, *device, *transport; /* NULL: the default */
	const char *json;			   /* --json FILE */
	bool csv;
};

/* Their getopt values; a subcommand's own long options start at
 * OPT_OWN.  BENCH_COMMON_OPTS goes into its struct option table (with
 * BENCH_TRANSPORT_OPT where --transport applies). */
enum {
	OPT_PROVIDER = 256,
	OPT_DEVICE,
	OPT_TRANSPORT,
	OPT_CSV,
	OPT_JSON,
	OPT_OWN,
};
#define BENCH_COMMON_OPTS                                        \
	{"provider", required_argument, NULL, OPT_PROVIDER},     \
		{"device", required_argument, NULL, OPT_DEVICE}, \
		{"csv", no_argument, NULL, OPT_CSV},             \
	{                                                        \
		"json", required_argument, NULL, OPT_JSON        \
	}
#define BENCH_TRANSPORT_OPT                                         \
	{                                                           \
		"transport", required_argument, NULL, OPT_TRANSPORT \
	}

#define MAX_SIZES 32

/* The options of the sized subcommands (lat, reg). */
struct bench_opts {
	struct bench_common cm;
	unsigned iters;
	unsigned warmup; /* with warmup_set; else a default per bench */
	bool warmup_set;
	uint64_t sizes[MAX_SIZES];
	unsigned nsizes;
	unsigned tests; /* lat: bit per test */
};

/* Parse a sized subcommand's options into @o (defaults already set);
 * "-t" is taken only where @parse_tests is given (lat).  Exits after
 * "-h"; returns 0 or -1 (reported). */
int bench_parse_sized(int argc, char **argv, struct bench_opts *o,
		      int (*parse_tests)(const char *arg, unsigned *tests),
		      void (*usage)(FILE *));
/* bench_open_ctx with the options' provider, device and transport. */
int bench_opts_open_ctx(const struct bench_opts *o, tf_context_t **ctx_p);

/* Take getopt's @c if it is a common option: 1 (taken), 0 (not one of
 * them) or -1 (a bad value, reported). */
int bench_common_opt(int c, const char *arg, struct bench_common *b);
int parse_uint(const char *arg, const char *what, unsigned min, unsigned *out);
/* A decimal integer from @min to @max into *@out, or -1 (said). */
int parse_int(const char *arg, const char *what, int min, int max, int *out);
/* The end of a subcommand's getopt switch: "-h" prints @usage on stdout
 * and exits 0; a common option is taken; anything else (getopt has said
 * what) prints @usage on stderr.  0 (taken) or -1 (reported). */
int bench_opt_rest(int c, const char *arg, struct bench_common *b,
		   void (*usage)(FILE *));
/* After getopt: no subcommand takes operands.  0, or -1 (reported). */
int bench_no_operands(int argc, char **argv);
/* --server-wait spin|sleep (crr, load): 0, or -1 (reported). */
int parse_server_wait(const char *arg, bool *sleep);

/* Name tables (modes, tests): @n names, @stride bytes apart, the first
 * at @names (an array of strings, or the name as the first member of an
 * array of structs).  bench_name_mask sets the bit of each name in the
 * comma-separated @arg in *@mask, every bit for "all" where @all is set;
 * an unknown name or an @arg of @max_len characters or more (at most
 * 256) is -1, not reported. */
int bench_name_mask(const char *arg, size_t max_len, const char *const *names,
		    size_t stride, unsigned n, bool all, unsigned *mask);
/* --modes LIST (crr, load): *@modes is the names' bits, at least one, or
 * "all"; else -1, reported with @usage on stderr. */
int bench_parse_modes(const char *arg, const char *const *names, size_t stride,
		      unsigned n, void (*usage)(FILE *), unsigned *modes);
/* The names, comma-separated, then a newline (the usage texts). */
void bench_print_names(FILE *f, const char *const *names, size_t stride,
		       unsigned n);

/* Sockets (bench_sock.c).  Move exactly @len bytes of @buf; a socket
 * that would block (non-blocking, or past its SO_RCVTIMEO/SO_SNDTIMEO) is
 * waited for in poll(2) up to @timeout_ms (< 0: forever).  0, -EPIPE (the
 * peer closed), -ETIMEDOUT or -errno. */
int sock_full(int fd, void *buf, size_t len, bool wr, int timeout_ms);
/* Split "HOST:PORT" or "[V6]:PORT" (numeric); -1 reported. */
int sock_split_hostport(const char *arg, char *host, size_t hlen,
			uint16_t *port);
/* A listening TCP socket on @host:@port (0: ephemeral), SO_REUSEADDR;
 * *@bound receives the port.  The fd, or -1 reported. */
int sock_listen(const char *host, uint16_t port, uint16_t *bound);
/* sock_listen, and with @reuseport SO_REUSEPORT (several sockets, one per
 * thread, share the port) and a backlog of 1024. */
int sock_listen_opt(const char *host, uint16_t port, bool reuseport,
		    uint16_t *bound);
/* O_NONBLOCK on @fd: 0 or -errno (reported). */
int sock_set_nonblock(int fd);
/* TCP_NODELAY, and blocking calls that give up after @timeout_ms
 * instead of hanging on a dead peer (sock_full then reports it). */
void sock_nodelay(int fd, int timeout_ms);
/* A blocking connect to @host:@port, then sock_nodelay: the fd or
 * -errno. */
int sock_connect(const char *host, uint16_t port, int timeout_ms);
/* The busy-polling twins: sock_full with MSG_DONTWAIT retried at once,
 * never sleeping (the socket's blocking mode does not matter); a
 * non-blocking connect spun to completion, TCP_NODELAY, the fd left
 * non-blocking. */
int sock_full_spin(int fd, void *buf, size_t len, bool wr, int timeout_ms);
int sock_connect_spin(const char *host, uint16_t port, int timeout_ms);

int cmd_lat(int argc, char **argv);
int cmd_reg(int argc, char **argv);
int cmd_crr(int argc, char **argv);
int cmd_churn(int argc, char **argv);
int cmd_load(int argc, char **argv);

/* crr's plot (bench_plot.c): latency CDFs on a log axis and the phase
 * breakdown as stacked bars.  @samples[i] holds row i's sorted samples
 * (ns), @n[i] of them. */
int plot_crr_svg(const char *path, const struct report *r,
		 double *const *samples, const size_t *n);

#endif /* TF_BENCH_H */
