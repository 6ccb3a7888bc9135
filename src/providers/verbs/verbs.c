/* SPDX-License-Identifier: MIT */
/*
 * verbs.c - the verbs provider over libibverbs: device selection, context,
 * capabilities, memory, PDs, MRs and type-2 memory windows.
 *
 * libibverbs reports errors as NULL + errno or as a positive errno; every
 * call is converted to a negative errno here, at the provider edge.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "verbs_int.h"

int tf_verbs_errno(int dflt)
{
	return errno > 0 ? -errno : -dflt;
}

int tf_verbs_access(unsigned access)
{
	int a = 0;

	if (access & TF_ACCESS_LOCAL_WRITE)
		a |= IBV_ACCESS_LOCAL_WRITE;
	if (access & TF_ACCESS_REMOTE_WRITE)
		a |= IBV_ACCESS_REMOTE_WRITE;
	if (access & TF_ACCESS_REMOTE_READ)
		a |= IBV_ACCESS_REMOTE_READ;
	if (access & TF_ACCESS_REMOTE_ATOMIC)
		a |= IBV_ACCESS_REMOTE_ATOMIC;
	if (access & TF_ACCESS_MW_BIND)
		a |= IBV_ACCESS_MW_BIND;
	return a;
}

static uint32_t clamp_u32(int64_t v)
{
	return v < 0 ? 0 : v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

/* ---------------------------------------------------------------- probe */

/* Find @name (or the first device when @name is empty) in @list. */
static struct ibv_device *find_device(struct ibv_device **list, int n,
				      const char *name)
{
	for (int i = 0; i < n; i++)
		if (!name[0] || !strcmp(ibv_get_device_name(list[i]), name))
			return list[i];
	return NULL;
}

static int verbs_probe(const struct tf_config *cfg)
{
	struct ibv_device **list;
	int n, found;

	list = ibv_get_device_list(&n);
	if (!list)
		return 0; /* no kernel support: simply no device */
	found = find_device(list, n, cfg->device) != NULL;
	ibv_free_device_list(list);
	return found;
}

static const char *port_state_str(enum ibv_port_state s)
{
	switch (s) {
	case IBV_PORT_DOWN:
		return "down";
	case IBV_PORT_INIT:
		return "init";
	case IBV_PORT_ARMED:
		return "armed";
	case IBV_PORT_ACTIVE:
		return "active";
	default:
		return "other";
	}
}

static int verbs_list_devices(const struct tf_config *cfg,
			      void (*fn)(const char *dev, const char *info,
					 void *arg),
			      void *arg)
{
	struct ibv_device **list;
	int n;

	list = ibv_get_device_list(&n);
	if (!list)
		return 0;
	for (int i = 0; i < n; i++) {
		const char *name = ibv_get_device_name(list[i]);
		struct ibv_context *c = ibv_open_device(list[i]);
		struct ibv_port_attr pa;
		char info[160];

		if (!c) {
			snprintf(info, sizeof(info), "cannot open: %s",
				 strerror(errno));
		} else if (ibv_query_port(c, (uint8_t)cfg->verbs_port, &pa)) {
			snprintf(info, sizeof(info), "port %u: query failed",
				 (unsigned)cfg->verbs_port);
		} else {
			snprintf(info, sizeof(info),
				 "port %u %s, %s, active mtu %d",
				 (unsigned)cfg->verbs_port,
				 port_state_str(pa.state),
				 pa.link_layer == IBV_LINK_LAYER_ETHERNET
					 ? "RoCE"
					 : "InfiniBand",
				 128 << pa.active_mtu);
		}
		if (c)
			ibv_close_device(c);
		fn(name, info, arg);
	}
	ibv_free_device_list(list);
	return n;
}

/* ---------------------------------------------------------------- context */

static bool gid_is_v4mapped(const union ibv_gid *g)
{
	static const uint8_t pfx[12] = {0, 0, 0, 0, 0,	  0,
					0, 0, 0, 0, 0xff, 0xff};

	return !memcmp(g->raw, pfx, sizeof(pfx));
}

/*
 * GID choice: an explicit index, or "auto": the first RoCE v2 GID that is an
 * IPv4-mapped address (routable, and what rdma_cm would pick for IPv4
 * peers); failing that, index 0, which on InfiniBand is the port GID.
 */
