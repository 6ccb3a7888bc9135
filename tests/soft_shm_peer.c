/* SPDX-License-Identifier: MIT */
/*
 * soft_shm_peer: a shm queue pair has exactly one peer (issue "Security",
 * item 7).  Three processes: a server S, its victim client V and a third
 * party X, each with its own soft context over shm.  S and V connect their
 * QPs; S binds a window to its QP and tells V, and also X, where it is
 * (addresses and keys are easily seen in passing).
 *  - X connects its own QP to S's QP with S's real address blob: the
 *    connect is refused (or, at the least, X's traffic fails), and X can
 *    neither write nor read through the window bound to S's QP with the
 *    right key: S's memory keeps V's bytes.
 *  - A replayed handshake: S connects a second QP to V's address blob.
 *    The connect is refused and V's live session receives nothing of it.
 *  - Afterwards S and V still talk: V writes through the window, S sends
 *    to V.
 */
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tf_test.h"

#define BUFSZ	4096
#define V_OFF	0 /* V's bytes in S's window */
#define X_OFF	64
#define V_BYTE	0x56
#define X_BYTE	0x58
#define WAIT_MS 3000

enum { MSG_BLOB = 1, MSG_WINDOW, MSG_DONE, MSG_RESULT };

/* One message between the processes (fixed size, one per write). */
struct msg {
	uint32_t kind;
	int32_t ret;	/* MSG_RESULT: a connect's return value */
	int32_t status; /* MSG_RESULT: a completion's status, -1 none */
	uint32_t rkey;	/* MSG_WINDOW */
	uint64_t addr;	/* MSG_WINDOW */
	uint64_t got;	/* MSG_RESULT: receives seen by V */
	uint32_t len;	/* MSG_BLOB */
	uint8_t blob[TF_QP_ADDR_MAX];
};

static tf_context_t *ctx;
static tf_pd_t *pd;
static tf_cq_t *cq;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void open_ctx(void)
{
	tf_context_params_t cp = {
		.field_mask =
			TF_CONTEXT_PARAM_PROVIDER | TF_CONTEXT_PARAM_TRANSPORT,
		.provider = "soft",
		.transport = "shm",
	};

	CHECK_OK(tf_context_open(&cp, &ctx));
	CHECK_OK(tf_pd_create(ctx, &pd));
	CHECK_OK(tf_cq_create(ctx, NULL, &cq));
}

static tf_qp_t *new_qp(void)
{
	tf_qp_params_t qpp = {.send_cq = cq, .recv_cq = cq};
	tf_qp_t *qp;

	CHECK_OK(tf_qp_create(pd, &qpp, &qp));
	return qp;
}

static void send_msg(int fd, const struct msg *m)
{
	CHECK(write(fd, m, sizeof(*m)) == (ssize_t)sizeof(*m));
}

/* Receive one message, making progress meanwhile (the peers' SENDs are
 * acknowledged by our progress). */
static void recv_msg(int fd, struct msg *m)
{
	uint64_t end = now_ms() + (uint64_t)tf_test_timeout_ms();
	struct pollfd pfd = {.fd = fd, .events = POLLIN};

	while (poll(&pfd, 1, 1) == 0) {
		tf_context_progress(ctx);
		CHECKF(now_ms() < end, "no message from the peer process");
	}
	CHECKF(read(fd, m, sizeof(*m)) == (ssize_t)sizeof(*m),
	       "peer process went away");
}

static void send_blob(int fd, tf_qp_t *qp)
{
	struct msg m = {.kind = MSG_BLOB};
	size_t len = sizeof(m.blob);

	CHECK_OK(tf_qp_get_addr(qp, m.blob, &len));
	m.len = (uint32_t)len;
	send_msg(fd, &m);
}

/* One completion within @ms, or -1. */
static int poll_wc(struct tf_wc *wc, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;

	do {
		int n = tf_cq_poll(cq, 1, wc);

		CHECK(n >= 0);
		if (n)
			return 0;
	} while (now_ms() < end);
	return -1;
}

static void post_rdma(tf_qp_t *qp, enum tf_wr_opcode op, void *local,
		      tf_mr_t *mr, uint64_t raddr, uint32_t rkey, uint32_t len,
		      uint64_t wr_id)
{
	struct tf_sge sge = {.addr = (uintptr_t)local,
			     .length = len,
			     .lkey = tf_mr_lkey(mr)};
	struct tf_send_wr wr = {.wr_id = wr_id,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = op,
				.send_flags = TF_SEND_SIGNALED};

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	CHECK_OK(tf_post_send(qp, &wr, NULL));
}

