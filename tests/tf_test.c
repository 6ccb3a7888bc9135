/* SPDX-License-Identifier: MIT */
/*
 * tf_test.c - the test harness: exit codes, log accounting, and the
 * two-process pair used by the data-path conformance tests.  It uses only
 * the public API, so that the same tests judge every provider: it is
 * built against the shared library for the conformance tests, whose
 * include path holds nothing of src/, and again against the static one
 * for the unit tests (with tf_test_unit.c).
 */
#include <errno.h>
#include <netdb.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tf_test.h"

static const char *test_name = "test";
/* "name" or "name[A]" / "name[B]" once the pair has forked. */
static char full_name[128] = "test";
/* Atomic: library threads (progress, monitors) log while the test's
 * thread switches tolerant mode around the steps that provoke errors. */
static atomic_int logged_bad;
static int expected_bad;
static atomic_bool tolerate;
/* The pair of this process, so that a failing side A can reap side B. */
static struct tf_pair *cur_pair;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int env_int(const char *name, int deflt)
{
	const char *v = getenv(name);
	char *end;
	long l;

	if (!v || !*v)
		return deflt;
	l = strtol(v, &end, 10);
	if (*end || l <= 0 || l > 1000000000)
		return deflt;
	return (int)l;
}

int tf_test_timeout_ms(void)
{
	return env_int("TOLLFREE_TEST_TIMEOUT_MS", 15000);
}

/*
 * Side A must not leave side B running when it gives up: B could hold
 * the socket or a device QP for the rest of the ctest run.  B also has
 * PR_SET_PDEATHSIG, this is only the orderly path.
 */
static void reap_peer(void)
{
	struct tf_pair *p = cur_pair;

	if (!p || p->side != TF_SIDE_A || p->peer_dead || p->peer_pid <= 0)
		return;
	kill(p->peer_pid, SIGKILL);
	waitpid(p->peer_pid, NULL, 0);
	p->peer_dead = true;
}

static bool strict_soft(void)
{
	const char *strict = getenv("TOLLFREE_TEST_STRICT");
	const char *prov = getenv("TOLLFREE_PROVIDER");

	return strict && !strcmp(strict, "1") &&
	       (!prov || !strcmp(prov, "soft"));
}