static int select_gid(struct tf_verbs_ctx *c, const char *want)
{
	int idx = 0;

	if (want[0] && strcmp(want, "auto")) {
		char *end;
		unsigned long v = strtoul(want, &end, 10);

		if (*end || v >= (unsigned long)c->pattr.gid_tbl_len) {
			tf_log_error(
				VERBS_SUBSYS,
				"TOLLFREE_VERBS_GID_INDEX=%s: not an index "
				"below %d",
				want, c->pattr.gid_tbl_len);
			return -EINVAL;
		}
		idx = (int)v;
	} else if (c->link_layer == VERBS_LL_ETH) {
		for (int i = 0; i < c->pattr.gid_tbl_len; i++) {
			struct ibv_gid_entry e;

			/* Empty slots fail (ENODATA); skip them. */
			if (ibv_query_gid_ex(c->ibctx, c->port, (uint32_t)i, &e,
					     0))
				continue;
			if (e.gid_type == IBV_GID_TYPE_ROCE_V2 &&
			    gid_is_v4mapped(&e.gid)) {
				idx = i;
				break;
			}
		}
	}
	if (ibv_query_gid(c->ibctx, c->port, idx, &c->gid)) {
		tf_log_error(VERBS_SUBSYS, "%s: ibv_query_gid(port %u, %d): %m",
			     c->base.device, c->port, idx);
		return tf_verbs_errno(EIO);
	}
	c->gid_index = idx;
	return 0;
}

int tf_verbs_mtu_from_bytes(uint64_t bytes, enum ibv_mtu *mtu)
{
	switch (bytes) {
	case 256:
		*mtu = IBV_MTU_256;
		return 0;
	case 512:
		*mtu = IBV_MTU_512;
		return 0;
	case 1024:
		*mtu = IBV_MTU_1024;
		return 0;
	case 2048:
		*mtu = IBV_MTU_2048;
		return 0;
	case 4096:
		*mtu = IBV_MTU_4096;
		return 0;
	default:
		return -EINVAL;
	}
}

/* Capabilities that the device attributes tell without trying anything. */
static uint64_t attr_caps(const struct tf_verbs_ctx *c)
{
	const struct ibv_device_attr *a = &c->dattr.orig_attr;
	const struct ibv_odp_caps *odp = &c->dattr.odp_caps;
	uint32_t odp_rc = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
			  IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ;
	uint64_t f = TF_CAP_CQ_FD | TF_CAP_AUTO_PROGRESS;

	if (a->device_cap_flags &
	    (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B))
		f |= TF_CAP_MW_TYPE2;
	if (a->atomic_cap != IBV_ATOMIC_NONE)
		f |= TF_CAP_ATOMIC;
	/* SEND_WITH_INV and LOCAL_INV are part of the base memory
	 * management extensions. */
	if (a->device_cap_flags & IBV_DEVICE_MEM_MGT_EXTENSIONS)
		f |= TF_CAP_SEND_WITH_INV;
	if ((odp->general_caps & IBV_ODP_SUPPORT) &&
	    (odp->per_transport_caps.rc_odp_caps & odp_rc) == odp_rc)
		f |= TF_CAP_ODP;
	/* iWARP (RDMAP) carries no immediate data, and completes a SEND or
	 * WRITE once TCP has it. */
	if (!c->iwarp)
		f |= TF_CAP_IMM_DATA | TF_CAP_REMOTE_ACK;
	if (c->use_cm)
		f |= TF_CAP_RDMA_CM;
	else
		f |= TF_CAP_QP_RESET | TF_CAP_CONNECT_CMD;
	return f;
}

/*
 * siw's kernel hands out the mmap offsets of a QP's and a CQ's rings from
 * the context's page offsets, lowest free first (rdma_user_mmap), while
 * libsiw still takes the offset 0x90000 (page 144) for the kernel's "no
 * mapping" key (SIW_INVAL_UOBJ_KEY) and refuses the object, without
 * setting errno.  Whichever QP or CQ of a process would have its ring
 * start at page 144 could never be created: the 49th CQ of 3 pages, a
 * control QP after a few sessions.  A CQ made first in the fresh context
 * takes the pages from 0 and covers page 144 for the context's life, so
 * that no ring can start there.  It costs 1 MiB of the kernel's memory
 * (vmalloc, not pinned user memory), mapped into the process.
 */
