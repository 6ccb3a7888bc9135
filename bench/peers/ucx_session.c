/* SPDX-License-Identifier: MIT */
/*
 * ucx_session - a short session done with UCX, to set next to
 * `tollfree-bench crr -k 1 -s 1K --modes pool+mw/new`.
 *
 *   ucx_session [-n SESSIONS] [-w WARMUP] [-p PORT] [-a ADDR]
 *
 * Two processes (fork; the server pinned to the second CPU, the client to
 * the first, as tollfree-bench does).  Each UCP worker is created once.
 * One session, timed on the client:
 *   client: endpoint to the server's ucp_listener (tcp sockaddr);
 *   server: accepts the endpoint, ucp_mem_map of a fresh 4 KiB buffer,
 *           ucp_rkey_pack, and sends address and key (tag message);
 *   client: receives them, ucp_ep_rkey_unpack, one 1 KiB ucp_put_nbx and
 *           a flush, rkey destroy, endpoint close (graceful, awaited);
 *   server: on the disconnect, closes its endpoint and unmaps the buffer
 *           (the revocation: the key dies with the mapping).
 * Prints one line:
 *   ucx_session sessions=N min_us=.. median_us=.. avg_us=.. p99_us=..
 * Transports come from the environment (bench/peers/run.sh sets
 * UCX_TLS=tcp; tests/vm/run.sh UCX_TLS=rc_verbs with the rdmacm
 * connection manager on Soft-RoCE).  ADDR (IPv4, default 127.0.0.1) is
 * the listener's address and the one the client connects to: rdma_cm
 * finds its device by it.
 *
 * Build: cc -O2 -o ucx_session ucx_session.c -lucp -lucs
 * (bench/CMakeLists.txt builds it when the UCX headers are installed).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#define BUF_SIZE  4096
#define PUT_SIZE  1024
#define TAG_KEY	  0x7466u
#define KEY_MAX	  1024
#define TIMEOUT_S 30

/* The listener's address, network order (-a). */
static uint32_t srv_addr;

struct key_msg {
	uint64_t addr;
	uint32_t len;
	uint8_t key[KEY_MAX];
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void pin(int nth)
{
	cpu_set_t set, one;
	int seen = 0;

	if (sched_getaffinity(0, sizeof(set), &set))
		return;
	for (int i = 0; i < CPU_SETSIZE; i++) {
		if (!CPU_ISSET(i, &set) || seen++ != nth)
			continue;
		CPU_ZERO(&one);
		CPU_SET(i, &one);
		sched_setaffinity(0, sizeof(one), &one);
		return;
	}
}

/* Progress @w until the request completes (NULL: completed at once).
 * Returns the status; gives up after TIMEOUT_S. */
static ucs_status_t wait_req(ucp_worker_h w, void *req)
{
	uint64_t deadline = now_ns() + TIMEOUT_S * 1000000000ull;
	ucs_status_t st;

	if (req == NULL)
		return UCS_OK;
	if (UCS_PTR_IS_ERR(req))
		return UCS_PTR_STATUS(req);
	while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
		ucp_worker_progress(w);
		if (now_ns() > deadline) {
			st = UCS_ERR_TIMED_OUT;
			break;
		}
	}
	ucp_request_free(req);
	return st;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* ------------------------------------------------------------ server */

struct srv_state {
	ucp_conn_request_h pending;
	int closed;
};

static void on_conn(ucp_conn_request_h req, void *arg)
{
	struct srv_state *s = arg;

	if (s->pending)
		ucp_listener_reject(NULL, req); /* one session at a time */
	else
		s->pending = req;
}

static void on_srv_err(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	struct srv_state *s = arg;

	(void)ep;
	(void)status;
	s->closed = 1;
}

static int serve_one(ucp_context_h ctx, ucp_worker_h w, struct srv_state *s)
{
	ucp_ep_params_t ep_p = {
		.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
			      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
			      UCP_EP_PARAM_FIELD_ERR_HANDLER,
		.conn_request = s->pending,
		.err_mode = UCP_ERR_HANDLING_MODE_PEER,
		.err_handler = {.cb = on_srv_err, .arg = s},
	};
	ucp_mem_map_params_t mp = {
		.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
			      UCP_MEM_MAP_PARAM_FIELD_LENGTH,
		.length = BUF_SIZE,
	};
	ucp_request_param_t rp = {0};
	ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
				  .flags = UCP_EP_CLOSE_FLAG_FORCE};
	struct key_msg msg;
	ucp_mem_h memh;
	ucp_ep_h ep;
	void *buf, *kb;
	size_t klen;
	uint64_t deadline;
	int ret = -1;