void tf_test_partial_skip(const char *fmt, ...)
{
	va_list ap;

	printf("%s: not tried: ", full_name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (strict_soft())
		tf_test_fail(
			__FILE__, __LINE__,
			"partial skip not allowed (TOLLFREE_TEST_STRICT=1)");
}

void tf_test_partial_skip_host(const char *fmt, ...)
{
	va_list ap;

	printf("%s: not tried (host): ", full_name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

void tf_test_skip(const char *fmt, ...)
{
	va_list ap;

	printf("%s: SKIP: ", full_name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	reap_peer();
	if (strict_soft()) {
		printf("%s: FAIL: skip not allowed (TOLLFREE_TEST_STRICT=1)\n",
		       full_name);
		fflush(stdout);
		exit(TF_TEST_FAIL);
	}
	exit(TF_TEST_SKIP);
}

void tf_test_fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	printf("%s: FAIL at %s:%d: ", full_name, file, line);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	reap_peer();
	exit(TF_TEST_FAIL);
}

void tf_test_info(const char *fmt, ...)
{
	va_list ap;

	printf("%s: ", full_name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

static void count_log(tf_log_level_t level, const char *subsys, const char *msg,
		      void *arg)
{
	static const char *const names[] = {"error", "warn", "info", "debug",
					    "trace"};

	bool tol = atomic_load(&tolerate);

	(void)arg;
	fprintf(stderr, "[%s] tollfree %s: %s: %s%s\n", full_name,
		(unsigned)level < 5 ? names[level] : "?", subsys ? subsys : "",
		msg, level <= TF_LOG_WARN && tol ? " (tolerated)" : "");
	if (level <= TF_LOG_WARN && !tol)
		atomic_fetch_add(&logged_bad, 1);
}

void tf_test_begin(const char *name)
{
	test_name = name;
	snprintf(full_name, sizeof(full_name), "%s", name);
	setvbuf(stdout, NULL, _IOLBF, 0);
	tf_log_set_handler(count_log, NULL);
}

void tf_test_expect_log(int n)
{
	expected_bad += n;
}

void tf_test_tolerate_log(bool on)
{
	atomic_store(&tolerate, on);
}

bool tf_test_tolerating(void)
{
	return atomic_load(&tolerate);
}

int tf_test_end(void)
{
	int bad = atomic_load(&logged_bad);

	if (bad > expected_bad) {
		printf("%s: FAIL: %d unexpected warnings/errors logged\n",
		       full_name, bad - expected_bad);
		return TF_TEST_FAIL;
	}
	printf("%s: PASS\n", full_name);
	return TF_TEST_PASS;
}

static long status_field(const char *field)
{
	FILE *f = fopen("/proc/self/status", "r");
	size_t n = strlen(field);
	char line[256];
	long kb = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, n))
			kb = strtol(line + n, NULL, 10);
	fclose(f);
	return kb < 0 ? -1 : kb * 1024;
}

long tf_test_vmlck(void)
{
	return status_field("VmLck:");
}

long tf_test_vmpin(void)
{
	return status_field("VmPin:");
}

/* ------------------------------------------------------ two-process pair */

static void on_alarm(int sig)
{
	static const char msg[] = "tf_test: FAIL: watchdog expired (test hung; "
				  "TOLLFREE_TEST_ALARM_S)\n";
	struct tf_pair *p = cur_pair;

	(void)sig;
	if (write(STDOUT_FILENO, msg, sizeof(msg) - 1) < 0) {
		/* Nothing else can be done from a signal handler. */
	}
	if (p && p->side == TF_SIDE_A && !p->peer_dead && p->peer_pid > 0)
		kill(p->peer_pid, SIGKILL);
	_exit(TF_TEST_FAIL);
}

/* The peer closed the socket: find out why and end this side too. */
static void __attribute__((noreturn))
peer_gone(struct tf_pair *p, const char *what)
{
	int st;

	if (p->side == TF_SIDE_B) {
		printf("%s: FAIL: side A went away during %s\n", full_name,
		       what);
		exit(TF_TEST_FAIL);
	}
	if (p->peer_pid <= 0) /* peer mode: its output says why */
		tf_test_fail(__FILE__, __LINE__,
			     "side B (remote) went away during %s", what);
	if (waitpid(p->peer_pid, &st, 0) != p->peer_pid)
		tf_test_fail(__FILE__, __LINE__, "side B lost during %s: %m",
			     what);
	p->peer_dead = true;
	if (WIFEXITED(st) && WEXITSTATUS(st) == TF_TEST_SKIP)
		tf_test_skip("side B skipped");
	if (WIFEXITED(st))
		tf_test_fail(__FILE__, __LINE__,
			     "side B exited with status %d during %s",
			     WEXITSTATUS(st), what);
	tf_test_fail(__FILE__, __LINE__, "side B killed by signal %d during %s",
		     WIFSIGNALED(st) ? WTERMSIG(st) : -1, what);
}

/*
 * Wait until the socket is ready, calling tf_context_progress() in between:
 * the peer may be waiting for this side to serve its one-sided operations.
 * Peer messages may legitimately take several completion timeouts.
 */
static void sock_wait(struct tf_pair *p, short events, const char *what)
{
	uint64_t deadline = now_ms() + 5ull * (uint64_t)tf_test_timeout_ms();

	for (;;) {
		struct pollfd pfd = {.fd = p->sock, .events = events};
		int r = poll(&pfd, 1, 1);

		if (r > 0)
			return;
		if (r < 0 && errno != EINTR)
			tf_test_fail(__FILE__, __LINE__, "poll: %m");
		if (p->ctx)
			tf_context_progress(p->ctx);
		if (now_ms() > deadline)
			tf_test_fail(__FILE__, __LINE__,
				     "peer did not answer (%s) in time", what);
	}
}

void tf_test_send_msg(struct tf_pair *p, const void *buf, size_t len)
{
	const uint8_t *b = buf;

	CHECK(p->sock >= 0);
	while (len) {
		ssize_t r;

		sock_wait(p, POLLOUT, "send");
		r = send(p->sock, b, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (r <= 0)
			peer_gone(p, "send");
		b += r;
		len -= (size_t)r;
	}
}

void tf_test_recv_msg(struct tf_pair *p, void *buf, size_t len)
{
	uint8_t *b = buf;

	CHECK(p->sock >= 0);
	while (len) {
		ssize_t r;

		sock_wait(p, POLLIN, "receive");
		r = recv(p->sock, b, len, MSG_DONTWAIT);
		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (r <= 0)
			peer_gone(p, "receive");
		b += r;
		len -= (size_t)r;
	}
}

void tf_test_send_u64(struct tf_pair *p, uint64_t v)
{
	tf_test_send_msg(p, &v, sizeof(v));
}

uint64_t tf_test_recv_u64(struct tf_pair *p)
{
	uint64_t v;

	tf_test_recv_msg(p, &v, sizeof(v));
	return v;
}

void tf_test_sync(struct tf_pair *p)
{
	uint8_t tok = 'S', got = 0;

	tf_test_send_msg(p, &tok, 1);
	tf_test_recv_msg(p, &got, 1);
	CHECK(got == 'S');
}

void tf_test_send_rbuf(struct tf_pair *p, uint64_t addr, uint64_t len,
		       uint32_t rkey)
{
	struct tf_test_rbuf rb = {.addr = addr, .len = len, .rkey = rkey};

	tf_test_send_msg(p, &rb, sizeof(rb));
}

struct tf_test_rbuf tf_test_recv_rbuf(struct tf_pair *p)
{
	struct tf_test_rbuf rb;

	tf_test_recv_msg(p, &rb, sizeof(rb));
	return rb;
}

/* ------------------------------------------------------ peer mode */

/* TOLLFREE_TEST_PEER_ADDR split into host and port (0: not peer mode). */
static int peer_addr(char *host, size_t hlen, char *port, size_t plen)
{
	const char *a = getenv("TOLLFREE_TEST_PEER_ADDR");
	const char *colon = a ? strrchr(a, ':') : NULL;
	char *end;
	long l;

	if (!a || !*a)
		return 0;
	if (!colon || colon == a || (size_t)(colon - a) >= hlen ||
	    strlen(colon + 1) >= plen)
		tf_test_fail(__FILE__, __LINE__,
			     "TOLLFREE_TEST_PEER_ADDR '%s': want HOST:PORT", a);
	l = strtol(colon + 1, &end, 10);
	if (*end || l <= 0 || l > 65535)
		tf_test_fail(__FILE__, __LINE__,
			     "TOLLFREE_TEST_PEER_ADDR '%s': bad port", a);
	memcpy(host, a, (size_t)(colon - a));
	host[colon - a] = '\0';
	snprintf(port, plen, "%s", colon + 1);
	return 1;
}

/* Peer mode's side (-1: not peer mode). */
static int peer_side(void)
{
	const char *s = getenv("TOLLFREE_TEST_PEER_SIDE");

	if (!s || !*s)
		return -1;
	if (!strcmp(s, "A"))
		return TF_SIDE_A;
	if (!strcmp(s, "B"))
		return TF_SIDE_B;
	tf_test_fail(__FILE__, __LINE__,
		     "TOLLFREE_TEST_PEER_SIDE '%s': want A or B", s);
}

bool tf_test_peer_mode(void)
{
	return peer_side() >= 0;
}

const char *tf_test_peer_host(void)
{
	static char host[256];
	char port[8];

	if (peer_side() != TF_SIDE_A ||
	    !peer_addr(host, sizeof(host), port, sizeof(port)))
		return "127.0.0.1";
	return host;
}

/* The channel of peer mode: side B listens on the port of
 * TOLLFREE_TEST_PEER_ADDR (any address), side A connects to it until the
 * test timeout has passed (side B may start later). */
static int peer_channel(enum tf_test_side side)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
	uint64_t deadline = now_ms() + 4ull * (uint64_t)tf_test_timeout_ms();
	char host[256], port[8];
	int fd = -1, one = 1, r;

	if (!peer_addr(host, sizeof(host), port, sizeof(port)))
		tf_test_fail(__FILE__, __LINE__,
			     "TOLLFREE_TEST_PEER_SIDE needs "
			     "TOLLFREE_TEST_PEER_ADDR=HOST:PORT");
	if (side == TF_SIDE_B) {
		hints.ai_family = AF_INET;
		hints.ai_flags = AI_PASSIVE;
	}
	r = getaddrinfo(side == TF_SIDE_B ? NULL : host, port, &hints, &ai);
	if (r)
		tf_test_fail(__FILE__, __LINE__, "peer address %s:%s: %s", host,
			     port, gai_strerror(r));
	if (side == TF_SIDE_B) {
		int lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct pollfd pfd = {.fd = lfd, .events = POLLIN};

		if (lfd < 0 ||
		    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one,
			       sizeof(one)) ||
		    bind(lfd, ai->ai_addr, ai->ai_addrlen) || listen(lfd, 1))
			tf_test_fail(__FILE__, __LINE__,
				     "peer channel: listen on port %s: %m",
				     port);
		if (poll(&pfd, 1, 4 * tf_test_timeout_ms()) == 1)
			fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		close(lfd);
		if (fd < 0)
			tf_test_fail(__FILE__, __LINE__,
				     "peer channel: side A did not connect to "
				     "port %s",
				     port);
	} else {
		for (;;) {
			fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC,
				    0);
			if (fd < 0)
				tf_test_fail(__FILE__, __LINE__, "socket: %m");
			if (!connect(fd, ai->ai_addr, ai->ai_addrlen))
				break;
			close(fd);
			if (now_ms() > deadline)
				tf_test_fail(__FILE__, __LINE__,
					     "peer channel: connect to %s:%s: "
					     "%m",
					     host, port);
			usleep(100000);
		}
	}
	freeaddrinfo(ai);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

void tf_test_pair_open(struct tf_pair *p)
{
	tf_context_params_t params = {0};
	pid_t parent = getpid(), pid;
	const char *peer_dev;
	int sv[2], ret, side = peer_side();

	memset(p, 0, sizeof(*p));
	p->sock = -1;
	if (side >= 0) {
		/* Peer mode: this process is one side; the other runs
		 * elsewhere (another machine) and is reached by TCP. */
		p->side = (enum tf_test_side)side;
		p->sock = peer_channel(p->side);
		p->peer_pid = 0;
	} else if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		tf_test_fail(__FILE__, __LINE__, "socketpair: %m");
	/* Flush before fork so that buffered output is not printed twice. */
	fflush(stdout);
	fflush(stderr);
	pid = side >= 0 ? 1 : fork();
	if (pid < 0)
		tf_test_fail(__FILE__, __LINE__, "fork: %m");
	if (side >= 0) {
		/* the side and channel are set */
	} else if (pid == 0) {
		/* Die with side A, whatever way it ends. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(TF_TEST_FAIL);
		close(sv[0]);
		p->side = TF_SIDE_B;
		p->sock = sv[1];
		p->peer_pid = parent;
	} else {
		close(sv[1]);
		p->side = TF_SIDE_A;
		p->sock = sv[0];
		p->peer_pid = pid;
	}
	cur_pair = p;
	snprintf(full_name, sizeof(full_name), "%s[%c]", test_name,
		 p->side == TF_SIDE_A ? 'A' : 'B');
	signal(SIGALRM, on_alarm);
	alarm((unsigned)env_int("TOLLFREE_TEST_ALARM_S", 110));

	p->vmlck0 = tf_test_vmlck();
	p->vmpin0 = tf_test_vmpin();
	peer_dev = getenv("TOLLFREE_TEST_PEER_DEVICE");
	if (p->side == TF_SIDE_B && peer_dev && *peer_dev) {
		params.field_mask |= TF_CONTEXT_PARAM_DEVICE;
		params.device = peer_dev;
	}
	ret = tf_context_open(&params, &p->ctx);
	/* The API promises -TF_ENOPROVIDER for a provider without a device;
	 * -ENODEV is accepted too, so that a run without hardware skips. */
	if (ret == -TF_ENOPROVIDER || ret == -EOPNOTSUPP || ret == -ENODEV)
		tf_test_skip("no usable provider: %s", tf_strerror(ret));
	CHECK_OK(ret);
	CHECK_SUP(tf_context_query_caps(p->ctx, &p->caps));
	CHECK_OK(tf_pd_create(p->ctx, &p->pd));
	/* Both sides are up (or the one that skipped is noticed here). */
	tf_test_sync(p);
}

void tf_test_pair_start(struct tf_pair *p, const tf_qp_params_t *params)
{
	tf_test_pair_open(p);
	tf_test_qp_open(p, params, &p->q);
}

void tf_test_pair_kill_peer(struct tf_pair *p)
{
	int st;

	CHECK(p->side == TF_SIDE_A && !p->peer_dead);
	if (p->peer_pid <= 0)
		tf_test_skip("peer mode: side B runs elsewhere, cannot be "
			     "killed from here");
	CHECK(kill(p->peer_pid, SIGKILL) == 0);
	CHECK(waitpid(p->peer_pid, &st, 0) == p->peer_pid);
	CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
	       "side B ended before it was killed (status 0x%x)", st);
	p->peer_dead = true;
	close(p->sock);
	p->sock = -1;
}

int tf_test_pair_end(struct tf_pair *p)
{
	long lck, pin;
	int rc, st;

	if (!p->peer_dead)
		tf_test_sync(p);
	tf_test_qp_close(&p->q);
	CHECK_OK(tf_pd_destroy(p->pd));
	p->pd = NULL;
	tf_context_close(p->ctx);
	p->ctx = NULL;
	/* Everything the library pinned or locked must be released. */
	lck = tf_test_vmlck();
	pin = tf_test_vmpin();
	CHECKF(p->vmlck0 < 0 || lck == p->vmlck0,
	       "VmLck %ld bytes after teardown, %ld before the context", lck,
	       p->vmlck0);
	CHECKF(p->vmpin0 < 0 || pin == p->vmpin0,
	       "VmPin %ld bytes after teardown, %ld before the context", pin,
	       p->vmpin0);
	rc = tf_test_end();
	if (p->peer_pid <= 0 && !p->peer_dead) {
		/* Peer mode: trade results; both sides end with the
		 * combined one (fail, else skip, else pass). */
		uint8_t mine = (uint8_t)rc, theirs = TF_TEST_FAIL;

		tf_test_send_msg(p, &mine, 1);
		tf_test_recv_msg(p, &theirs, 1);
		close(p->sock);
		p->sock = -1;
		p->peer_dead = true;
		if (theirs == TF_TEST_SKIP && rc != TF_TEST_FAIL)
			rc = TF_TEST_SKIP;
		else if (theirs != TF_TEST_PASS && theirs != TF_TEST_SKIP)
			rc = TF_TEST_FAIL;
		if (p->side == TF_SIDE_B) {
			fflush(stdout);
			exit(rc);
		}
		return rc;
	}
	if (p->side == TF_SIDE_B) {
		fflush(stdout);
		exit(rc);
	}
	if (p->peer_dead)
		return rc;
	if (p->sock >= 0)
		close(p->sock);
	p->sock = -1;
	if (waitpid(p->peer_pid, &st, 0) != p->peer_pid)
		tf_test_fail(__FILE__, __LINE__, "waitpid side B: %m");
	p->peer_dead = true;
	if (!WIFEXITED(st)) {
		printf("%s: FAIL: side B killed by signal %d\n", full_name,
		       WIFSIGNALED(st) ? WTERMSIG(st) : -1);
		return TF_TEST_FAIL;
	}
	if (WEXITSTATUS(st) == TF_TEST_FAIL || rc == TF_TEST_FAIL)
		return TF_TEST_FAIL;
	if (WEXITSTATUS(st) == TF_TEST_SKIP || rc == TF_TEST_SKIP)
		return TF_TEST_SKIP;
	if (WEXITSTATUS(st) != 0) {
		printf("%s: FAIL: side B exited with %d\n", full_name,
		       WEXITSTATUS(st));
		return TF_TEST_FAIL;
	}
	return rc;
}

void tf_test_qp_create(struct tf_pair *p, const tf_qp_params_t *params,
		       struct tf_test_qp *q)
{
	tf_qp_params_t qpp = {0};
	tf_cq_params_t cqp = {.field_mask = TF_CQ_PARAM_DEPTH};

	if (params)
		qpp = *params;
	/* Deep enough for every WR of both queues to complete with an error
	 * at once (flush), so that overflow is never the test's fault. */
	cqp.depth = 1024;
	if ((qpp.field_mask & TF_QP_PARAM_MAX_SEND_WR) &&
	    qpp.max_send_wr * 2 > cqp.depth)
		cqp.depth = qpp.max_send_wr * 2;
	if ((qpp.field_mask & TF_QP_PARAM_MAX_RECV_WR) &&
	    qpp.max_recv_wr * 2 > cqp.depth)
		cqp.depth = qpp.max_recv_wr * 2;
	memset(q, 0, sizeof(*q));
	if (qpp.send_cq) {
		q->scq = qpp.send_cq;
		q->rcq = qpp.recv_cq;
	} else {
		CHECK_OK(tf_cq_create(p->ctx, &cqp, &q->scq));
		CHECK_OK(tf_cq_create(p->ctx, &cqp, &q->rcq));
		q->own_cqs = true;
		qpp.send_cq = q->scq;
		qpp.recv_cq = q->rcq;
	}
	CHECK_OK(tf_qp_create(p->pd, &qpp, &q->qp));
	CHECK(tf_qp_state(q->qp) == TF_QPS_INIT);
}

void tf_test_qp_open(struct tf_pair *p, const tf_qp_params_t *params,
		     struct tf_test_qp *q)
{
	uint8_t blob[TF_QP_ADDR_MAX], peer[TF_QP_ADDR_MAX];
	size_t len = sizeof(blob);
	uint64_t plen;

	tf_test_qp_create(p, params, q);
	CHECK_OK(tf_qp_get_addr(q->qp, blob, &len));
	CHECK(len > 0 && len <= TF_QP_ADDR_MAX);
	tf_test_send_u64(p, len);
	tf_test_send_msg(p, blob, len);
	plen = tf_test_recv_u64(p);
	CHECK(plen > 0 && plen <= TF_QP_ADDR_MAX);
	tf_test_recv_msg(p, peer, plen);
	CHECK_OK(tf_qp_connect(q->qp, peer, plen));
	CHECK(tf_qp_state(q->qp) == TF_QPS_RTS);
	tf_test_sync(p);
}

void tf_test_qp_close(struct tf_test_qp *q)
{
	if (q->qp)
		CHECK_OK(tf_qp_destroy(q->qp));
	q->qp = NULL;
	if (q->own_cqs) {
		CHECK_OK(tf_cq_destroy(q->scq));
		CHECK_OK(tf_cq_destroy(q->rcq));
	}
	q->scq = NULL;
	q->rcq = NULL;
	q->own_cqs = false;
}

void tf_test_qp_connect_local(tf_qp_t *a, tf_qp_t *b)
{
	uint8_t ba[TF_QP_ADDR_MAX], bb[TF_QP_ADDR_MAX];
	size_t la = sizeof(ba), lb = sizeof(bb);

	CHECK_OK(tf_qp_get_addr(a, ba, &la));
	CHECK_OK(tf_qp_get_addr(b, bb, &lb));
	CHECK_OK(tf_qp_connect(a, bb, lb));
	CHECK_OK(tf_qp_connect(b, ba, la));
}

void tf_test_qp_reopen(struct tf_pair *p, const tf_qp_params_t *params,
		       struct tf_test_qp *q)
{
	tf_test_sync(p);
	tf_test_qp_close(q);
	tf_test_qp_open(p, params, q);
}

/* ------------------------------------------------------------ buffers */

const char *tf_test_mem_name(enum tf_test_mem kind)
{
	switch (kind) {
	case TF_MEM_LIB:
		return "tf_mem_alloc";
	case TF_MEM_MALLOC:
		return "malloc";
	case TF_MEM_MMAP:
		return "mmap";
	default:
		return "?";
	}
}

static size_t page_round(size_t len)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);

	return (len + pg - 1) / pg * pg;
}

