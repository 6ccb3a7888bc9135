/* SPDX-License-Identifier: MIT */
/*
 * soft_shm_peer_cache: the soft shm transport keeps a peer context
 * attached (pidfd, TPT, tf_mem_alloc memory) after its last queue pair
 * goes, for the next connection to it.  Here one context (this process)
 * serves peers that come and go: each round forks a new peer process (a
 * new context, a new nonce; on a busy host possibly a reused pid) that
 * connects two queue pairs to us one after the other (the second finds
 * the peer kept), takes an RDMA WRITE into its tf_mem_alloc memory and a
 * SEND on each, and exits.  Where the kernel allows it, each new peer
 * gets the pid of the one before (clone3 with set_tid).  Every round's
 * bytes must arrive in that round's process (a new peer is never served
 * through an old one's mappings, whatever its pid), and once a peer has died progress must let it go: our open
 * file descriptors come back to what they were before it.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sched.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fault_util.h"

#define ROUNDS	 4
#define QPS	 2
#define BUFSZ	 4096
#define BOUND_MS 20000

struct blob {
	uint32_t len;
	uint32_t rkey;
	uint64_t addr;
	uint8_t b[TF_QP_ADDR_MAX];
};

static void xfer(int fd, void *buf, size_t len, bool out)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = out ? write(fd, p, len) : read(fd, p, len);

		if (n <= 0)
			tf_test_fail(__FILE__, __LINE__, "socketpair %s: %s",
				     out ? "write" : "read",
				     n ? strerror(errno) : "closed");
		p += n;
		len -= (size_t)n;
	}
}

static void wait_one(tf_context_t *ctx, tf_cq_t *cq, struct tf_wc *wc)
{
	uint64_t t0 = ft_now_ms();

	for (;;) {
		int n = tf_cq_poll(cq, 1, wc);

		CHECK(n >= 0);
		if (n == 1)
			return;
		tf_context_progress(ctx);
		CHECKF(ft_now_ms() - t0 < BOUND_MS, "no completion in %d ms",
		       BOUND_MS);
	}
}

/* One endpoint: create a QP, swap blobs over @sock, connect. */
static tf_qp_t *qp_connect(tf_pd_t *pd, tf_cq_t *cq, int sock,
			   struct blob *mine, struct blob *theirs)
{
	tf_qp_params_t qpp = {.field_mask = 0};
	size_t len = sizeof(mine->b);
	tf_qp_t *qp;

	qpp.send_cq = qpp.recv_cq = cq;
	CHECK_OK(tf_qp_create(pd, &qpp, &qp));
	CHECK_OK(tf_qp_get_addr(qp, mine->b, &len));
	mine->len = (uint32_t)len;
	xfer(sock, mine, sizeof(*mine), true);
	xfer(sock, theirs, sizeof(*theirs), false);
	CHECK(theirs->len <= sizeof(theirs->b));
	CHECK_OK(tf_qp_connect(qp, theirs->b, theirs->len));
	return qp;
}

/*
 * A new peer process; with the pid @pid of the one before it where the
 * kernel lets us choose (clone3's set_tid: CAP_SYS_ADMIN or
 * CAP_CHECKPOINT_RESTORE), the case a cached pid would get wrong.  This
 * process has no other thread at this point, so a raw clone3 is as safe
 * as fork().
 */
static pid_t spawn(pid_t pid)
{
#ifdef SYS_clone3
	struct clone_args ca = {.exit_signal = SIGCHLD,
				.set_tid = (uintptr_t)&pid,
				.set_tid_size = 1};
	long r;

	if (pid > 0) {
		r = syscall(SYS_clone3, &ca, sizeof(ca));
		if (r >= 0)
			return (pid_t)r;
	}
#endif
	return fork();
}

/* The peer: a new process with a new context each round. */
static int peer_main(int sock, uint32_t round)
{
	tf_context_t *ctx;
	tf_pd_t *pd;
	tf_cq_t *cq;
	tf_mr_t *mr;
	uint8_t *buf;
	struct tf_wc wc;

	CHECK_OK(tf_context_open(NULL, &ctx));
	CHECK_OK(tf_pd_create(ctx, &pd));
	CHECK_OK(tf_cq_create(ctx, NULL, &cq));
	CHECK_OK(tf_mem_alloc(ctx, BUFSZ, (void **)&buf));
	CHECK_OK(tf_mr_reg(pd, buf, BUFSZ,
			   TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE,
			   &mr));
	for (uint32_t q = 0; q < QPS; q++) {
		struct blob mine = {0}, theirs;
		struct tf_recv_wr rwr = {.wr_id = q};
		uint8_t go = 1;
		tf_qp_t *qp;

		memset(buf, 0, BUFSZ);
		mine.rkey = tf_mr_rkey(mr);
		mine.addr = (uint64_t)(uintptr_t)buf;
		qp = qp_connect(pd, cq, sock, &mine, &theirs);
		CHECK_OK(tf_post_recv(qp, &rwr, NULL));
		xfer(sock, &go, 1, true);
		wait_one(ctx, cq, &wc);
		CHECKF(wc.status == TF_WC_SUCCESS, "recv status %d",
		       (int)wc.status);
		CHECK_FILL(buf, BUFSZ, round * QPS + q + 1);
		xfer(sock, &go, 1, true);
		/* Destroyed only once the other side let go of its QP. */
		xfer(sock, &go, 1, false);
		tf_qp_destroy(qp);
	}
	tf_mr_dereg(mr);
	tf_mem_free(ctx, buf, BUFSZ);
	tf_cq_destroy(cq);
	tf_pd_destroy(pd);
	tf_context_close(ctx);
	return tf_test_end();
}