static void siw_plug_offset(struct tf_verbs_ctx *c)
{
	c->siw_plug =
		ibv_create_cq(c->ibctx, VERBS_SIW_PLUG_CQE, NULL, NULL, 0);
	if (!c->siw_plug)
		tf_log_warn(VERBS_SUBSYS,
			    "%s: no plug CQ (%m): a QP or CQ whose ring "
			    "would start at mmap offset 0x90000 will be "
			    "refused by libsiw",
			    c->base.device);
}

/*
 * How QPs connect (TOLLFREE_VERBS_CM): iWARP devices only through rdma_cm
 * (the kernel's iw_cm moves their QPs to RTS), others by the address
 * exchange unless the setting asks for rdma_cm.
 */
static int select_cm(struct tf_verbs_ctx *c, const char *want)
{
	if (!want[0] || !strcmp(want, "auto")) {
		c->use_cm = c->iwarp;
	} else if (!strcmp(want, "rdmacm")) {
		c->use_cm = true;
	} else if (!strcmp(want, "oob")) {
		if (c->iwarp)
			tf_log_warn(VERBS_SUBSYS,
				    "%s is an iWARP device: its QPs cannot "
				    "connect without rdma_cm "
				    "(TOLLFREE_VERBS_CM=oob)",
				    c->base.device);
		c->use_cm = false;
	} else {
		tf_log_error(VERBS_SUBSYS,
			     "TOLLFREE_VERBS_CM=%s: not auto, oob or rdmacm",
			     want);
		return -EINVAL;
	}
#ifndef TF_HAVE_RDMACM
	if (c->use_cm && strcmp(want, "rdmacm")) {
		tf_log_info(VERBS_SUBSYS,
			    "%s is an iWARP device and tollfree was built "
			    "without librdmacm: its QPs cannot connect",
			    c->base.device);
	} else if (c->use_cm) {
		tf_log_error(VERBS_SUBSYS, "TOLLFREE_VERBS_CM=rdmacm: tollfree "
					   "was built without librdmacm");
		return -EOPNOTSUPP;
	}
#endif
	return 0;
}

static int verbs_context_open(const struct tf_config *cfg,
			      struct tf_context **ctx_p)
{
	struct ibv_device **list;
	struct ibv_device *dev;
	struct tf_verbs_ctx *c;
	int n, ret;

