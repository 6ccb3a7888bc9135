/* SPDX-License-Identifier: MIT */
/*
 * soft_caps_transport: with transport "auto" the soft provider chooses a
 * transport per peer when a QP connects, and tf_context_query_caps() says
 * which: "auto" before any connect, then "auto:shm", "auto:tcp" or
 * "auto:shm+tcp".  A forced transport reads as itself.
 */
#include <string.h>

#include "tf_test.h"

static tf_context_t *open_soft(const char *transport)
{
	tf_context_params_t p = {.field_mask = TF_CONTEXT_PARAM_PROVIDER |
					       TF_CONTEXT_PARAM_TRANSPORT,
				 .provider = "soft",
				 .transport = transport};
	tf_context_t *ctx;

	CHECK_OK(tf_context_open(&p, &ctx));
	return ctx;
}

static void check_transport(tf_context_t *ctx, const char *want)
{
	tf_caps_t caps;

	CHECK_OK(tf_context_query_caps(ctx, &caps));
	CHECKF(!strcmp(caps.transport, want), "transport '%s', want '%s'",
	       caps.transport, want);
}

struct side {
	tf_pd_t *pd;
	tf_cq_t *cq;
	tf_qp_t *qp;
	uint8_t addr[TF_QP_ADDR_MAX];
	size_t len;
};

static void side_init(struct side *s, tf_context_t *ctx)
{
	tf_qp_params_t qp = {0};

	CHECK_OK(tf_pd_create(ctx, &s->pd));
	CHECK_OK(tf_cq_create(ctx, NULL, &s->cq));
	qp.send_cq = s->cq;
	qp.recv_cq = s->cq;
	CHECK_OK(tf_qp_create(s->pd, &qp, &s->qp));
	s->len = sizeof(s->addr);
	CHECK_OK(tf_qp_get_addr(s->qp, s->addr, &s->len));
}

static void side_fini(struct side *s)
{
	CHECK_OK(tf_qp_destroy(s->qp));
	CHECK_OK(tf_cq_destroy(s->cq));
	CHECK_OK(tf_pd_destroy(s->pd));
}

int main(void)
{
	tf_context_t *a, *t;
	struct side x, y, z;

	tf_test_begin("soft_caps_transport");
	a = open_soft("auto");
	t = open_soft("tcp");
	check_transport(a, "auto");
	check_transport(t, "tcp");

	/* A peer that offers only tcp: auto takes tcp. */
	side_init(&x, a);
	side_init(&z, t);
	CHECK_OK(tf_qp_connect(x.qp, z.addr, z.len));
	check_transport(a, "auto:tcp");
	check_transport(t, "tcp");

	/* A peer on this host that offers both: shm, and both now. */
	side_init(&y, a);
	CHECK_OK(tf_qp_connect(y.qp, x.addr, x.len));
	check_transport(a, "auto:shm+tcp");

	side_fini(&y);
	side_fini(&z);
	side_fini(&x);
	tf_context_close(t);
	tf_context_close(a);

	/* The same-host choice alone. */
	a = open_soft("auto");
	side_init(&x, a);
	side_init(&y, a);
	CHECK_OK(tf_qp_connect(x.qp, y.addr, y.len));
	CHECK_OK(tf_qp_connect(y.qp, x.addr, x.len));
	check_transport(a, "auto:shm");
	side_fini(&y);
	side_fini(&x);
	tf_context_close(a);
	return tf_test_end();
}