	s->pending = NULL;
	s->closed = 0;
	if (ucp_ep_create(w, &ep_p, &ep) != UCS_OK)
		return -1;
	/* A fresh buffer per session: its first mapping is part of the
	 * cost, as a fresh registration is. */
	buf = mmap(NULL, BUF_SIZE, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		goto out_ep;
	mp.address = buf;
	if (ucp_mem_map(ctx, &mp, &memh) != UCS_OK)
		goto out_buf;
	if (ucp_rkey_pack(ctx, memh, &kb, &klen) != UCS_OK || klen > KEY_MAX)
		goto out_unmap;
	msg.addr = (uintptr_t)buf;
	msg.len = (uint32_t)klen;
	memcpy(msg.key, kb, klen);
	ucp_rkey_buffer_release(kb);
	if (wait_req(w, ucp_tag_send_nbx(ep, &msg,
					 offsetof(struct key_msg, key) + klen,
					 TAG_KEY, &rp)) != UCS_OK)
		goto out_unmap;
	deadline = now_ns() + TIMEOUT_S * 1000000000ull;
	while (!s->closed && now_ns() < deadline)
		ucp_worker_progress(w);
	ret = s->closed ? 0 : -1;
out_unmap:
	ucp_mem_unmap(ctx, memh);
out_buf:
	munmap(buf, BUF_SIZE);
out_ep:
	wait_req(w, ucp_ep_close_nbx(ep, &cp));
	return ret;
}

static int server(ucp_context_h ctx, ucp_worker_h w, uint16_t port,
		  unsigned total, int ready_fd)
{
	struct srv_state s = {0};
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons(port),
				 .sin_addr.s_addr = srv_addr};
	ucp_listener_params_t lp = {
		.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
			      UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
		.sockaddr = {.addr = (struct sockaddr *)&sa,
			     .addrlen = sizeof(sa)},
		.conn_handler = {.cb = on_conn, .arg = &s},
	};
	ucp_listener_h l;
	char ok = 1;

	if (ucp_listener_create(w, &lp, &l) != UCS_OK) {
		fprintf(stderr, "ucx_session: listener on port %u failed\n",
			port);
		return 1;
	}
	if (write(ready_fd, &ok, 1) != 1)
		return 1;
	for (unsigned i = 0; i < total; i++) {
		uint64_t deadline = now_ns() + TIMEOUT_S * 1000000000ull;

		while (!s.pending && now_ns() < deadline)
			ucp_worker_progress(w);
		if (!s.pending || serve_one(ctx, w, &s)) {
			fprintf(stderr,
				"ucx_session: server: session %u "
				"failed\n",
				i);
			ucp_listener_destroy(l);
			return 1;
		}
	}
	ucp_listener_destroy(l);
	return 0;
}

/* ------------------------------------------------------------ client */

static void on_cli_err(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	(void)arg;
	(void)ep;
	(void)status;
}

static int session(ucp_worker_h w, uint16_t port, const uint8_t *src,
		   uint64_t *ns)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons(port),
				 .sin_addr.s_addr = srv_addr};
	ucp_ep_params_t ep_p = {
		.field_mask = UCP_EP_PARAM_FIELD_FLAGS |
			      UCP_EP_PARAM_FIELD_SOCK_ADDR |
			      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
			      UCP_EP_PARAM_FIELD_ERR_HANDLER,
		.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
		.sockaddr = {.addr = (struct sockaddr *)&sa,
			     .addrlen = sizeof(sa)},
		.err_mode = UCP_ERR_HANDLING_MODE_PEER,
		.err_handler = {.cb = on_cli_err},
	};
	ucp_request_param_t rp = {0};
	ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
				  .flags = 0};
	struct key_msg msg;
	ucp_rkey_h rkey;
	ucp_ep_h ep;
	uint64_t t0 = now_ns();
	const char *step = "ep_create";
	ucs_status_t st;
	int ret = -1;

	st = ucp_ep_create(w, &ep_p, &ep);
	if (st != UCS_OK)
		goto fail;
	step = "key receive";
	st = wait_req(w, ucp_tag_recv_nbx(w, &msg, sizeof(msg), TAG_KEY,
					  (ucp_tag_t)-1, &rp));
	if (st != UCS_OK || msg.len > KEY_MAX)
		goto out;
	step = "rkey_unpack";
	st = ucp_ep_rkey_unpack(ep, msg.key, &rkey);
	if (st != UCS_OK)
		goto out;
	step = "put";
	st = wait_req(w, ucp_put_nbx(ep, src, PUT_SIZE, msg.addr, rkey, &rp));
	if (st == UCS_OK) {
		step = "flush";
		st = wait_req(w, ucp_ep_flush_nbx(ep, &rp));
	}
	if (st == UCS_OK)
		ret = 0;
	ucp_rkey_destroy(rkey);