	if (cfg->verbs_port < 1 || cfg->verbs_port > 255) {
		tf_log_error(VERBS_SUBSYS,
			     "TOLLFREE_VERBS_PORT=%llu out of "
			     "range 1..255",
			     (unsigned long long)cfg->verbs_port);
		return -EINVAL;
	}
	list = ibv_get_device_list(&n);
	if (!list) {
		/* ENOSYS: the kernel has no RDMA support at all, which for a
		 * caller means the same as no device. */
		ret = errno == ENOSYS ? -ENODEV : tf_verbs_errno(ENODEV);
		tf_log_error(VERBS_SUBSYS, "ibv_get_device_list: %s",
			     strerror(errno));
		return ret;
	}
	dev = find_device(list, n, cfg->device);
	if (!dev) {
		tf_log_error(VERBS_SUBSYS, "device '%s' not found (%d devices)",
			     cfg->device[0] ? cfg->device : "(any)", n);
		ret = -ENODEV;
		goto err_list;
	}
	c = tf__calloc(1, sizeof(*c));
	if (!c) {
		ret = -ENOMEM;
		goto err_list;
	}
	c->base.cfg = *cfg;
	snprintf(c->base.device, sizeof(c->base.device), "%s",
		 ibv_get_device_name(dev));
	c->port = (uint8_t)cfg->verbs_port;
	c->ibctx = ibv_open_device(dev);
	if (!c->ibctx) {
		tf_log_error(VERBS_SUBSYS, "ibv_open_device(%s): %m",
			     c->base.device);
		ret = tf_verbs_errno(ENODEV);
		goto err_free;
	}
	ret = ibv_query_device_ex(c->ibctx, NULL, &c->dattr);
	if (ret) {
		/* Providers without the extended verb still answer the
		 * basic query; the extended fields stay zero. */
		memset(&c->dattr, 0, sizeof(c->dattr));
		ret = ibv_query_device(c->ibctx, &c->dattr.orig_attr);
		if (ret) {
			tf_log_error(VERBS_SUBSYS, "%s: ibv_query_device: %s",
				     c->base.device, strerror(ret));
			ret = -ret;
			goto err_close;
		}
	}
	ret = ibv_query_port(c->ibctx, c->port, &c->pattr);
	if (ret) {
		tf_log_error(VERBS_SUBSYS, "%s: ibv_query_port(%u): %s",
			     c->base.device, c->port, strerror(ret));
		ret = -ret;
		goto err_close;
	}
	if (c->pattr.state != IBV_PORT_ACTIVE)
		tf_log_info(VERBS_SUBSYS, "%s port %u is %s, not active",
			    c->base.device, c->port,
			    port_state_str(c->pattr.state));
	c->link_layer = c->pattr.link_layer == IBV_LINK_LAYER_ETHERNET
				? VERBS_LL_ETH
				: VERBS_LL_IB;
	ret = select_gid(c, cfg->verbs_gid_index);
	if (ret)
		goto err_close;
	if (cfg->verbs_mtu) {
		if (tf_verbs_mtu_from_bytes(cfg->verbs_mtu, &c->mtu)) {
			tf_log_error(VERBS_SUBSYS,
				     "TOLLFREE_VERBS_MTU=%llu: not one of 256, "
				     "512, 1024, 2048, 4096",
				     (unsigned long long)cfg->verbs_mtu);
			ret = -EINVAL;
			goto err_close;
		}
	} else {
		c->mtu = c->pattr.active_mtu;
	}
	c->rxe_inv_quirk = c->dattr.orig_attr.vendor_id == VERBS_RXE_VENDOR_ID;
	c->siw = c->dattr.orig_attr.vendor_id == VERBS_SIW_VENDOR_ID;
	if (c->siw)
		siw_plug_offset(c);
	c->iwarp = dev->transport_type == IBV_TRANSPORT_IWARP;
	ret = select_cm(c, cfg->verbs_cm);
	if (ret)
		goto err_close;
	c->cap_flags = attr_caps(c);
	/* A device that does not say reads as many SGEs as it sends. */
	c->max_sge_rd = clamp_u32(c->dattr.orig_attr.max_sge_rd);
	if (!c->max_sge_rd ||
	    c->max_sge_rd > clamp_u32(c->dattr.orig_attr.max_sge))
		c->max_sge_rd = clamp_u32(c->dattr.orig_attr.max_sge);
	c->qp_tab_mask = 63;
	c->qp_tab = tf__calloc(c->qp_tab_mask + 1, sizeof(*c->qp_tab));
	if (!c->qp_tab) {
		ret = -ENOMEM;
		goto err_close;
	}
	pthread_mutex_init(&c->probe_lock, NULL);
	pthread_mutex_init(&c->mw_lock, NULL);
	pthread_mutex_init(&c->cm_start_lock, NULL);
	pthread_rwlock_init(&c->qp_lock, NULL);
	tf_log_info(VERBS_SUBSYS,
		    "opened %s port %u gid[%d] mtu %d caps 0x%llx%s",
		    c->base.device, c->port, c->gid_index, 128 << c->mtu,
		    (unsigned long long)c->cap_flags,
		    c->use_cm ? ", connects through rdma_cm" : "");
	ibv_free_device_list(list);
	*ctx_p = &c->base;
	return 0;

err_close:
	if (c->siw_plug)
		ibv_destroy_cq(c->siw_plug);
	ibv_close_device(c->ibctx);
err_free:
	tf__free(c);
err_list:
	ibv_free_device_list(list);
	return ret;
}