/* ------------------------------------------------------------ victim */

static int victim(int fd)
{
	struct msg m, w;
	uint8_t *buf;
	tf_qp_t *qp;
	tf_mr_t *mr;
	struct tf_wc wc;
	uint64_t got = 0;

	tf_test_begin("soft_shm_peer (victim)");
	open_ctx();
	qp = new_qp();
	buf = calloc(1, BUFSZ);
	CHECK(buf);
	CHECK_OK(tf_mr_reg(pd, buf, BUFSZ, TF_ACCESS_LOCAL_WRITE, &mr));
	send_blob(fd, qp);
	recv_msg(fd, &m);
	CHECK(m.kind == MSG_BLOB);
	CHECK_OK(tf_qp_connect(qp, m.blob, m.len));
	recv_msg(fd, &w);
	CHECK(w.kind == MSG_WINDOW);

	/* Our session: a write through S's window. */
	memset(buf, V_BYTE, 64);
	post_rdma(qp, TF_WR_RDMA_WRITE, buf, mr, w.addr + V_OFF, w.rkey, 64, 1);
	CHECK(!poll_wc(&wc, tf_test_timeout_ms()));
	CHECKF(wc.status == TF_WC_SUCCESS, "victim's write: %s",
	       tf_wc_status_str(wc.status));
	tf_test_post_recv1(qp, 2, buf + 1024, 256, tf_mr_lkey(mr));
	m = (struct msg){.kind = MSG_DONE};
	send_msg(fd, &m);

	/* S replays our handshake (a second QP on our address): whatever it
	 * sends must not land in our session. */
	recv_msg(fd, &m);
	CHECK(m.kind == MSG_DONE);
	while (!poll_wc(&wc, 200)) {
		tf_test_info("victim: completion %s", tf_test_wc_str(&wc));
		got++;
	}
	m = (struct msg){.kind = MSG_RESULT, .got = got};
	send_msg(fd, &m);

	/* The session still works both ways. */
	if (!got) {
		post_rdma(qp, TF_WR_RDMA_WRITE, buf, mr, w.addr + V_OFF, w.rkey,
			  64, 3);
		CHECK(!poll_wc(&wc, tf_test_timeout_ms()));
		CHECKF(wc.status == TF_WC_SUCCESS && wc.wr_id == 3,
		       "victim's second write: %s", tf_test_wc_str(&wc));
		m = (struct msg){.kind = MSG_DONE};
		send_msg(fd, &m);
		CHECK(!poll_wc(&wc, tf_test_timeout_ms()));
		CHECKF(wc.status == TF_WC_SUCCESS && wc.wr_id == 2 &&
			       wc.byte_len == 5 &&
			       !memcmp(buf + 1024, "legit", 5),
		       "victim's receive: %s", tf_test_wc_str(&wc));
	}
	recv_msg(fd, &m);
	CHECK(m.kind == MSG_DONE);
	CHECK_OK(tf_qp_destroy(qp));
	CHECK_OK(tf_mr_dereg(mr));
	free(buf);
	CHECK_OK(tf_cq_destroy(cq));
	CHECK_OK(tf_pd_destroy(pd));
	tf_context_close(ctx);
	return tf_test_end();
}

/* ------------------------------------------------------------ third party */