/* Offset of a malloc buffer inside its allocation: 8-byte aligned (for
 * atomics) but never page aligned, so that providers see ranges that
 * start and end inside pages. */
#define MALLOC_SKEW 24

void tf_test_buf_alloc(struct tf_pair *p, tf_pd_t *pd, enum tf_test_mem kind,
		       size_t len, unsigned access, struct tf_test_buf *b)
{
	int ret;

	memset(b, 0, sizeof(*b));
	b->kind = kind;
	b->len = len;
	b->ctx = p->ctx;
	switch (kind) {
	case TF_MEM_LIB:
		b->base_len = page_round(len ? len : 1);
		ret = tf_mem_alloc(p->ctx, b->base_len, &b->base);
		if (ret == -EOPNOTSUPP)
			tf_test_skip("tf_mem_alloc not supported");
		CHECK_OK(ret);
		b->addr = b->base;
		break;
	case TF_MEM_MALLOC:
		b->base_len = len + MALLOC_SKEW + 64;
		b->base = malloc(b->base_len);
		CHECK(b->base);
		b->addr = (uint8_t *)b->base + MALLOC_SKEW;
		break;
	case TF_MEM_MMAP:
		b->base_len = page_round(len ? len : 1);
		b->base = mmap(NULL, b->base_len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		CHECK(b->base != MAP_FAILED);
		b->addr = b->base;
		break;
	default:
		CHECK(!"bad memory kind");
	}
	memset(b->addr, 0, len);
	if (access != TF_TEST_NO_MR)
		CHECK_OK(tf_mr_reg(pd, b->addr, len, access, &b->mr));
}

void tf_test_dev_open(struct tf_test_dev *s, const char *provider,
		      const char *dev, size_t len)
{
	tf_context_params_t cp = {.field_mask = TF_CONTEXT_PARAM_PROVIDER,
				  .provider = provider};
	int ret;

	memset(s, 0, sizeof(*s));
	if (dev && dev[0]) {
		cp.field_mask |= TF_CONTEXT_PARAM_DEVICE;
		cp.device = dev;
	}
	ret = tf_context_open(&cp, &s->ctx);
	if (ret)
		tf_test_skip("no %s device%s%s: %s", provider, dev ? " " : "",
			     dev ? dev : "", tf_strerror(ret));
	CHECK_OK(tf_pd_create(s->ctx, &s->pd));
	CHECK_OK(tf_cq_create(s->ctx, NULL, &s->cq));
	CHECK_OK(tf_mem_alloc(s->ctx, len, (void **)&s->buf));
	s->len = len;
	CHECK_OK(tf_mr_reg(s->pd, s->buf, len, TF_ACCESS_ALL, &s->mr));
}

void tf_test_dev_close(struct tf_test_dev *s)
{
	if (s->qp)
		CHECK_OK(tf_qp_destroy(s->qp));
	s->qp = NULL;
	CHECK_OK(tf_mr_dereg(s->mr));
	tf_mem_free(s->ctx, s->buf, s->len);
	CHECK_OK(tf_cq_destroy(s->cq));
	CHECK_OK(tf_pd_destroy(s->pd));
	tf_context_close(s->ctx);
}

void tf_test_buf_free(struct tf_test_buf *b)
{
	if (!b->base)
		return;
	if (b->mr)
		CHECK_OK(tf_mr_dereg(b->mr));
	b->mr = NULL;
	switch (b->kind) {
	case TF_MEM_LIB:
		tf_mem_free(b->ctx, b->base, b->base_len);
		break;
	case TF_MEM_MALLOC:
		free(b->base);
		break;
	case TF_MEM_MMAP:
		munmap(b->base, b->base_len);
		break;
	default:
		break;
	}
	b->base = NULL;
	b->addr = NULL;
}

void tf_test_send_buf(struct tf_pair *p, const struct tf_test_buf *b)
{
	tf_test_send_rbuf(p, (uintptr_t)b->addr, b->len, tf_mr_rkey(b->mr));
}

uint8_t tf_test_pattern(size_t i, uint32_t seed)
{
	uint32_t x = (uint32_t)(i / 4) * 0x9e3779b1u ^ (seed * 0x85ebca77u + 1);

	x ^= x >> 15;
	x *= 0x2c1b3c6du;
	x ^= x >> 12;
	x *= 0x297a2d39u;
	x ^= x >> 15;
	return (uint8_t)(x >> (8 * (i % 4)));
}

void tf_test_fill(void *buf, size_t len, uint32_t seed)
{
	uint8_t *b = buf;

	for (size_t i = 0; i < len; i++)
		b[i] = tf_test_pattern(i, seed);
}

size_t tf_test_check_fill(const void *buf, size_t len, uint32_t seed)
{
	const uint8_t *b = buf;

	for (size_t i = 0; i < len; i++)
		if (b[i] != tf_test_pattern(i, seed))
			return i;
	return (size_t)-1;
}

/* --------------------------------------------------- posting and waiting */

void tf_test_post_send(const char *file, int line, tf_qp_t *qp,
		       struct tf_send_wr *wr)
{
	struct tf_send_wr *bad = NULL;
	int ret = tf_post_send(qp, wr, &bad);

	if (ret)
		tf_test_fail(file, line,
			     "tf_post_send = %d (%s), first WR not posted: "
			     "wr_id %llu",
			     ret, tf_strerror(ret),
			     bad ? (unsigned long long)bad->wr_id : 0ull);
}

void tf_test_post_recv(const char *file, int line, tf_qp_t *qp,
		       struct tf_recv_wr *wr)
{
	struct tf_recv_wr *bad = NULL;
	int ret = tf_post_recv(qp, wr, &bad);

	if (ret)
		tf_test_fail(file, line,
			     "tf_post_recv = %d (%s), first WR not posted: "
			     "wr_id %llu",
			     ret, tf_strerror(ret),
			     bad ? (unsigned long long)bad->wr_id : 0ull);
}

void tf_test_post_recv1(tf_qp_t *qp, uint64_t wr_id, void *addr, uint32_t len,
			uint32_t lkey)
{
	struct tf_sge sge = {
		.addr = (uintptr_t)addr, .length = len, .lkey = lkey};
	struct tf_recv_wr wr = {
		.wr_id = wr_id, .sg_list = &sge, .num_sge = len ? 1 : 0};

	POST_RECV(qp, &wr);
}

const char *tf_test_wc_str(const struct tf_wc *wc)
{
	static char buf[256];

	snprintf(buf, sizeof(buf),
		 "wc{wr_id %llu, status %d (%s), opcode %d, byte_len %u, "
		 "imm 0x%x, inv_rkey 0x%x, flags 0x%x, vendor_err %u, qp %p}",
		 (unsigned long long)wc->wr_id, (int)wc->status,
		 tf_wc_status_str(wc->status), (int)wc->opcode, wc->byte_len,
		 wc->imm_data, wc->invalidated_rkey, wc->flags, wc->vendor_err,
		 (void *)wc->qp);
	return buf;
}

void tf_test_wait_wc(const char *file, int line, struct tf_pair *p, tf_cq_t *cq,
		     struct tf_wc *wc, int timeout_ms)
{
	uint64_t deadline;

	(void)p;
	if (timeout_ms <= 0)
		timeout_ms = tf_test_timeout_ms();
	deadline = now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		int n = tf_cq_wait(cq, 1, wc, 100);

		if (n < 0)
			tf_test_fail(file, line, "tf_cq_wait = %d (%s)", n,
				     tf_strerror(n));
		if (n == 1)
			return;
		if (n != 0)
			tf_test_fail(file, line, "tf_cq_wait(n=1) returned %d",
				     n);
		if (now_ms() > deadline)
			tf_test_fail(file, line, "no completion within %d ms",
				     timeout_ms);
	}
}