static void verbs_context_close(struct tf_context *ctx)
{
	struct tf_verbs_ctx *c = VERBS_CTX(ctx);
	int ret;

	tf_verbs_cm_stop(c);
	if (c->siw_plug && ibv_destroy_cq(c->siw_plug))
		tf_log_warn(VERBS_SUBSYS, "%s: destroying the plug CQ: %m",
			    c->base.device);
	ret = ibv_close_device(c->ibctx);
	if (ret)
		tf_log_warn(VERBS_SUBSYS, "%s: ibv_close_device: %s",
			    c->base.device, strerror(errno));
	tf_verbs_qp_map_free(c);
	pthread_rwlock_destroy(&c->qp_lock);
	pthread_mutex_destroy(&c->probe_lock);
	pthread_mutex_destroy(&c->mw_lock);
	pthread_mutex_destroy(&c->cm_start_lock);
	tf__free(c);
}

/* ---------------------------------------------------------------- caps */

/*
 * Re-registration: the attributes do not say whether ibv_rereg_mr works
 * (rxe returns EOPNOTSUPP), so try it once on a scratch page.
 */
static bool probe_rereg(struct tf_verbs_ctx *c, struct ibv_pd *pd)
{
	long pg = sysconf(_SC_PAGESIZE);
	struct ibv_mr *mr;
	bool ok = false;
	char *buf;

	buf = mmap(NULL, 2 * (size_t)pg, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		return false;
	mr = ibv_reg_mr(pd, buf, (size_t)pg, IBV_ACCESS_LOCAL_WRITE);
	if (mr) {
		/* Only translation changes: libibverbs wants access 0
		 * unless IBV_REREG_MR_CHANGE_ACCESS is set. */
		ok = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL,
				  buf + pg, (size_t)pg, 0) == 0;
		if (!ok)
			tf_log_debug(VERBS_SUBSYS, "%s: ibv_rereg_mr: %m",
				     c->base.device);
		ibv_dereg_mr(mr);
	}
	munmap(buf, 2 * (size_t)pg);
	return ok;
}

/*
 * Inline data: the device attributes have no limit for it; the only way to
 * learn it is to create a QP.  Try decreasing sizes.
 */
static uint32_t probe_inline(struct tf_verbs_ctx *c, struct ibv_pd *pd)
{
	static const uint32_t sizes[] = {1024, 512, 256, 128, 64, 32};
	struct ibv_cq *cq;
	uint32_t best = 0;

	cq = ibv_create_cq(c->ibctx, 2, NULL, NULL, 0);
	if (!cq)
		return 0;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		struct ibv_qp_init_attr ia = {
			.send_cq = cq,
			.recv_cq = cq,
			.cap = {.max_send_wr = 1,
				.max_recv_wr = 1,
				.max_send_sge = 1,
				.max_recv_sge = 1,
				.max_inline_data = sizes[i]},
			.qp_type = IBV_QPT_RC,
		};
		struct ibv_qp *qp = ibv_create_qp(pd, &ia);

		if (qp) {
			best = ia.cap.max_inline_data;
			ibv_destroy_qp(qp);
			break;
		}
	}
	ibv_destroy_cq(cq);
	return best;
}

static void probe_caps(struct tf_verbs_ctx *c)
{
	struct ibv_pd *pd;

	pthread_mutex_lock(&c->probe_lock);
	if (c->probed)
		goto out_unlock;
	pd = ibv_alloc_pd(c->ibctx);
	if (pd) {
		if (probe_rereg(c, pd))
			c->probed_flags |= TF_CAP_REREG;
		c->max_inline_data = probe_inline(c, pd);
		if (c->max_inline_data)
			c->probed_flags |= TF_CAP_INLINE;
		ibv_dealloc_pd(pd);
	}
	/* A failed PD allocation leaves both probes negative, which is the
	 * honest answer: nothing was shown to work. */
	c->probed = true;
out_unlock:
	pthread_mutex_unlock(&c->probe_lock);
}

uint32_t tf_verbs_max_inline(struct tf_verbs_ctx *c)
{
	probe_caps(c);
	return c->max_inline_data;
}