static int third_party(int fd)
{
	struct msg m, w, r = {.kind = MSG_RESULT, .status = -1};
	uint8_t *buf;
	tf_qp_t *qp;
	tf_mr_t *mr;
	struct tf_wc wc;

	tf_test_begin("soft_shm_peer (third party)");
	open_ctx();
	qp = new_qp();
	buf = calloc(1, BUFSZ);
	CHECK(buf);
	CHECK_OK(tf_mr_reg(pd, buf, BUFSZ, TF_ACCESS_LOCAL_WRITE, &mr));
	recv_msg(fd, &m); /* S's blob, seen in passing */
	CHECK(m.kind == MSG_BLOB);
	recv_msg(fd, &w);
	CHECK(w.kind == MSG_WINDOW);

	r.ret = TOLERATED(tf_qp_connect(qp, m.blob, m.len));
	tf_test_info("third party: connect to the server's QP: %d (%s)", r.ret,
		     tf_strerror(r.ret));
	if (r.ret) {
		/* Refused: nothing can be posted either. */
		struct tf_sge sge = {.addr = (uintptr_t)buf,
				     .length = 64,
				     .lkey = tf_mr_lkey(mr)};
		struct tf_send_wr wr = {.sg_list = &sge,
					.num_sge = 1,
					.opcode = TF_WR_RDMA_WRITE};

		wr.wr.rdma.remote_addr = w.addr + X_OFF;
		wr.wr.rdma.rkey = w.rkey;
		CHECK(tf_post_send(qp, &wr, NULL) < 0);
	} else {
		/* Connected: the window bound to S's QP (which is V's peer)
		 * must refuse us, with the right key. */
		memset(buf, X_BYTE, 64);
		tf_test_tolerate_log(true);
		post_rdma(qp, TF_WR_RDMA_WRITE, buf, mr, w.addr + X_OFF, w.rkey,
			  64, 1);
		if (!poll_wc(&wc, WAIT_MS)) {
			r.status = (int32_t)wc.status;
			tf_test_info("third party: write through the "
				     "victim's window: %s",
				     tf_wc_status_str(wc.status));
		}
		if (wc.status == TF_WC_SUCCESS) {
			memset(buf + 512, 0, 64);
			post_rdma(qp, TF_WR_RDMA_READ, buf + 512, mr,
				  w.addr + V_OFF, w.rkey, 64, 2);
			if (!poll_wc(&wc, WAIT_MS))
				tf_test_info("third party: read through the "
					     "victim's window: %s, byte "
					     "0x%02x",
					     tf_wc_status_str(wc.status),
					     buf[512]);
		}
		tf_test_tolerate_log(false);
	}
	send_msg(fd, &r);
	recv_msg(fd, &m);
	CHECK(m.kind == MSG_DONE);
	CHECK_OK(tf_qp_destroy(qp));
	CHECK_OK(tf_mr_dereg(mr));
	free(buf);
	CHECK_OK(tf_cq_destroy(cq));
	CHECK_OK(tf_pd_destroy(pd));
	tf_context_close(ctx);
	return tf_test_end();
}

/* ------------------------------------------------------------ server */

static pid_t spawn(int (*fn)(int), int *fd_p)
{
	int sv[2];
	pid_t pid;

	CHECK(!socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	fflush(stdout);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(sv[0]);
		_exit(fn(sv[1]));
	}
	close(sv[1]);
	*fd_p = sv[0];
	return pid;
}

static bool child_ok(pid_t pid, const char *who)
{
	int st;

	CHECK(waitpid(pid, &st, 0) == pid);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return true;
	tf_test_info("%s failed (status %#x)", who, st);
	return false;
}

