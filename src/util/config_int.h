/* SPDX-License-Identifier: MIT */
/*
 * config_int.h - the one table of TOLLFREE_* variables.
 *
 * Every variable is declared once, here, with its component, type, default
 * and help.  The table drives parsing (config.c), struct tf_config's fields,
 * `tollfree-info -c` and the generated RUNTIME PARAMETERS sections of the
 * man pages, so that documented defaults cannot drift from the code.
 * getenv() is called nowhere else.
 */
#ifndef TOLLFREE_CONFIG_INT_H
#define TOLLFREE_CONFIG_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

/*
 * XX(component, NAME, field, type, default, help)
 * Types: STR (text, at most TF_CONFIG_STR_MAX-1 bytes), UINT (decimal),
 * SIZE (bytes with K/M/G suffixes or "inf"), BOOL (y/n/yes/no/1/0/on/off),
 * LOGLEVEL (error/warn/info/debug/trace).
 */
#define TF_CONFIG_VARS(XX)                                                     \
	XX(core, PROVIDER, provider, STR, "auto",                              \
	   "Provider to open: auto (verbs if an RDMA device exists, else "     \
	   "soft), soft or verbs")                                             \
	XX(core, DEVICE, device, STR, "",                                      \
	   "RDMA device for the verbs provider (empty: the first one)")        \
	XX(core, LOG_LEVEL, log_level, LOGLEVEL, "warn",                       \
	   "Log level: error, warn, info, debug or trace")                     \
	XX(core, LOG_RATE, log_rate, UINT, "10",                               \
	   "Log: lines per second one message (same format, same subsystem) "  \
	   "may print at levels error to info; the rest are counted and the "  \
	   "count is added to its next line (0: no limit)")                    \
	XX(core, STATS, stats, STR, "",                                        \
	   "Dump context counters at close: stdout or stderr (one line of "    \
	   "name=value), or file:<path> (appends a binary record that "        \
	   "tollfree-info -s <path> reads)")                                   \
	XX(core, STATS_PUBLISH, stats_publish, BOOL, "n",                      \
	   "Publish each context's live counters in "                          \
	   "/dev/shm/tollfree.<pid>.<n> (mode 0600, removed at close) for "    \
	   "tollfree-info -s")                                                 \
	XX(core, POLL_SPIN_US, poll_spin_us, UINT, "50",                       \
	   "tf_cq_wait, tf_session_wait and tf_session_wait_peer busy-poll "   \
	   "this long (microseconds) before sleeping on their fd: a reply "    \
	   "in flight for less never puts the waiter to sleep")                \
	XX(core, POLL_SPIN_YIELD_US, poll_spin_yield_us, UINT, "5",            \
	   "While it busy-polls, a wait yields the CPU (sched_yield) this "    \
	   "often (microseconds), so that a thread it waits for on the same "  \
	   "core can run where threads outnumber cores (0: never)")            \
	XX(core, QP_TIMEOUT_MS, qp_timeout_ms, UINT, "4000",                   \
	   "Default transport timeout of a QP before RETRY_EXC completions")   \
	XX(core, QP_MAX_WR, qp_max_wr, UINT, "16384",                          \
	   "Upper bound on send and receive queue depth")                      \
	XX(core, CQ_MAX_DEPTH, cq_max_depth, UINT, "65536",                    \
	   "Upper bound on completion queue depth")                            \
	XX(core, MAX_PINNED, max_pinned, SIZE, "1G",                           \
	   "Most memory one context may pin, all registrations together "      \
	   "(pool chunks, cached regions, control QP slots, dedicated "        \
	   "registrations), in whole pages; past it a registration fails "     \
	   "with -ENOBUFS and a new session connection is refused (inf: "      \
	   "none)")                                                            \
	XX(soft, TRANSPORT, soft_transport, STR, "auto",                       \
	   "Soft provider transport: auto (shm to peers on this host, else "   \
	   "tcp), shm or tcp")                                                 \
	XX(soft, TCP_ADDR, soft_tcp_addr, STR, "127.0.0.1",                    \
	   "Soft tcp transport: local IPv4/IPv6 address to listen on and "     \
	   "advertise")                                                        \
	XX(soft, TCP_PORT, soft_tcp_port, UINT, "0",                           \
	   "Soft tcp transport: listening port (0: ephemeral)")                \
	XX(soft, MAX_MSG, soft_max_msg, SIZE, "16M",                           \
	   "Soft provider: largest message or one-sided transfer")             \
	XX(soft, MAX_MR, soft_max_mr, UINT, "65536",                           \
	   "Soft provider: most memory regions and windows per context")       \
	XX(soft, SHM_RING_SIZE, soft_shm_ring_size, SIZE, "256K",              \
	   "Soft shm transport: bytes of each QP's inbound message ring")      \
	XX(soft, SHM_EAGER, soft_shm_eager, SIZE, "16K",                       \
	   "Soft shm transport: SENDs up to this size are copied through "     \
	   "the ring, larger ones are pulled by the receiver")                 \
	XX(soft, SHM_PEER_CACHE, soft_shm_peer_cache, UINT, "16",              \
	   "Soft shm transport: peer contexts a context keeps attached "       \
	   "(pidfd, TPT and shared memory mapped) after their last queue "     \
	   "pair goes, so that the next connection to one makes no system "    \
	   "call to attach it (0: none kept)")                                 \
	XX(soft, SHM_PEER_CACHE_BYTES, soft_shm_peer_cache_bytes, SIZE, "1G",  \
	   "Soft shm transport: most bytes of peer memory (TPT and shared "    \
	   "memory) the kept peer contexts may have mapped; the least "        \
	   "recently used go first")                                           \
	XX(soft, SHM_SEG_CACHE, soft_shm_seg_cache, UINT, "32",                \
	   "Soft shm transport: segments of destroyed queue pairs a context "  \
	   "keeps for its next ones, and peer queue pairs' segments it "       \
	   "keeps mapped per peer context, so that a new connection to a "     \
	   "kept peer makes no system call for segments (0: none kept)")       \
	XX(soft, QUEUE_CACHE, soft_queue_cache, UINT, "8",                     \
	   "Queue memory (WQE rings, SGEs, inline buffers, CQ rings) of "      \
	   "destroyed queue pairs and CQs a context keeps for new ones of "    \
	   "the same sizes, of each kind (0: none kept; at most 64)")          \
	XX(soft, XLATE_ENTRIES, soft_xlate_entries, UINT, "0",                 \
	   "Translation-cache model: page translations resident on the "       \
	   "modelled NIC.  The model is on when this or XLATE_MISS_NS is "     \
	   "nonzero; off, it costs transfers nothing and its xlate_* "         \
	   "counters stay 0")                                                  \
	XX(soft, XLATE_MISS_NS, soft_xlate_miss_ns, UINT, "0",                 \
	   "Translation-cache model: busy-wait added per miss (models a "      \
	   "hardware NIC fetching a translation); nonzero turns the model "    \
	   "on (with XLATE_ENTRIES 0, every page misses)")                     \
	XX(soft, PROGRESS_THREAD, soft_progress_thread, BOOL, "n",             \
	   "Soft provider: run a progress thread so that a passive peer "      \
	   "serves one-sided operations without polling")                      \
	XX(pool, MAX, pool_max, SIZE, "1G",                                    \
	   "Pools: most chunk memory one pool allocates and registers; a "     \
	   "rent past it returns -ENOMEM")                                     \
	XX(pool, CHUNK, pool_chunk, SIZE, "2M",                                \
	   "Pools: bytes per chunk, registered once (a 2 MiB huge page)")      \
	XX(pool, MIN_SLICE, pool_min_slice, SIZE, "64",                        \
	   "Pools: smallest size class (a power of two)")                      \
	XX(pool, MAX_SLICE, pool_max_slice, SIZE, "1M",                        \
	   "Pools: largest size class (a power of two)")                       \
	XX(pool, THREAD_CACHE, pool_thread_cache, UINT, "64",                  \
	   "Pools: free slices per size class each thread keeps (0: none)")    \
	XX(pool, MEMORY, pool_memory, STR, "auto",                             \
	   "Pools: chunk memory: auto (provider memory if shareable, else "    \
	   "hugetlb, thp, regular), provider, hugetlb, thp or regular")        \
	XX(rcache, MAX_BYTES, rcache_max_bytes, SIZE, "1G",                    \
	   "Registration cache: most pinned bytes of cached regions")          \
	XX(rcache, MAX_REGIONS, rcache_max_regions, UINT, "4096",              \
	   "Registration cache: most cached regions")                          \
	XX(rcache, MONITOR, rcache_monitor, STR, "auto",                       \
	   "Registration cache: unmap monitor: auto (userfaultfd if "          \
	   "available, else none), uffd (required) or none (explicit "         \
	   "tf_rcache_invalidate only)")                                       \
	XX(rcache, CHECK, rcache_check, BOOL, "n",                             \
	   "Registration cache: verify hits against /proc/self/pagemap and "   \
	   "treat a changed frame as a stale miss (debug)")                    \
	XX(session, PSK, session_psk, STR, "",                                 \
	   "Sessions: pre-shared key (text, <= 256 bytes; never printed) "     \
	   "that authenticates and seals every session handshake; empty: "     \
	   "no authentication.  An invalid value makes node creation fail")    \
	XX(session, PSK_FILE, session_psk_file, STR, "",                       \
	   "Sessions: file holding the pre-shared key (raw bytes, <= 256), "   \
	   "a regular file of this user with no group or other access "        \
	   "(0600); anything else makes node creation fail")                   \
	XX(session, PSK_EARLY_WINDOW_MS, session_psk_early_window_ms, UINT,    \
	   "10000",                                                            \
	   "Sessions, with a pre-shared key: a client sends its sealed OPEN "  \
	   "behind its HELLO, with its realtime clock, and a server takes it " \
	   "(one round trip less) if that time is within this many ms of its " \
	   "own and the client's nonce is new; else the server challenges "    \
	   "first as without it.  0: off (client and server)")                 \
	XX(session, PSK_EARLY_MAX, session_psk_early_max, UINT, "4096",        \
	   "Sessions, with a pre-shared key: early OPENs a server remembers "  \
	   "(48 bytes each) to refuse a replay within the window; when it is " \
	   "full, clients get the challenge round trip.  0: a server takes "   \
	   "no early OPEN")                                                    \
	XX(session, TIMEOUT_MS, session_timeout_ms, UINT, "2000",              \
	   "Sessions: limit on each bootstrap read, revocation and close")     \
	XX(session, MAX_PENDING, session_max_pending, UINT, "256",             \
	   "Sessions: handshakes a listener serves at once; past it the "      \
	   "oldest connection that has not said HELLO is dropped, or the "     \
	   "newcomer refused (-EBUSY) if none")                                \
	XX(session, MAX_PENDING_PEER, session_max_pending_peer, UINT, "32",    \
	   "Sessions: handshakes a listener serves at once from one source "   \
	   "address (same rule per address)")                                  \
	XX(session, HELLO_TIMEOUT_MS, session_hello_timeout_ms, UINT, "500",   \
	   "Sessions: a new connection must send its HELLO within this "       \
	   "(and within TOLLFREE_SESSION_TIMEOUT_MS if shorter)")              \
	XX(session, MAX_SESSIONS, session_max_sessions, UINT, "4096",          \
	   "Sessions: sessions a node serves at once (accepted by any of its " \
	   "listeners and not yet closed); past it a new one is refused: "     \
	   "the client gets -EBUSY")                                           \
	XX(session, MAX_SESSIONS_PEER, session_max_sessions_peer, UINT, "256", \
	   "Sessions: sessions a node serves at once to one client address "   \
	   "(IP, port aside); past it a new one from there is refused: the "   \
	   "client gets -EUSERS, the others are served")                       \
	XX(session, MAX_EXPOSED_PEER, session_max_exposed_peer, SIZE, "256M",  \
	   "Sessions: bytes a node's server sessions expose at once to one "   \
	   "client address; a tf_session_expose past it fails with -ENOBUFS "  \
	   "(revoke and close give the bytes back; inf: no bound)")            \
	XX(session, MAX_KEPT, session_max_kept, UINT, "1024",                  \
	   "Sessions: idle server connections a node keeps for the next "      \
	   "session, all listeners together; past it a connection closes at "  \
	   "the end of its session instead (its client makes a new one)")      \
	XX(session, MAX_KEPT_PEER, session_max_kept_peer, UINT, "64",          \
	   "Sessions: idle server connections a node keeps from one client "   \
	   "address (same rule)")                                              \
	XX(session, SOURCE_ADDR, session_source_addr, STR, "",                 \
	   "Sessions: numeric local IP address a client's new connections "    \
	   "bind to (empty: the system's choice); a listener address of the "  \
	   "other family is skipped")                                          \
	XX(session, STOCK, session_stock, UINT, "4",                           \
	   "Sessions: connection resources (QP, CQ, control QP) a node keeps " \
	   "made ahead, so that a new connection "                             \
	   "takes them instead of creating them; 0: none")                     \
	XX(session, STOCK_REFILL, session_stock_refill, STR, "auto",           \
	   "Sessions: who makes the stock's entries: thread (a background "    \
	   "thread of the node), inline (the node's own calls, while they "    \
	   "wait on a peer or find nothing to do) or auto (thread where the "  \
	   "process may run on 4 CPUs or more, else inline).  An invalid "     \
	   "value makes node creation fail")                                   \
	XX(session, EARLY_ADDR, session_early_addr, STR, "n",                  \
	   "Sessions: a server sends a new connection's QP addresses before "  \
	   "it connects its QPs, so that the client connects its own "         \
	   "meanwhile (one more message; both sides' QP transitions "          \
	   "overlap): y (except through rdma_cm), auto (where connecting a "   \
	   "QP is a device command: TF_CAP_CONNECT_CMD) or n.  Off by "        \
	   "default: under rxe it helped in one guest and hurt across two "    \
	   "(tollfree(7)).  An invalid value makes node creation fail")        \
	XX(session, REMOTE_INV, session_remote_inv, STR, "auto",               \
	   "Sessions: a server agrees to a client's TF_SESSION_REMOTE_INV "    \
	   "(the client's SEND_WITH_INV revokes the server's window): y, n, "  \
	   "or auto (where the provider invalidates a window remotely only "   \
	   "through the QP it is bound to: soft; rdma_rxe does not check "     \
	   "the QP).  An invalid value makes node creation fail")              \
	XX(session, QP_CACHE, session_qp_cache, UINT, "16",                    \
	   "Sessions: idle connections (QP + socket) kept for reuse; 0: none") \
	XX(session, MW, session_mw, BOOL, "y",                                 \
	   "Sessions: expose through memory windows when the provider has "    \
	   "them (n: a dedicated registration per exposure)")                  \
	XX(core, REG_MODE, reg_mode, STR, "auto",                              \
	   "Sessions: registration strategy: auto, pool (copy), cache or "     \
	   "direct")                                                           \
	XX(core, REG_CROSSOVER, reg_crossover, STR, "64K",                     \
	   "Sessions: auto mode copies buffers up to this size (K/M/G) into "  \
	   "pool slices and uses larger ones in place; measure (or 0): the "   \
	   "bytes memcpy moves in the time of one 64 KiB registration, "       \
	   "measured when the node is created (varies between runs)")          \
	XX(verbs, GID_INDEX, verbs_gid_index, STR, "auto",                     \
	   "Verbs provider: GID index (auto: the first RoCE v2 IPv4 GID, "     \
	   "else 0)")                                                          \
	XX(verbs, PORT, verbs_port, UINT, "1", "Verbs provider: port number")  \
	XX(verbs, MTU, verbs_mtu, UINT, "0",                                   \
	   "Verbs provider: path MTU in bytes (0: the port's active MTU)")     \
	XX(verbs, CM, verbs_cm, STR, "auto",                                   \
	   "Verbs provider: how QPs connect: auto (rdma_cm on iWARP devices, " \
	   "which connect no other way; else the address exchange), oob "      \
	   "(address blobs exchanged by the caller, modify_qp to RTS) or "     \
	   "rdmacm (librdmacm)")

