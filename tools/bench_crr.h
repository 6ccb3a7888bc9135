/* SPDX-License-Identifier: MIT */
/*
 * bench_crr.h - what the two sides of tollfree-bench crr share: the modes,
 * the options, the bench channel between client and server, and the node
 * and session parameters both sides use (bench_crr.c).  The server is in
 * bench_crr_server.c, the client in bench_crr_client.c.
 */
#ifndef TF_BENCH_CRR_H
#define TF_BENCH_CRR_H

#include <stdbool.h>
#include <stdint.h>

#include <tollfree/tollfree.h>

#include "bench.h"

/* ------------------------------------------------------------ modes */

enum crr_reg {
	R_DIRECT,
	R_CACHE,
	R_POOL,
	R_POOLMW,
	R_POOLMW_PSK,	/* pool+mw with a pre-shared key on both nodes */
	R_POOLMW_GRANT, /* pool+mw, the listener grants windows ahead */
	R_COUNT,
};

extern const char *const reg_names[R_COUNT];

enum crr_kind {
	K_SESSION, /* a registration strategy and a connection strategy */
	K_WARM,
	K_TCP_CRR,
	K_TCP_RR,
};

struct crr_mode {
	const char *name;
	enum crr_kind kind;
	int reg;    /* enum crr_reg (K_SESSION; warm uses pool+mw) */
	bool reuse; /* K_SESSION: take kept connections */
	bool spin;  /* K_TCP_*: both sides busy-poll non-blocking sockets */
};

/* The modes, in the order of the table (bench_crr.c). */
#define NMODES 15
extern const struct crr_mode crr_modes[NMODES];

enum crr_op {
	OP_WRITE,
	OP_READ,
	OP_SEND,
};

extern const char *const op_names[3];

/* Bounds of -k and -s, and the wait for a peer that is an error. */
#define CRR_MAX_K      1024
#define CRR_MAX_SIZE   (16u << 20)
#define CRR_TIMEOUT_MS 10000
/* The pre-shared key of the +psk mode's nodes, the same in every build:
 * what is measured is the key proof in the handshake, not secrecy. */
#define CRR_PSK "tollfree-bench crr pre-shared key"
/* Connect private data of the warm session. */
#define WARM_PRIV "warm"

struct crr_opts {
	struct bench_common cm;
	const char *server, *connect; /* HOST:PORT */
	const char *plot;
	unsigned k, sessions, warmup, batch;
	bool warmup_set;
	uint64_t size;
	int op;
	unsigned modes;	   /* bit per crr_modes[] entry */
	unsigned gap_us;   /* --gap-us: the client's pause before each one */
	bool server_sleep; /* --server-wait sleep */
	bool remote_inv;   /* --remote-inv: TF_SESSION_REMOTE_INV */
};

/* ------------------------------------------------------------ channel */

/* The bench channel: fixed little-endian-free binary records (both ends
 * convert with htonl/ntohl), checked on receipt. */
#define CH_MAGIC   0x74666372u /* "tfcr" */
#define CH_VERSION 4

enum ch_type {
	CH_HELLO = 1, /* client: op, k, size, flags */
	CH_PORTS,     /* server: status, the listeners' ports */
	CH_RECORD,    /* server, after each session: revoke ns, status */
	CH_BYE,	      /* client: done */
	CH_MODE,      /* client, before a batch: the listener it uses (a) */
};

/* The server's ports, as CH_PORTS lists them: one listener per
 * registration strategy, then the TCP echo listeners. */
enum crr_port {
	P_TCP = R_COUNT, /* tcp-crr, tcp-rr: the echo server waits */
	P_TCP_SPIN,	 /* tcp-crr-spin, tcp-rr-spin: it busy-polls */
	P_COUNT,
};

struct ch_msg {
	uint32_t magic;
	uint32_t version; /* CH_VERSION: both sides run the same build */
	uint32_t type;
	uint32_t a, b, c,
		d; /* hello: op, k, size, flags; record: status in a */
	uint32_t ports[P_COUNT]; /* ports: enum crr_port */
	uint32_t ns_hi, ns_lo;	 /* record: revoke ns */
};

/* Hello flags (d). */
#define CH_HELLO_SLEEP 1u /* the server sleeps when idle */

int ch_send(int fd, struct ch_msg *m);
/* Receive one record of @type (0: any): 0, -EPROTO (not one), or a
 * sock_full error. */
int ch_recv(int fd, struct ch_msg *m, uint32_t type);

/* ------------------------------------------------------------ nodes */

/* Which way a pool copy goes for @op on the server or the client. */
unsigned attach_flags(int op, bool server);
/* The node of registration strategy @reg (reported on failure). */
int node_for(tf_context_t *ctx, int reg, uint64_t size, tf_node_t **n);
/* @len bytes of anonymous memory, filled (NULL reported). */
void *map_buf(size_t len);
tf_session_params_t sess_params(const struct crr_opts *o, unsigned flags);

/* The server (one client run, then it returns) and the client. */
int crr_server(const struct crr_opts *o, int chlfd, const char *host, int cpu);
int crr_client(const struct crr_opts *o, int ch, const char *host, int cpu,
	       const char *pin_note);

#endif /* TF_BENCH_CRR_H */