int main(void)
{
	struct msg m, vblob, w = {.kind = MSG_WINDOW}, xr, vr;
	int vfd, xfd, r2, bad = 0;
	pid_t vpid, xpid;
	uint8_t *mem;
	tf_qp_t *qp, *qp2;
	tf_mw_t *mw;
	tf_mr_t *mr;
	struct tf_wc wc;

	tf_test_begin("soft_shm_peer");
	/* The children open their own contexts after the fork. */
	vpid = spawn(victim, &vfd);
	xpid = spawn(third_party, &xfd);
	alarm(100);
	open_ctx();
	qp = new_qp();

	/* S <-> V: a session. */
	recv_msg(vfd, &vblob);
	CHECK(vblob.kind == MSG_BLOB);
	send_blob(vfd, qp);
	CHECK_OK(tf_qp_connect(qp, vblob.blob, vblob.len));

	/* A window bound to S's QP over tf_mem_alloc memory (the shm fast
	 * path maps it at the initiator). */
	CHECK_OK(tf_mem_alloc(ctx, BUFSZ, (void **)&mem));
	memset(mem, 0, BUFSZ);
	CHECK_OK(tf_mr_reg(pd, mem, BUFSZ, TF_ACCESS_ALL, &mr));
	CHECK_OK(tf_mw_alloc(pd, &mw));
	{
		struct tf_send_wr wr = {
			.wr_id = 7,
			.opcode = TF_WR_BIND_MW,
			.send_flags = TF_SEND_SIGNALED,
			.wr.bind_mw = {.mw = mw,
				       .mr = mr,
				       .addr = (uintptr_t)mem,
				       .length = BUFSZ,
				       .access = TF_ACCESS_REMOTE_WRITE |
						 TF_ACCESS_REMOTE_READ},
		};

		CHECK_OK(tf_post_send(qp, &wr, NULL));
		CHECK(!poll_wc(&wc, tf_test_timeout_ms()));
		CHECK(wc.wr_id == 7 && wc.status == TF_WC_SUCCESS);
	}
	w.addr = (uintptr_t)mem;
	w.rkey = tf_mw_rkey(mw);
	send_msg(vfd, &w);
	recv_msg(vfd, &m);
	CHECK(m.kind == MSG_DONE);
	CHECK_BYTES(mem + V_OFF, 64, V_BYTE);

	/* X learned S's address and the window's key. */
	send_blob(xfd, qp);
	send_msg(xfd, &w);
	recv_msg(xfd, &xr);
	CHECK(xr.kind == MSG_RESULT);
	if (!xr.ret && xr.status == TF_WC_SUCCESS) {
		tf_test_info("FAIL: a third process connected to a connected "
			     "QP and wrote through the window bound to it");
		bad++;
	} else if (!xr.ret) {
		tf_test_info("FAIL: a third process connected to a connected "
			     "QP (its traffic failed: %d)",
			     xr.status);
		bad++;
	}
	for (int i = 0; i < 64; i++) {
		if (mem[X_OFF + i] || mem[V_OFF + i] != V_BYTE) {
			tf_test_info("FAIL: the window's memory changed at "
				     "%d",
				     i);
			bad++;
			break;
		}
	}

	/* A replayed handshake: a second QP of ours on V's address. */
	qp2 = new_qp();
	r2 = TOLERATED(tf_qp_connect(qp2, vblob.blob, vblob.len));
	tf_test_info("second QP on the victim's address: %d (%s)", r2,
		     tf_strerror(r2));
	if (!r2) {
		struct tf_send_wr wr = {.wr_id = 8,
					.opcode = TF_WR_SEND,
					.send_flags = TF_SEND_SIGNALED |
						      TF_SEND_INLINE};
		struct tf_sge sge = {.addr = (uintptr_t) "spoof", .length = 5};

		tf_test_info("FAIL: a second QP connected to the victim's "
			     "QP");
		bad++;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		tf_test_tolerate_log(true);
		if (!tf_post_send(qp2, &wr, NULL) && !poll_wc(&wc, WAIT_MS))
			tf_test_info("its SEND: %s", tf_test_wc_str(&wc));
		tf_test_tolerate_log(false);
	}
	m = (struct msg){.kind = MSG_DONE};
	send_msg(vfd, &m);
	recv_msg(vfd, &vr);
	CHECK(vr.kind == MSG_RESULT);
	if (vr.got) {
		tf_test_info("FAIL: the victim's session received %llu "
			     "completions from the replayed connection",
			     (unsigned long long)vr.got);
		bad++;
	}
	CHECK_OK(tf_qp_destroy(qp2));

	/* The session still works. */
	if (!vr.got) {
		struct tf_send_wr wr = {.wr_id = 9,
					.opcode = TF_WR_SEND,
					.send_flags = TF_SEND_SIGNALED |
						      TF_SEND_INLINE};
		struct tf_sge sge = {.addr = (uintptr_t) "legit", .length = 5};

		recv_msg(vfd, &m);
		CHECK(m.kind == MSG_DONE);
		wr.sg_list = &sge;
		wr.num_sge = 1;
		CHECK_OK(tf_post_send(qp, &wr, NULL));
		CHECK(!poll_wc(&wc, tf_test_timeout_ms()));
		CHECKF(wc.wr_id == 9 && wc.status == TF_WC_SUCCESS,
		       "server's SEND: %s", tf_test_wc_str(&wc));
	}
	m = (struct msg){.kind = MSG_DONE};
	send_msg(vfd, &m);
	send_msg(xfd, &m);
	if (!child_ok(vpid, "victim"))
		bad++;
	if (!child_ok(xpid, "third party"))
		bad++;

	CHECK_OK(tf_qp_destroy(qp));
	CHECK_OK(tf_mw_dealloc(mw));
	CHECK_OK(tf_mr_dereg(mr));
	tf_mem_free(ctx, mem, BUFSZ);
	CHECK_OK(tf_cq_destroy(cq));
	CHECK_OK(tf_pd_destroy(pd));
	tf_context_close(ctx);
	CHECKF(!bad, "%d of the checks above failed", bad);
	return tf_test_end();
}
