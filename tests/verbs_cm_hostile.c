/* SPDX-License-Identifier: MIT */
/*
 * verbs_cm_hostile: strangers on a context's rdma_cm port do not stop it
 * from connecting.
 *
 * A context that connects through rdma_cm (iWARP devices, or
 * TOLLFREE_VERBS_CM=rdmacm) listens on a port that its QP addresses name;
 * on iWARP that is a TCP port of the host.  Anyone who can reach it may
 * connect and then close, reset, or send bytes that are no MPA request.
 * After a burst of each against both contexts' listeners, two QPs of the
 * two contexts must still connect and carry a SEND, twice, and both
 * contexts must close.
 *
 * siw (Debian 6.1.192) fails this without tests/vm/siw-listener-close.patch:
 * a connection that closes before siw accepted it closes the listener, so
 * the strangers after the first few are refused, and the listener's
 * destruction corrupts kernel memory.
 *
 * Runs where TOLLFREE_DEVICE (and TOLLFREE_TEST_PEER_DEVICE, default the
 * same) is a verbs device whose QPs connect through rdma_cm; skips (77)
 * elsewhere.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tf_test.h"

#if !defined(__has_include) || !__has_include(<infiniband/verbs.h>)
int main(void)
{
	tf_test_begin("verbs_cm_hostile");
	tf_test_skip("built without libibverbs");
}
#else
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "verbs_blob.h"

#define BUFSZ	4096
#define MSG	64
#define WAIT_MS 20000
#define ROUNDS	30 /* strangers per listener */

static tf_qp_t *qp_make(struct tf_test_dev *s, uint8_t *blob, size_t *len)
{
	tf_qp_params_t qp = {.send_cq = s->cq, .recv_cq = s->cq};
	tf_qp_t *q;

	CHECK_OK(tf_qp_create(s->pd, &qp, &q));
	*len = TF_QP_ADDR_MAX;
	CHECK_OK(tf_qp_get_addr(q, blob, len));
	return q;
}

/* Where @blob's context listens, as a TCP address; false if its QPs do
 * not connect through rdma_cm. */
static bool listener_of(const uint8_t *blob, size_t len,
			struct sockaddr_storage *ss, socklen_t *sl)
{
	struct tf_verbs_addr a;

	CHECK_OK(tf_verbs_addr_decode(blob, len, &a));
	if (!a.cm)
		return false;
	memset(ss, 0, sizeof(*ss));
	if (a.cm_family == 4) {
		struct sockaddr_in *in = (struct sockaddr_in *)ss;

		in->sin_family = AF_INET;
		in->sin_port = htons(a.cm_port);
		memcpy(&in->sin_addr, a.cm_ip, 4);
		*sl = sizeof(*in);
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(a.cm_port);
		memcpy(&in6->sin6_addr, a.cm_ip, 16);
		*sl = sizeof(*in6);
	}
	return true;
}

/*
 * One stranger: a TCP connection to @ss that closes at once (@how 0),
 * resets (1), or sends bytes that are no MPA request first (2).  Returns
 * whether TCP took the connection.  Only the first may be refused
 * (rdma_cm over InfiniBand or RoCE has no TCP listener, and no stranger
 * follows there); a later refusal fails the test: the listener is gone.
 */
static bool stranger(const struct sockaddr_storage *ss, socklen_t sl, int how,
		     int round)
{
	static const char junk[MSG] =
		"GET / HTTP/1.0\r\n\r\nnot an MPA request";
	int fd = socket(ss->ss_family, SOCK_STREAM, 0);

	CHECK(fd >= 0);
	if (connect(fd, (const struct sockaddr *)ss, sl)) {
		int e = errno;

		close(fd);
		CHECKF(round == 0,
		       "stranger %d: connect: %s: the listener took the "
		       "first and then stopped listening",
		       round, strerror(e));
		return false;
	}
	if (how == 1) {
		struct linger l = {.l_onoff = 1, .l_linger = 0};

		CHECK_OK(setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l)));
	} else if (how == 2) {
		CHECK(send(fd, junk, sizeof(junk), MSG_NOSIGNAL) ==
		      (ssize_t)sizeof(junk));
	}
	close(fd);
	return true;
}

static struct tf_wc wait1(tf_cq_t *cq)
{
	struct tf_wc wc;
	int n = tf_cq_wait(cq, 1, &wc, WAIT_MS);