int main(void)
{
	tf_context_t *ctx;
	tf_pd_t *pd;
	tf_cq_t *cq;
	tf_mr_t *mr;
	uint8_t *src;
	int fds0, reused = 0;
	pid_t last = 0;

	setenv("TOLLFREE_PROVIDER", "soft", 1);
	setenv("TOLLFREE_SOFT_TRANSPORT", "shm", 1);
	tf_test_begin("soft_shm_peer_cache");
	CHECK_OK(tf_context_open(NULL, &ctx));
	CHECK_OK(tf_pd_create(ctx, &pd));
	CHECK_OK(tf_cq_create(ctx, NULL, &cq));
	src = aligned_alloc(64, BUFSZ);
	CHECK(src);
	CHECK_OK(tf_mr_reg(pd, src, BUFSZ, TF_ACCESS_LOCAL_WRITE, &mr));
	fds0 = ft_count_fds();
	for (uint32_t round = 0; round < ROUNDS; round++) {
		int sv[2], st;
		pid_t pid;
		uint64_t t0;

		CHECK(!socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
		pid = spawn(last);
		CHECK(pid >= 0);
		if (pid == last)
			reused++;
		last = pid;
		if (!pid) {
			close(sv[0]);
			exit(peer_main(sv[1], round));
		}
		close(sv[1]);
		for (uint32_t q = 0; q < QPS; q++) {
			struct blob mine = {0}, theirs;
			struct tf_sge sge = {.addr = (uintptr_t)src,
					     .length = BUFSZ,
					     .lkey = tf_mr_lkey(mr)};
			struct tf_send_wr w = {.wr_id = 1,
					       .sg_list = &sge,
					       .num_sge = 1,
					       .opcode = TF_WR_RDMA_WRITE};
			struct tf_send_wr s = {.wr_id = 2,
					       .opcode = TF_WR_SEND,
					       .send_flags = TF_SEND_SIGNALED};
			struct tf_wc wc;
			uint8_t go;
			tf_qp_t *qp;

			tf_test_fill(src, BUFSZ, round * QPS + q + 1);
			qp = qp_connect(pd, cq, sv[0], &mine, &theirs);
			w.wr.rdma.remote_addr = theirs.addr;
			w.wr.rdma.rkey = theirs.rkey;
			w.next = &s;
			xfer(sv[0], &go, 1, false);
			CHECK_OK(tf_post_send(qp, &w, NULL));
			wait_one(ctx, cq, &wc);
			CHECKF(wc.status == TF_WC_SUCCESS && wc.wr_id == 2,
			       "round %u qp %u: send status %d", round, q,
			       (int)wc.status);
			xfer(sv[0], &go, 1, false);
			tf_qp_destroy(qp);
			xfer(sv[0], &go, 1, true);
		}
		close(sv[0]);
		CHECK(waitpid(pid, &st, 0) == pid);
		CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		       "round %u: peer status %#x", round, st);
		/* Every other round the next peer connects while this dead
		 * one may still be kept (with the same pid, where reused).
		 * Otherwise: progress notices the death (it checks every few
		 * ms) and lets the peer go. */
		if (round % 2 == 0)
			continue;
		t0 = ft_now_ms();
		while (ft_count_fds() != fds0 && ft_now_ms() - t0 < BOUND_MS) {
			tf_context_progress(ctx);
			usleep(100);
		}
		CHECKF(ft_count_fds() == fds0,
		       "round %u: %d fds open, %d before: the dead peer is "
		       "still attached",
		       round, ft_count_fds(), fds0);
	}
	tf_test_info("%d of %d peers had the pid of the peer before them",
		     reused, ROUNDS - 1);
	tf_mr_dereg(mr);
	free(src);
	tf_cq_destroy(cq);
	tf_pd_destroy(pd);
	tf_context_close(ctx);
	return tf_test_end();
}