void tf_test_expect_wc(const char *file, int line, struct tf_pair *p,
		       tf_cq_t *cq, uint64_t wr_id, enum tf_wc_status status,
		       int opcode, struct tf_wc *wc)
{
	struct tf_wc tmp;

	if (!wc)
		wc = &tmp;
	tf_test_wait_wc(file, line, p, cq, wc, 0);
	if (wc->wr_id != wr_id || wc->status != status ||
	    (opcode >= 0 && (int)wc->opcode != opcode))
		tf_test_fail(file, line,
			     "got %s; expected wr_id %llu status %d (%s) "
			     "opcode %d",
			     tf_test_wc_str(wc), (unsigned long long)wr_id,
			     (int)status, tf_wc_status_str(status), opcode);
}

void tf_test_expect_cq_empty(const char *file, int line, struct tf_pair *p,
			     tf_cq_t *cq, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;
	struct tf_wc wc;

	(void)p;
	do {
		int n = tf_cq_wait(cq, 1, &wc, 10);

		if (n < 0)
			tf_test_fail(file, line, "tf_cq_wait = %d (%s)", n,
				     tf_strerror(n));
		if (n > 0)
			tf_test_fail(file, line, "unexpected completion %s",
				     tf_test_wc_str(&wc));
	} while (now_ms() < end);
}

