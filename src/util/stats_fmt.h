/* SPDX-License-Identifier: MIT */
/*
 * stats_fmt.h - the statistics record: what a context publishes in
 * /dev/shm (TOLLFREE_STATS_PUBLISH=y) and what TOLLFREE_STATS=file:<path>
 * appends at context close.  `tollfree-info -s` reads both.
 *
 * One record is a fixed 192-byte header followed by n_entries entries of
 * entry_size bytes, each a NUL-padded counter name and a 64-bit value, so
 * that a reader needs no knowledge of the library's stats structs: a newer
 * library may add counters without breaking an older reader.  Integers are
 * little-endian, except seq, req and ack, which only a live segment uses
 * (native order; the owner accesses them atomically through its mapping,
 * a reader with pread/pwrite of the aligned word; 0 in a dump file).  A
 * dump file is a sequence of records, one per closed context.
 *
 *   off size field
 *     0    8 magic "TFSTATS" NUL
 *     8    2 version (1)
 *    10    2 hdr_size (>= 192; a reader skips what it does not know)
 *    12    4 total_size: hdr_size + n_entries * entry_size
 *    16    4 entry_size (>= 64)
 *    20    4 n_entries
 *    24    4 seq: seqlock word, odd while the owner rewrites the record
 *    28    4 req: bumped by a reader that wants a fresh snapshot
 *    32    4 ack: the last req the owner answered
 *    36    4 flags (TF_STATS_F_*)
 *    40    4 pid of the owner
 *    44    4 context number within the owner process
 *    48    8 start_ns: CLOCK_REALTIME when the context was opened
 *    56    8 update_ns: CLOCK_REALTIME of this snapshot
 *    64    4 capacity: entries the segment has room for
 *    68    4 dropped: counters left out for lack of room
 *    72    8 reserved (0)
 *    80   16 provider name, NUL-terminated
 *    96   64 device name, NUL-terminated
 *   160   16 owner's process name (comm), NUL-terminated
 *   176   16 transport (tf_caps_t.transport: soft "shm", "auto:tcp"...),
 *            NUL-terminated; empty (0) from writers that predate it
 *   entry: name[56] (printable ASCII, NUL-padded), value (8)
 *
 * Everything here is a pure function of its arguments: the parser is
 * compiled into tollfree-info and a fuzzer as well as into the library,
 * and it treats its input as untrusted (every length and count checked).
 */
#ifndef TOLLFREE_STATS_FMT_H
#define TOLLFREE_STATS_FMT_H

#include <stddef.h>
#include <stdint.h>

#define TF_STATS_MAGIC	    "TFSTATS"
#define TF_STATS_VERSION    1
#define TF_STATS_HDR_SIZE   192
#define TF_STATS_ENTRY_SIZE 64
#define TF_STATS_NAME_MAX   56 /* with the NUL */
/* Readers refuse anything larger: no honest record comes near it. */
#define TF_STATS_MAX_ENTRIES 65536
#define TF_STATS_MAX_HDR     4096
#define TF_STATS_MAX_ENTRY   1024

/* Where live segments are, and their names: tollfree.<pid>.<ctx>. */
#define TF_STATS_DIR	"/dev/shm"
#define TF_STATS_PREFIX "tollfree."

enum tf_stats_flags {
	TF_STATS_F_FINAL = 1u << 0, /* written at context close (a dump) */
};

struct tf_stats_hdr {
	char magic[8];
	uint16_t version;
	uint16_t hdr_size;
	uint32_t total_size;
	uint32_t entry_size;
	uint32_t n_entries;
	uint32_t seq;
	uint32_t req;
	uint32_t ack;
	uint32_t flags;
	uint32_t pid;
	uint32_t ctx_id;
	uint64_t start_ns;
	uint64_t update_ns;
	uint32_t capacity;
	uint32_t dropped;
	uint64_t reserved0;
	char provider[16];
	char device[64];
	char comm[16];
	char transport[16];
};

struct tf_stats_entry {
	char name[TF_STATS_NAME_MAX];
	uint64_t value;
};

_Static_assert(sizeof(struct tf_stats_hdr) == TF_STATS_HDR_SIZE,
	       "stats header layout");
_Static_assert(sizeof(struct tf_stats_entry) == TF_STATS_ENTRY_SIZE,
	       "stats entry layout");
_Static_assert(offsetof(struct tf_stats_hdr, seq) == 24, "seq offset");
_Static_assert(offsetof(struct tf_stats_hdr, provider) == 80, "offsets");

/* A parsed record; strings are NUL-terminated copies, entries point into
 * the caller's buffer (every one of them already validated). */
struct tf_stats_rec {
	uint32_t size; /* bytes of the record in the buffer */
	uint32_t flags;
	uint32_t pid;
	uint32_t ctx_id;
	uint32_t n_entries;
	uint32_t entry_size;
	uint32_t capacity;
	uint32_t dropped;
	uint64_t start_ns;
	uint64_t update_ns;
	char provider[16];
	char device[64];
	char comm[16];
	char transport[16]; /* empty if the writer did not say */
	const uint8_t *entries;
};

/*
 * tf__stats_parse - validate the record at the start of @buf (@len bytes,
 * untrusted) and describe it in @rec.  Returns 0 or a negative errno:
 * -ENODATA (shorter than its header or than its total_size: truncated),
 * -EBADMSG (bad magic), -EPROTONOSUPPORT (unknown version), -EOVERFLOW
 * (sizes or counts out of bounds or inconsistent), -EILSEQ (a name that is
 * empty, unterminated or not printable).
 */
int tf__stats_parse(const void *buf, size_t len, struct tf_stats_rec *rec);
/* What an error of tf__stats_parse() means, for a reader's message. */
const char *tf__stats_parse_error(int err);
/* Entry @i (< rec->n_entries) of a parsed record. */
void tf__stats_entry(const struct tf_stats_rec *rec, uint32_t i,
		     const char **name_p, uint64_t *value_p);

/*
 * Writing: tf__stats_init() lays out an empty record with room for
 * @capacity entries in @buf (TF_STATS_HDR_SIZE + capacity * entry bytes),
 * tf__stats_add() appends a counter (or counts it as dropped when full;
 * a name longer than TF_STATS_NAME_MAX - 1 is cut), and tf__stats_seal()
 * sets update_ns and total_size.  Returns the record's size.
 */
void tf__stats_init(void *buf, uint32_t capacity, uint32_t flags, uint32_t pid,
		    uint32_t ctx_id, uint64_t start_ns, const char *provider,
		    const char *device, const char *comm);
/* Name the context's transport in the record laid out at @buf. */
void tf__stats_set_transport(void *buf, const char *transport);
void tf__stats_add(void *buf, const char *name, uint64_t value);
uint32_t tf__stats_seal(void *buf, uint64_t update_ns);

#endif /* TOLLFREE_STATS_FMT_H */
