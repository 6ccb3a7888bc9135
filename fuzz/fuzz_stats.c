/* SPDX-License-Identifier: MIT */
/*
 * fuzz_stats - statistics records (src/util/stats_fmt.h) as
 * `tollfree-info -s FILE` reads a dump: a sequence of records, each
 * parsed by tf__stats_parse and its entries read by tf__stats_entry.
 *
 * Checked: results are 0 or one of the documented errors, each with a
 * message; an accepted record lies within the input and holds at most
 * capacity entries, each name printable and terminated within its field,
 * each text field terminated; and re-encoding an accepted record with the
 * writer (tf__stats_init/add/seal) parses back to the same counters.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stats_fmt.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_quiet();
	return 0;
}

static void check_record(const struct tf_stats_rec *r, size_t avail)
{
	struct tf_stats_rec r2;
	const char *name, *name2;
	uint64_t v, v2;
	uint8_t *copy;
	size_t len;

	FUZZ_CHECK(r->size >= TF_STATS_HDR_SIZE && r->size <= avail);
	FUZZ_CHECK(r->n_entries <= r->capacity);
	FUZZ_CHECK(strlen(r->provider) < sizeof(r->provider) &&
		   strlen(r->device) < sizeof(r->device) &&
		   strlen(r->comm) < sizeof(r->comm));
	for (uint32_t i = 0; i < r->n_entries; i++) {
		tf__stats_entry(r, i, &name, &v);
		len = strlen(name);
		FUZZ_CHECK(len > 0 && len < TF_STATS_NAME_MAX);
		for (size_t k = 0; k < len; k++)
			FUZZ_CHECK(name[k] > ' ' && name[k] <= '~');
	}
	/* Round trip through the writer. */
	copy = malloc(TF_STATS_HDR_SIZE +
		      (size_t)r->n_entries * TF_STATS_ENTRY_SIZE);
	FUZZ_CHECK(copy);
	tf__stats_init(copy, r->n_entries, r->flags, r->pid, r->ctx_id,
		       r->start_ns, r->provider, r->device, r->comm);
	for (uint32_t i = 0; i < r->n_entries; i++) {
		tf__stats_entry(r, i, &name, &v);
		tf__stats_add(copy, name, v);
	}
	len = tf__stats_seal(copy, r->update_ns);
	FUZZ_CHECK(tf__stats_parse(copy, len, &r2) == 0);
	FUZZ_CHECK(r2.n_entries == r->n_entries && r2.dropped == 0 &&
		   r2.pid == r->pid && r2.update_ns == r->update_ns &&
		   !strcmp(r2.provider, r->provider) &&
		   !strcmp(r2.comm, r->comm));
	for (uint32_t i = 0; i < r->n_entries; i++) {
		tf__stats_entry(r, i, &name, &v);
		tf__stats_entry(&r2, i, &name2, &v2);
		FUZZ_CHECK(!strcmp(name, name2) && v == v2);
	}
	free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tf_stats_rec r;
	size_t off = 0;
	int ret;

	/* A record is at least a header long, so this ends. */
	while (off < size) {
		ret = tf__stats_parse(data + off, size - off, &r);
		if (ret) {
			FUZZ_CHECK(ret == -ENODATA || ret == -EBADMSG ||
				   ret == -EPROTONOSUPPORT ||
				   ret == -EOVERFLOW || ret == -EILSEQ);
			FUZZ_CHECK(tf__stats_parse_error(ret)[0]);
			break;
		}
		check_record(&r, size - off);
		off += r.size;
	}
	return 0;
}
