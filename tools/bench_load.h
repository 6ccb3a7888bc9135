/* SPDX-License-Identifier: MIT */
/*
 * bench_load.h - what the three parts of tollfree-bench load share: the
 * modes, the options, the control messages between the parent and the
 * server process, and the results a client process sends back.  The run
 * (options, forks, merging, report) is in bench_load.c, the server in
 * bench_load_server.c, the clients in bench_load_client.c.  Nodes,
 * buffers and session parameters come from crr (bench_crr.h).
 */
#ifndef TF_BENCH_LOAD_H
#define TF_BENCH_LOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "bench_crr.h"

enum load_kind {
	LK_TF,	    /* a tollfree session on the pool+mw node */
	LK_TCP_RR,  /* K exchanges on a kept TCP connection */
	LK_TCP_CRR, /* connect, K exchanges, close */
};

struct load_mode {
	const char *name;
	enum load_kind kind;
	bool reuse; /* LK_TF: kept connections */
	bool spin;  /* LK_TCP_*: non-blocking sockets, busy-polled */
	bool grant; /* LK_TF: the listeners that grant windows ahead */
};

#define LOAD_NMODES 7
extern const struct load_mode load_modes[LOAD_NMODES];

/* Bounds of the process and thread counts. */
#define LOAD_MAX_CLIENTS 64
#define LOAD_MAX_THREADS 64
#define LOAD_MAX_SERVER	 64

struct load_opts {
	struct bench_common cm;
	const char *plot;
	unsigned clients, threads, sthreads; /* N, T, S */
	unsigned k, duration_s;
	uint64_t size;
	double rate;	   /* --rate: sessions/s per thread; 0: closed loop */
	unsigned modes;	   /* bit per load_modes[] entry */
	bool server_sleep; /* --server-wait sleep */
	unsigned hog;	   /* --hog: sessions the hog holds; 0: no hog */
	unsigned bound;	   /* --hog: the server's per-address bound */
	bool hog_hold;	   /* --hog-hold: holds them, asks for no more */
	int hog_nice;	   /* --hog-nice: the hog's nice value */
	int server_nice;   /* --server-nice: the server process's */
	/* --client-spin-us: TOLLFREE_POLL_SPIN_US in the client processes;
	 * NULL: theirs (the environment's, or the library's default). */
	const char *client_spin;
	bool server_node_per_thread; /* --server-nodes thread */
	unsigned grant_depth;	     /* --grant-depth; 0: the library's */
	bool remote_inv;	     /* --remote-inv: TF_SESSION_REMOTE_INV */
	char client_spin_buf[16];
};

/* The library's default TOLLFREE_SESSION_MAX_SESSIONS_PEER, which the
 * server keeps in a --hog run unless the user set the variable. */
#define LOAD_DEFAULT_PEER_BOUND 256
/* The hog's source address (the clients' is 127.0.0.1). */
#define LOAD_HOG_ADDR "127.0.0.2"

/* Hog -> parent, after each mode it ran in. */
struct load_hog_res {
	uint64_t refused; /* connects refused (-EUSERS) */
	uint64_t failed;  /* other failures */
	uint64_t held;	  /* most sessions held at once */
	char err[120];	  /* the first failure that is not a refusal */
};

/* Parent -> server, on a socketpair; the reply is a struct load_ctl_rep.
 * Both ends are the same build, forked: native layout. */
enum load_ctl_cmd {
	LCTL_MODE = 1, /* arg: the mode that runs now */
	LCTL_CPU,      /* the server's CPU time so far */
	LCTL_QUIT,
};

struct load_ctl {
	uint32_t cmd, arg;
};

struct load_ctl_rep {
	int32_t status;	 /* 0, or why the server cannot go on */
	uint32_t port;	 /* the tollfree listeners' port (first reply) */
	uint32_t tcp;	 /* the TCP listeners' port (first reply) */
	uint32_t grant;	 /* the granting listeners' port (first reply) */
	uint64_t cpu_ns; /* user + system, every thread */
	uint64_t errors; /* sessions that failed on the server so far */
};

/* Parent -> client process: run @mode from t0 to t_end (CLOCK_MONOTONIC,
 * which every process shares); mode LOAD_NMODES: exit. */
struct load_cmd {
	uint32_t mode, pad;
	uint64_t t0, t_end;
};

/* What each session records (ns): the total, then the phases that the
 * client sees (crr's, less the server's revoke). */
enum load_sample {
	LS_TOTAL,
	LS_CONNECT,
	LS_PREPARE,
	LS_MOVE,
	LS_CLOSE,
	LS_COUNT,
};

/* Client process -> parent, after each mode: this header, then
 * LS_COUNT arrays of n doubles (all of LS_TOTAL first, then LS_CONNECT,
 * and so on). */
struct load_res {
	uint64_t n, failed;
	uint64_t missed;  /* open loop: due in the window, never started */
	uint64_t last_ns; /* when its last session ended */
	char err[120];	  /* the first failure, or "" */
};

/* The server process: serves until LCTL_QUIT on @ctl; its exit status. */
int load_server(const struct load_opts *o, int ctl);
/* Client process @idx: takes commands and answers results on @ch. */
int load_client(const struct load_opts *o, int ch, uint16_t port,
		uint16_t grant_port, uint16_t tcp_port, unsigned idx);
/* The hog process (--hog): takes the same commands on @ch; for each
 * mode it opens and holds sessions from LOAD_HOG_ADDR, and answers a
 * struct load_hog_res. */
int load_hog(const struct load_opts *o, int ch, uint16_t port,
	     uint16_t grant_port);

#endif /* TF_BENCH_LOAD_H */
