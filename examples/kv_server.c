/* SPDX-License-Identifier: MIT */
/*
 * kv_server - a tiny key-value server where every GET is a short session.
 *
 * Build: cc -pthread -o kv_server kv_server.c \
 *            $(pkg-config --cflags --libs tollfree)
 * Usage: kv_server [-a ADDR] [-p PORT] [-n GETS] [-P PORTFILE] [-b BYTES]
 *                  [-t THREADS] KEY=VALUE...
 *
 * A client opens a session whose connect data is the key.  The server
 * attaches the value to the session (a copy into a pool slice for small
 * values, the registration cache for large ones: TOLLFREE_REG_MODE),
 * exposes it read-only and establishes the session; the client READs the
 * value one-sidedly and closes.  Closing revokes the client's key before
 * the memory is reused.  An unknown key gets a session with no exposure.
 * With -n the server exits after that many sessions (for tests); -P
 * writes the bound port to a file once it listens; -b adds the key "big"
 * with BYTES of 'x' (large enough for the registration cache).
 *
 * With -t T the server runs T threads on one node, each with its own
 * listener on the same port (TF_LISTENER_REUSEPORT): the kernel spreads
 * new connections over them, a kept connection stays with the thread
 * that accepted it, and each thread serves the sessions its listener
 * returned.  A node may be used from any thread; a listener and the
 * sessions it returned are used by one thread (tollfree(7), THREAD
 * SAFETY).  -n then counts the sessions of all threads.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tollfree/tollfree.h>

struct kv {
	const char *key;
	char *value;
	size_t len;
};

static int serve(tf_session_t *s, struct kv *kv, int n_kv)
{
	const char *key;
	size_t klen;
	int buf, exp, ret;

	key = tf_session_peer_priv(s, &klen);
	for (int i = 0; key && i < n_kv; i++) {
		if (strlen(kv[i].key) != klen || memcmp(kv[i].key, key, klen))
			continue;
		/* TF_ATTACH_IN: the value is only read by the peer. */
		ret = tf_session_attach(s, kv[i].value, kv[i].len, TF_ATTACH_IN,
					&buf);
		if (!ret)
			ret = tf_session_expose(s, buf, 0, kv[i].len,
						TF_ACCESS_REMOTE_READ, &exp);
		if (ret)
			return ret;
		break;
	}
	ret = tf_session_establish(s);
	if (ret)
		return ret;
	/* Serve until the client closes: its READ may need this side's
	 * progress (software provider over tcp). */
	for (;;) {
		struct tf_wc wc[4];
		int st;

		ret = tf_session_wait(s, 4, wc, 100);
		if (ret < 0)
			return ret;
		st = tf_session_state(s);
		if (st == TF_SESSION_PEER_CLOSED || st == TF_SESSION_BROKEN)
			return 0;
	}
}

/* One serving thread: its listener and the sessions it accepts. */
struct shard {
	tf_listener_t *l;
	pthread_t thr;
	struct kv *kv;
	int n_kv;
	long served;
	int ret;
};

/* Sessions left to serve (-n), over all threads; -1: no end. */
static atomic_long gets_left = -1;

/* Count a session against -n: never below 0, which ends every thread
 * (-1, no end, must not be reached by two threads taking the last). */
static void served_one(void)
{
	long v = atomic_load(&gets_left);

	while (v > 0 && !atomic_compare_exchange_weak(&gets_left, &v, v - 1))
		;
}

static void *shard_main(void *arg)
{
	tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_FLAGS,
				  .flags = TF_SESSION_DEFER_ESTABLISH};
	struct shard *sh = arg;

	while (atomic_load(&gets_left) != 0) {
		tf_session_t *s;
		int ret;

		/* With -n, wake up now and then to see whether the other
		 * threads served the last sessions. */
		ret = tf_listener_accept(
			sh->l, &sp, atomic_load(&gets_left) < 0 ? -1 : 100, &s);
		if (ret == -EAGAIN)
			continue;
		if (ret) {
			fprintf(stderr, "kv_server: accept: %s\n",
				tf_strerror(ret));
			sh->ret = ret;
			break;
		}
		ret = serve(s, sh->kv, sh->n_kv);
		if (ret)
			fprintf(stderr, "kv_server: session: %s\n",
				tf_strerror(ret));
		tf_session_close(s);
		sh->served++;
		served_one();
	}
	return NULL;
}

