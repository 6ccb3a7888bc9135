/* SPDX-License-Identifier: MIT */
/*
 * conf_cq_event: the completion fd serves an event loop that never calls
 * into the library while it sleeps (TF_CAP_CQ_FD).  Side B arms its
 * receive CQ, polls it once more (as with ibv_req_notify_cq), then blocks
 * in poll(2) on tf_cq_fd; side A sends.  The fd must become readable and
 * the completion must then be reaped.  Done twice, so that re-arming
 * works.  The poll timeout is generous and only avoids a hang.
 */
#include <poll.h>
#include <string.h>

#include "tf_test.h"

static void one_round(struct tf_pair *p, struct tf_test_buf *b, uint64_t id)
{
	struct tf_wc wc;

	if (p->side == TF_SIDE_A) {
		struct tf_sge sge = {.addr = (uintptr_t)b->addr,
				     .length = 32,
				     .lkey = tf_test_buf_lkey(b)};
		struct tf_send_wr wr = {.wr_id = id,
					.sg_list = &sge,
					.num_sge = 1,
					.opcode = TF_WR_SEND,
					.send_flags = TF_SEND_SIGNALED};

		tf_test_fill(b->addr, 32, (uint32_t)id);
		tf_test_sync(p); /* B is armed */
		POST_SEND(p->q.qp, &wr);
		EXPECT_WC(p, p->q.scq, id, TF_WC_SUCCESS, TF_WC_SEND, &wc);
		tf_test_sync(p);
		return;
	}
	int fd = tf_cq_fd(p->q.rcq);
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	int n;

	CHECKF(fd >= 0, "tf_cq_fd = %d (%s) with TF_CAP_CQ_FD", fd,
	       tf_strerror(fd));
	tf_test_post_recv1(p->q.qp, id, b->addr, 64, tf_test_buf_lkey(b));
	CHECK_OK(tf_cq_arm(p->q.rcq));
	/* Nothing can have arrived yet: A sends after the barrier. */
	CHECK(tf_cq_poll(p->q.rcq, 1, &wc) == 0);
	tf_test_sync(p);
	/* Block without calling the library. */
	n = poll(&pfd, 1, tf_test_timeout_ms());
	CHECKF(n == 1 && (pfd.revents & POLLIN),
	       "the CQ fd did not become readable while the process slept "
	       "in poll() (poll = %d, revents 0x%x): an event loop would "
	       "hang",
	       n, pfd.revents);
	EXPECT_WC(p, p->q.rcq, id, TF_WC_SUCCESS, TF_WC_RECV, &wc);
	CHECK_FILL(b->addr, 32, (uint32_t)id);
	tf_test_sync(p);
}

int main(void)
{
	struct tf_test_buf b;
	struct tf_pair p;

	tf_test_begin("conf_cq_event");
	tf_test_pair_start(&p, NULL);
	tf_test_require_caps(&p, TF_CAP_CQ_FD, "completion fds");
	tf_test_buf_alloc(&p, p.pd, TF_MEM_MALLOC, 4096, TF_ACCESS_LOCAL_WRITE,
			  &b);
	one_round(&p, &b, 1);
	one_round(&p, &b, 2);
	tf_test_buf_free(&b);
	return tf_test_pair_end(&p);
}