static int verbs_query_caps(struct tf_context *ctx, tf_caps_t *caps)
{
	struct tf_verbs_ctx *c = VERBS_CTX(ctx);
	const struct ibv_device_attr *a = &c->dattr.orig_attr;

	probe_caps(c);
	caps->flags = c->cap_flags | c->probed_flags;
	caps->max_mr_size = a->max_mr_size;
	caps->max_mr = clamp_u32(a->max_mr);
	caps->max_mw = clamp_u32(a->max_mw);
	caps->max_qp = clamp_u32(a->max_qp);
	caps->max_qp_wr = clamp_u32(a->max_qp_wr);
	caps->max_cqe = clamp_u32(a->max_cqe);
	caps->max_sge = clamp_u32(a->max_sge < 64 ? a->max_sge : 64);
	caps->max_sge_rd = c->max_sge_rd;
	caps->max_inline_data = c->max_inline_data;
	caps->max_msg_size = c->pattr.max_msg_sz;
	snprintf(caps->device, sizeof(caps->device), "%s", c->base.device);
	snprintf(caps->transport, sizeof(caps->transport), "%s",
		 c->iwarp			 ? "iWARP"
		 : c->link_layer == VERBS_LL_ETH ? "RoCE"
						 : "IB");
	return 0;
}

/* ---------------------------------------------------------------- memory */

static size_t page_round(size_t size)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);

	return (size + pg - 1) & ~(pg - 1);
}