int main(int argc, char **argv)
{
	tf_listener_params_t lp = {.field_mask = TF_LISTENER_PARAM_ADDR |
						 TF_LISTENER_PARAM_PORT,
				   .addr = "127.0.0.1"};
	const char *portfile = NULL;
	tf_context_t *ctx = NULL;
	tf_node_t *node = NULL;
	struct shard *sh = NULL;
	struct kv *kv;
	long gets = -1, big = 0;
	int opt, n_kv = 0, n_thr = 1, started = 0, ret;

	while ((opt = getopt(argc, argv, "a:p:n:P:b:t:")) != -1) {
		switch (opt) {
		case 'a':
			lp.addr = optarg;
			break;
		case 'p':
			lp.port = (uint16_t)atoi(optarg);
			break;
		case 'n':
			gets = atol(optarg);
			break;
		case 'P':
			portfile = optarg;
			break;
		case 'b':
			big = atol(optarg);
			break;
		case 't':
			n_thr = atoi(optarg);
			break;
		default:
			fprintf(stderr,
				"usage: %s [-a ADDR] [-p PORT] [-n GETS] "
				"[-P PORTFILE] [-b BYTES] [-t THREADS] "
				"KEY=VALUE...\n",
				argv[0]);
			return 2;
		}
	}
	if (n_thr < 1 || n_thr > 256) {
		fprintf(stderr, "kv_server: -t takes 1 to 256 threads\n");
		return 2;
	}
	kv = calloc((size_t)(argc - optind) + 1, sizeof(*kv));
	if (!kv)
		return 1;
	if (big > 0) {
		kv[0].key = "big";
		kv[0].len = (size_t)big;
		kv[0].value = malloc(kv[0].len);
		if (!kv[0].value)
			return 1;
		memset(kv[0].value, 'x', kv[0].len);
		n_kv++;
	}
	for (int i = optind; i < argc; i++) {
		char *eq = strchr(argv[i], '=');

		if (!eq || eq == argv[i] || !eq[1]) {
			fprintf(stderr, "bad pair %s (KEY=VALUE)\n", argv[i]);
			return 2;
		}
		*eq = 0;
		kv[n_kv].key = argv[i];
		kv[n_kv].value = eq + 1;
		kv[n_kv].len = strlen(eq + 1);
		n_kv++;
	}

	sh = calloc((size_t)n_thr, sizeof(*sh));
	if (!sh)
		return 1;
	atomic_store(&gets_left, gets < 0 ? -1 : gets);
	ret = tf_context_open(NULL, &ctx);
	if (!ret)
		ret = tf_node_create(ctx, NULL, &node);
	/* One listener per thread, all on the port of the first. */
	if (n_thr > 1) {
		lp.field_mask |= TF_LISTENER_PARAM_FLAGS;
		lp.flags = TF_LISTENER_REUSEPORT;
	}
	for (int i = 0; !ret && i < n_thr; i++) {
		ret = tf_listener_create(node, &lp, &sh[i].l);
		if (!ret)
			lp.port = tf_listener_port(sh[i].l);
		sh[i].kv = kv;
		sh[i].n_kv = n_kv;
	}
	if (ret) {
		fprintf(stderr, "kv_server: %s\n", tf_strerror(ret));
		goto out;
	}
	printf("kv_server: %d keys, listening on %s port %u (%s, %d "
	       "thread%s)\n",
	       n_kv, lp.addr, lp.port, tf_context_provider(ctx), n_thr,
	       n_thr > 1 ? "s" : "");
	fflush(stdout);
	if (portfile) {
		FILE *f = fopen(portfile, "w");

		if (!f || fprintf(f, "%u\n", lp.port) < 0 || fclose(f)) {
			perror(portfile);
			ret = -EIO;
			goto out;
		}
	}
	for (; started < n_thr; started++) {
		ret = -pthread_create(&sh[started].thr, NULL, shard_main,
				      &sh[started]);
		if (ret) {
			fprintf(stderr, "kv_server: thread: %s\n",
				tf_strerror(ret));
			/* The threads already started end with -n only. */
			atomic_store(&gets_left, 0);
			break;
		}
	}
	for (int i = 0; i < started; i++) {
		pthread_join(sh[i].thr, NULL);
		if (sh[i].ret && !ret)
			ret = sh[i].ret;
		if (n_thr > 1)
			printf("kv_server: thread %d served %ld sessions\n", i,
			       sh[i].served);
	}
out:
	for (int i = 0; sh && i < n_thr; i++)
		tf_listener_destroy(sh[i].l);
	free(sh);
	tf_node_destroy(node);
	tf_context_close(ctx);
	if (big > 0)
		free(kv[0].value);
	free(kv);
	return ret ? 1 : 0;
}