void tf_test_progress_for(struct tf_pair *p, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;

	do {
		if (p->ctx)
			tf_context_progress(p->ctx);
		poll(NULL, 0, 1);
	} while (now_ms() < end);
}

void tf_test_require_caps(struct tf_pair *p, uint64_t flags, const char *what)
{
	if ((p->caps.flags & flags) != flags)
		tf_test_skip("provider %s lacks %s (caps 0x%llx)",
			     p->caps.provider, what,
			     (unsigned long long)p->caps.flags);
}

bool tf_test_private_netns(void)
{
	struct ifreq ifr = {0};
	bool ok = false;
	int fd;

	if (unshare(CLONE_NEWNET))
		return false;
	/* A new namespace has loopback, but down. */
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (!ioctl(fd, SIOCGIFFLAGS, &ifr)) {
		ifr.ifr_flags |= IFF_UP;
		ok = !ioctl(fd, SIOCSIFFLAGS, &ifr);
	}
	close(fd);
	return ok;
}

bool tf_test_quirk(struct tf_pair *p, enum tf_test_quirk q, const char *what)
{
	static const char *const names[] = {
		[TF_QUIRK_RXE_LEN_ERR] = "rxe: receive too small reported as "
					 "LOC_QP_OP_ERR/REM_OP_ERR",
		[TF_QUIRK_RXE_LKEY_ERR] = "rxe: invalid lkey reported as "
					  "LOC_QP_OP_ERR",
		[TF_QUIRK_RXE_MW_RANGE] = "rxe: window range not enforced, "
					  "only its region's",
		[TF_QUIRK_RXE_BIND_MR_PD] = "rxe: bind over a region of "
					    "another PD accepted",
		[TF_QUIRK_SIW_READ_ORDER] = "siw: a READ completes after WRs "
					    "posted behind it",
		[TF_QUIRK_SIW_LKEY_ERR] = "siw: invalid lkey reported as "
					  "LOC_QP_OP_ERR",
	};
	/* The driver is the name's first three letters ("rxe", "siw"). */
	const char *drv = q >= TF_QUIRK_SIW_READ_ORDER ? "siw" : "rxe";
	const char *env = getenv("TOLLFREE_TEST_QUIRKS");
	bool on;

	if (env && !strcmp(env, "none"))
		on = false;
	else if (env && (!strcmp(env, "rxe") || !strcmp(env, "siw")))
		on = !strcmp(env, drv);
	else
		on = !strcmp(p->caps.provider, "verbs") &&
		     !strncmp(p->caps.device, drv, 3);
	if (on)
		tf_test_info("known kernel deviation tolerated (%s): %s", what,
			     names[q]);
	return on;
}