/* Verbs registers any memory; plain anonymous pages are what it wants. */
static int verbs_mem_alloc(struct tf_context *ctx, size_t size, void **addr_p)
{
	void *p;

	(void)ctx;
	if (page_round(size) < size)
		return -EINVAL;
	p = mmap(NULL, page_round(size), PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return tf_verbs_errno(ENOMEM);
	*addr_p = p;
	return 0;
}

static void verbs_mem_free(struct tf_context *ctx, void *addr, size_t size)
{
	if (munmap(addr, page_round(size)))
		tf_log_warn(VERBS_SUBSYS, "%s: munmap(%p, %zu): %m",
			    ctx->device, addr, size);
}

/* ---------------------------------------------------------------- PD */

static int verbs_pd_alloc(struct tf_context *ctx, struct tf_pd **pd_p)
{
	struct tf_verbs_pd *pd;
	int ret;

	pd = tf__calloc(1, sizeof(*pd));
	if (!pd)
		return -ENOMEM;
	pd->ibpd = ibv_alloc_pd(VERBS_CTX(ctx)->ibctx);
	if (!pd->ibpd) {
		ret = tf_verbs_errno(ENOMEM);
		tf_log_error(VERBS_SUBSYS, "%s: ibv_alloc_pd: %s", ctx->device,
			     strerror(-ret));
		tf__free(pd);
		return ret;
	}
	pthread_mutex_init(&pd->iw_lock, NULL);
	*pd_p = &pd->base;
	return 0;
}

static int verbs_pd_free(struct tf_pd *bpd)
{
	struct tf_verbs_pd *pd = VERBS_PD(bpd);
	int ret;

	/* The core frees a PD only without QPs: no slot is in use. */
	tf_verbs_iw_pd_fini(pd);
	ret = ibv_dealloc_pd(pd->ibpd);
	if (ret) {
		tf_log_warn(VERBS_SUBSYS, "ibv_dealloc_pd: %s", strerror(ret));
		return -ret;
	}
	pthread_mutex_destroy(&pd->iw_lock);
	tf__free(pd);
	return 0;
}

/* ---------------------------------------------------------------- MR */

static int verbs_mr_reg(struct tf_pd *bpd, void *addr, size_t length,
			unsigned access, struct tf_mr **mr_p)
{
	struct tf_verbs_mr *mr;
	int ret;

	mr = tf__calloc(1, sizeof(*mr));
	if (!mr)
		return -ENOMEM;
	mr->ibmr = ibv_reg_mr(VERBS_PD(bpd)->ibpd, addr, length,
			      tf_verbs_access(access));
	if (!mr->ibmr) {
		ret = tf_verbs_errno(EINVAL);
		/* Registration failure is an expected outcome for callers
		 * that probe limits (RLIMIT_MEMLOCK, bad ranges): debug. */
		tf_log_debug(VERBS_SUBSYS, "ibv_reg_mr(%p, %zu, 0x%x): %s",
			     addr, length, access, strerror(-ret));
		tf__free(mr);
		return ret;
	}
	mr->base.lkey = mr->ibmr->lkey;
	mr->base.rkey = mr->ibmr->rkey;
	*mr_p = &mr->base;
	return 0;
}

static int verbs_mr_dereg(struct tf_mr *bmr)
{
	struct tf_verbs_mr *mr = VERBS_MR(bmr);
	int ret;

	ret = ibv_dereg_mr(mr->ibmr);
	if (ret) {
		/* Bound memory windows keep a region alive (IBA 10.6.7.2.6).
		 * rxe reports that as EINVAL, other drivers as EBUSY; the
		 * handle is known to be valid, so both mean "busy". */
		tf_log_debug(VERBS_SUBSYS, "ibv_dereg_mr: %s", strerror(ret));
		return ret == EINVAL ? -EBUSY : -ret;
	}
	tf__free(mr);
	return 0;
}

/* ---------------------------------------------------------------- MW */

static int verbs_mw_alloc(struct tf_pd *bpd, struct tf_mw **mw_p)
{
	struct tf_verbs_ctx *c = VERBS_CTX(bpd->ctx);
	struct tf_verbs_mw *mw;
	int ret;

	if (!(c->cap_flags & TF_CAP_MW_TYPE2)) {
		tf_log_debug(VERBS_SUBSYS, "%s has no type-2 memory windows",
			     c->base.device);
		return -EOPNOTSUPP;
	}
	mw = tf__calloc(1, sizeof(*mw));
	if (!mw)
		return -ENOMEM;
	mw->ibmw = ibv_alloc_mw(VERBS_PD(bpd)->ibpd, IBV_MW_TYPE_2);
	if (!mw->ibmw) {
		ret = tf_verbs_errno(ENOMEM);
		tf_log_error(VERBS_SUBSYS, "%s: ibv_alloc_mw: %s",
			     c->base.device, strerror(-ret));
		tf__free(mw);
		return ret;
	}
	mw->base.rkey = mw->ibmw->rkey;
	*mw_p = &mw->base;
	return 0;
}

static int verbs_mw_dealloc(struct tf_mw *bmw)
{
	struct tf_verbs_mw *mw = VERBS_MW(bmw);
	int ret;

	/* Off the QP's list first: a QP destroyed meanwhile then leaves
	 * the window alone, and mw->ibmw below is the current one. */
	tf_verbs_mw_unbind(VERBS_CTX(bmw->pd->ctx), mw);
	if (mw->ibmw) {
		ret = ibv_dealloc_mw(mw->ibmw);
		if (ret) {
			tf_log_warn(VERBS_SUBSYS, "ibv_dealloc_mw: %s",
				    strerror(ret));
			return -ret;
		}
	}
	tf__free(mw);
	return 0;
}

const struct tf_provider_ops tf_verbs_provider_ops = {
	.size = sizeof(struct tf_provider_ops),
	.name = "verbs",
	.probe = verbs_probe,
	.list_devices = verbs_list_devices,
	.context_open = verbs_context_open,
	.context_close = verbs_context_close,
	.query_caps = verbs_query_caps,
	.mem_alloc = verbs_mem_alloc,
	.mem_free = verbs_mem_free,
	.pd_alloc = verbs_pd_alloc,
	.pd_free = verbs_pd_free,
	.mr_reg = verbs_mr_reg,
	.mr_dereg = verbs_mr_dereg,
	.mw_alloc = verbs_mw_alloc,
	.mw_dealloc = verbs_mw_dealloc,
	.cq_create = tf_verbs_cq_create,
	.cq_destroy = tf_verbs_cq_destroy,
	.cq_poll = tf_verbs_cq_poll,
	.cq_fd = tf_verbs_cq_fd,
	.cq_arm = tf_verbs_cq_arm,
	.qp_create = tf_verbs_qp_create,
	.qp_destroy = tf_verbs_qp_destroy,
	.qp_get_addr = tf_verbs_qp_get_addr,
	.qp_connect = tf_verbs_qp_connect,
	.qp_set_error = tf_verbs_qp_set_error,
	.qp_reset = tf_verbs_qp_reset,
	.post_send = tf_verbs_post_send,
	.post_recv = tf_verbs_post_recv,
};