out:
	if (ret == 0) {
		step = "ep_close";
		st = wait_req(w, ucp_ep_close_nbx(ep, &cp));
		if (st != UCS_OK)
			ret = -1;
	} else {
		wait_req(w, ucp_ep_close_nbx(ep, &cp));
	}
fail:
	if (ret)
		fprintf(stderr, "ucx_session: %s: %s\n", step,
			ucs_status_string(st));
	*ns = now_ns() - t0;
	return ret;
}

int main(int argc, char **argv)
{
	unsigned n = 1000, warm = 100;
	uint16_t port = 20500;
	ucp_params_t up = {.field_mask = UCP_PARAM_FIELD_FEATURES,
			   .features = UCP_FEATURE_RMA | UCP_FEATURE_TAG};
	ucp_worker_params_t wp = {.field_mask =
					  UCP_WORKER_PARAM_FIELD_THREAD_MODE,
				  .thread_mode = UCS_THREAD_MODE_SINGLE};
	ucp_context_h ctx;
	ucp_worker_h w;
	uint64_t *v;
	uint8_t src[PUT_SIZE];
	int c, pfd[2], status, ret = 0;
	char ok;
	pid_t pid;

	srv_addr = htonl(INADDR_LOOPBACK);
	while ((c = getopt(argc, argv, "n:w:p:a:")) != -1) {
		switch (c) {
		case 'n':
			n = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'w':
			warm = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'p':
			port = (uint16_t)strtoul(optarg, NULL, 10);
			break;
		case 'a':
			if (inet_pton(AF_INET, optarg, &srv_addr) != 1) {
				fprintf(stderr, "ucx_session: bad address %s\n",
					optarg);
				return 2;
			}
			break;
		default:
			fprintf(stderr, "usage: ucx_session [-n SESSIONS] "
					"[-w WARMUP] [-p PORT] [-a ADDR]\n");
			return 2;
		}
	}
	if (!n || !port) {
		fprintf(stderr, "ucx_session: bad arguments\n");
		return 2;
	}
	v = calloc(n, sizeof(*v));
	if (!v || pipe(pfd))
		return 1;
	memset(src, 0x5a, sizeof(src));
	fflush(NULL);
	/* Contexts and workers are created after the fork. */
	pid = fork();
	if (pid < 0)
		return 1;
	pin(pid == 0 ? 1 : 0);
	if (ucp_init(&up, NULL, &ctx) != UCS_OK ||
	    ucp_worker_create(ctx, &wp, &w) != UCS_OK) {
		fprintf(stderr, "ucx_session: UCP init failed\n");
		if (pid)
			kill(pid, SIGTERM);
		return 1;
	}
	if (pid == 0) {
		close(pfd[0]);
		ret = server(ctx, w, port, warm + n, pfd[1]);
		ucp_worker_destroy(w);
		ucp_cleanup(ctx);
		_exit(ret);
	}
	close(pfd[1]);
	if (read(pfd[0], &ok, 1) != 1) {
		fprintf(stderr, "ucx_session: the server did not start\n");
		ret = 1;
		goto out;
	}
	for (unsigned i = 0; i < warm + n; i++) {
		uint64_t ns;

		if (session(w, port, src, &ns)) {
			fprintf(stderr, "ucx_session: session %u failed\n", i);
			ret = 1;
			goto out;
		}
		if (i >= warm)
			v[i - warm] = ns;
	}
	qsort(v, n, sizeof(*v), cmp_u64);
	{
		double sum = 0;

		for (unsigned i = 0; i < n; i++)
			sum += (double)v[i];
		printf("ucx_session sessions=%u min_us=%.3f median_us=%.3f "
		       "avg_us=%.3f p99_us=%.3f\n",
		       n, v[0] / 1e3,
		       (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) / 1e3,
		       sum / n / 1e3, v[(size_t)((n - 1) * 0.99)] / 1e3);
	}
out:
	ucp_worker_destroy(w);
	ucp_cleanup(ctx);
	if (ret)
		kill(pid, SIGTERM);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!ret && (!WIFEXITED(status) || WEXITSTATUS(status)))
		ret = 1;
	free(v);
	return ret;
}