	CHECKF(n == 1, "no completion within %d ms (%d)", WAIT_MS, n);
	return wc;
}

/* Two fresh QPs, A's and B's, connect; A SENDs @MSG bytes to B. */
static void exchange(struct tf_test_dev *a, struct tf_test_dev *b, int round)
{
	uint8_t ba[TF_QP_ADDR_MAX], bb[TF_QP_ADDR_MAX];
	size_t la, lb;
	tf_qp_t *qa = qp_make(a, ba, &la), *qb = qp_make(b, bb, &lb);
	struct tf_sge rs = {(uintptr_t)b->buf, MSG, tf_mr_lkey(b->mr)};
	struct tf_recv_wr rw = {.wr_id = 2, .sg_list = &rs, .num_sge = 1};
	struct tf_sge ss = {(uintptr_t)a->buf, MSG, tf_mr_lkey(a->mr)};
	struct tf_send_wr sw = {.wr_id = 1,
				.sg_list = &ss,
				.num_sge = 1,
				.opcode = TF_WR_SEND,
				.send_flags = TF_SEND_SIGNALED};
	struct tf_recv_wr *rbad;
	struct tf_send_wr *sbad;
	struct tf_wc wc;

	memset(b->buf, 0, MSG);
	tf_test_fill(a->buf, MSG, 0x5eed00u + (uint32_t)round);
	CHECK_OK(tf_post_recv(qb, &rw, &rbad));
	CHECK_OK(tf_qp_connect(qa, bb, lb));
	CHECK_OK(tf_qp_connect(qb, ba, la));
	CHECK_OK(tf_post_send(qa, &sw, &sbad));
	wc = wait1(a->cq);
	CHECKF(wc.status == TF_WC_SUCCESS && wc.wr_id == 1,
	       "round %d: SEND completed %s", round,
	       tf_wc_status_str(wc.status));
	wc = wait1(b->cq);
	CHECKF(wc.status == TF_WC_SUCCESS && wc.wr_id == 2 &&
		       wc.byte_len == MSG,
	       "round %d: receive completed %s, %u bytes", round,
	       tf_wc_status_str(wc.status), wc.byte_len);
	CHECK_FILL(b->buf, MSG, 0x5eed00u + (uint32_t)round);
	CHECK_OK(tf_qp_destroy(qa));
	CHECK_OK(tf_qp_destroy(qb));
	while (tf_cq_poll(a->cq, 1, &wc) > 0)
		;
	while (tf_cq_poll(b->cq, 1, &wc) > 0)
		;
}

int main(void)
{
	const char *peer = getenv("TOLLFREE_TEST_PEER_DEVICE");
	struct sockaddr_storage ls[2];
	socklen_t ll[2];
	uint8_t blob[TF_QP_ADDR_MAX];
	struct tf_test_dev a, b;
	bool tcp[2] = {true, true};
	int took = 0;

	tf_test_begin("verbs_cm_hostile");
	tf_test_dev_open(&a, "verbs", NULL, BUFSZ);
	tf_test_dev_open(&b, "verbs",
			 peer && peer[0] ? peer : tf_context_device(a.ctx),
			 BUFSZ);
	for (int i = 0; i < 2; i++) {
		size_t len;
		tf_qp_t *q = qp_make(i ? &b : &a, blob, &len);

		if (!listener_of(blob, len, &ls[i], &ll[i]))
			tf_test_skip("the device's QPs connect without rdma_cm "
				     "(iWARP devices, or "
				     "TOLLFREE_VERBS_CM=rdmacm, use it)");
		CHECK_OK(tf_qp_destroy(q));
	}
	for (int r = 0; r < ROUNDS; r++)
		for (int i = 0; i < 2; i++)
			if (tcp[i] && stranger(&ls[i], ll[i], r % 3, r))
				took++;
			else
				tcp[i] = false;
	/* Let the kernel deal with them before the real connections. */
	usleep(200 * 1000);
	exchange(&a, &b, 0);
	exchange(&b, &a, 1);
	tf_test_info("%d strangers' TCP connections to the two listeners "
		     "(closed, reset, or sending junk), then two QP pairs "
		     "connected and carried a SEND",
		     took);
	tf_test_dev_close(&a);
	tf_test_dev_close(&b);
	return tf_test_end();
}
#endif