/* Text values, the pre-shared key (up to 256 bytes) included. */
#define TF_CONFIG_STR_MAX 260

#define TF__CFG_CTYPE_STR      char
#define TF__CFG_CTYPE_UINT     uint64_t
#define TF__CFG_CTYPE_SIZE     uint64_t
#define TF__CFG_CTYPE_BOOL     bool
#define TF__CFG_CTYPE_LOGLEVEL int
#define TF__CFG_DIM_STR	       [TF_CONFIG_STR_MAX]
#define TF__CFG_DIM_UINT
#define TF__CFG_DIM_SIZE
#define TF__CFG_DIM_BOOL
#define TF__CFG_DIM_LOGLEVEL

struct tf_config {
#define TF__CFG_FIELD(_comp, _NAME, _field, _type, _def, _help) \
	TF__CFG_CTYPE_##_type _field TF__CFG_DIM_##_type;
	TF_CONFIG_VARS(TF__CFG_FIELD)
#undef TF__CFG_FIELD
};

/* SIZE values equal to this mean "inf". */
#define TF_CONFIG_SIZE_INF UINT64_MAX

/* Copy the environment-derived configuration (read once) into @cfg. */
void tf__config_get(struct tf_config *cfg);
/* Set one field of @cfg from text, by name (without prefix). 0/-EINVAL/-ENOENT */
int tf__config_set(struct tf_config *cfg, const char *name, const char *value);
/* Whether the environment's value of @name (without prefix) was invalid
 * (and the default taken instead).  Security settings use it to fail
 * closed. */
bool tf__config_env_invalid(const char *name);
/* Parse a size ("64K", "inf"); 0 or -EINVAL. */
int tf__config_parse_size(const char *s, uint64_t *out);

#endif /* TOLLFREE_CONFIG_INT_H */
