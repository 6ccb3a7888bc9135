/* SPDX-License-Identifier: MIT */
/*
 * stats_fmt.c - encode and parse statistics records (see stats_fmt.h).
 *
 * No allocation, no logging, no global state: the same object serves the
 * library (writer), tollfree-info (reader) and the fuzzer.
 */
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "stats_fmt.h"

/* Copy a fixed-size text field and terminate it: the input's own NUL is
 * not trusted. */
static void copy_text(char *dst, size_t dlen, const char *src, size_t slen)
{
	size_t n = strnlen(src, slen < dlen ? slen : dlen - 1);

	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* A counter name: non-empty, terminated within its field, and made of
 * printable ASCII without spaces, so that it prints as one token. */
static int check_name(const char *name)
{
	size_t n = strnlen(name, TF_STATS_NAME_MAX);

	if (n == 0 || n == TF_STATS_NAME_MAX)
		return -EILSEQ;
	for (size_t i = 0; i < n; i++)
		if (name[i] <= ' ' || name[i] > '~')
			return -EILSEQ;
	return 0;
}

int tf__stats_parse(const void *buf, size_t len, struct tf_stats_rec *rec)
{
	struct tf_stats_hdr h;
	uint32_t hdr_size, entry_size, n;
	uint64_t total;
	const uint8_t *p = buf;
	int ret;

	/* A short input that starts like a record is a truncated one. */
	if (memcmp(p, TF_STATS_MAGIC,
		   len < sizeof(TF_STATS_MAGIC) ? len : sizeof(TF_STATS_MAGIC)))
		return -EBADMSG;
	if (len < sizeof(h))
		return -ENODATA;
	memcpy(&h, p, sizeof(h)); /* the buffer need not be aligned */
	if (le16toh(h.version) != TF_STATS_VERSION)
		return -EPROTONOSUPPORT;
	hdr_size = le16toh(h.hdr_size);
	entry_size = le32toh(h.entry_size);
	n = le32toh(h.n_entries);
	if (hdr_size < TF_STATS_HDR_SIZE || hdr_size > TF_STATS_MAX_HDR ||
	    entry_size < TF_STATS_ENTRY_SIZE ||
	    entry_size > TF_STATS_MAX_ENTRY || n > TF_STATS_MAX_ENTRIES)
		return -EOVERFLOW;
	/* 64-bit arithmetic: the bounds above keep it far from overflow. */
	total = hdr_size + (uint64_t)n * entry_size;
	if (total != le32toh(h.total_size))
		return -EOVERFLOW;
	if (total > len)
		return -ENODATA;
	if (le32toh(h.capacity) < n)
		return -EOVERFLOW;
	for (uint32_t i = 0; i < n; i++) {
		ret = check_name((const char *)p + hdr_size +
				 (size_t)i * entry_size);
		if (ret)
			return ret;
	}
	memset(rec, 0, sizeof(*rec));
	rec->size = (uint32_t)total;
	rec->flags = le32toh(h.flags);
	rec->pid = le32toh(h.pid);
	rec->ctx_id = le32toh(h.ctx_id);
	rec->n_entries = n;
	rec->entry_size = entry_size;
	rec->capacity = le32toh(h.capacity);
	rec->dropped = le32toh(h.dropped);
	rec->start_ns = le64toh(h.start_ns);
	rec->update_ns = le64toh(h.update_ns);
	copy_text(rec->provider, sizeof(rec->provider), h.provider,
		  sizeof(h.provider));
	copy_text(rec->device, sizeof(rec->device), h.device, sizeof(h.device));
	copy_text(rec->comm, sizeof(rec->comm), h.comm, sizeof(h.comm));
	copy_text(rec->transport, sizeof(rec->transport), h.transport,
		  sizeof(h.transport));
	rec->entries = p + hdr_size;
	return 0;
}

const char *tf__stats_parse_error(int err)
{
	switch (err) {
	case -ENODATA:
		return "truncated record";
	case -EBADMSG:
		return "not a tollfree statistics record (bad magic)";
	case -EPROTONOSUPPORT:
		return "unsupported record version";
	case -EOVERFLOW:
		return "sizes or counts out of bounds";
	case -EILSEQ:
		return "malformed counter name";
	default:
		return "malformed record";
	}
}

void tf__stats_entry(const struct tf_stats_rec *rec, uint32_t i,
		     const char **name_p, uint64_t *value_p)
{
	const uint8_t *e = rec->entries + (size_t)i * rec->entry_size;
	uint64_t v;

	/* The value sits right after the name field, whatever entry_size a
	 * newer writer uses. */
	memcpy(&v, e + TF_STATS_NAME_MAX, sizeof(v));
	*name_p = (const char *)e;
	*value_p = le64toh(v);
}

void tf__stats_init(void *buf, uint32_t capacity, uint32_t flags, uint32_t pid,
		    uint32_t ctx_id, uint64_t start_ns, const char *provider,
		    const char *device, const char *comm)
{
	struct tf_stats_hdr *h = buf;

	memset(h, 0, sizeof(*h));
	memcpy(h->magic, TF_STATS_MAGIC, sizeof(TF_STATS_MAGIC));
	h->version = htole16(TF_STATS_VERSION);
	h->hdr_size = htole16(TF_STATS_HDR_SIZE);
	h->total_size = htole32(TF_STATS_HDR_SIZE);
	h->entry_size = htole32(TF_STATS_ENTRY_SIZE);
	h->flags = htole32(flags);
	h->pid = htole32(pid);
	h->ctx_id = htole32(ctx_id);
	h->start_ns = htole64(start_ns);
	h->capacity = htole32(capacity);
	snprintf(h->provider, sizeof(h->provider), "%s", provider);
	snprintf(h->device, sizeof(h->device), "%s", device);
	snprintf(h->comm, sizeof(h->comm), "%s", comm);
}

void tf__stats_set_transport(void *buf, const char *transport)
{
	struct tf_stats_hdr *h = buf;

	snprintf(h->transport, sizeof(h->transport), "%s", transport);
}

void tf__stats_add(void *buf, const char *name, uint64_t value)
{
	struct tf_stats_hdr *h = buf;
	uint32_t n = le32toh(h->n_entries);
	struct tf_stats_entry e;

	if (n >= le32toh(h->capacity)) {
		h->dropped = htole32(le32toh(h->dropped) + 1);
		return;
	}
	memset(&e, 0, sizeof(e));
	memcpy(e.name, name, strnlen(name, sizeof(e.name) - 1));
	e.value = htole64(value);
	memcpy((uint8_t *)buf + TF_STATS_HDR_SIZE +
		       (size_t)n * TF_STATS_ENTRY_SIZE,
	       &e, sizeof(e));
	h->n_entries = htole32(n + 1);
}

uint32_t tf__stats_seal(void *buf, uint64_t update_ns)
{
	struct tf_stats_hdr *h = buf;
	uint32_t total =
		TF_STATS_HDR_SIZE + le32toh(h->n_entries) * TF_STATS_ENTRY_SIZE;

	h->update_ns = htole64(update_ns);
	h->total_size = htole32(total);
	return total;
}
