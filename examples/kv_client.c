/* SPDX-License-Identifier: MIT */
/*
 * kv_client - GET keys from kv_server, one short session per GET.
 *
 * Build: cc -o kv_client kv_client.c $(pkg-config --cflags --libs tollfree)
 * Usage: kv_client HOST PORT KEY...
 *
 * For each key: connect (the key travels as connect data), READ the value
 * the server exposed straight from its memory, close.  Prints KEY=VALUE,
 * or KEY: not found (exit status 3 if any key was missing).  Sessions to
 * the same server reuse the connection (QP) of the previous one, with
 * fresh keys each time.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tollfree/tollfree.h>

static int get(tf_node_t *node, const char *host, uint16_t port,
	       const char *key)
{
	tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_PRIV,
				  .priv = key,
				  .priv_len = strlen(key)};
	tf_exposure_info_t e;
	tf_session_t *s;
	struct tf_wc wc;
	char *val;
	int buf, ret;

	ret = tf_session_connect(node, host, port, &sp, &s);
	if (ret)
		return ret;
	if (tf_session_peer_count(s) < 1) {
		printf("%s: not found\n", key);
		ret = 3;
		goto out;
	}
	tf_session_peer_exposure(s, 0, &e);
	ret = tf_session_rent(s, e.length + 1, &buf, (void **)&val);
	if (!ret)
		ret = tf_session_read(s, buf, 0, 0, 0, (uint32_t)e.length, 1);
	if (!ret) {
		ret = tf_session_wait(s, 1, &wc, 5000);
		if (ret == 1 && wc.status == TF_WC_SUCCESS)
			ret = 0;
		else if (ret >= 0)
			ret = -EIO;
	}
	if (!ret) {
		val[e.length] = 0;
		printf("%s=%s\n", key, val);
	}
out:
	tf_session_close(s);
	return ret;
}

int main(int argc, char **argv)
{
	tf_context_t *ctx = NULL;
	tf_node_t *node = NULL;
	int ret, status = 0;

	if (argc < 4) {
		fprintf(stderr, "usage: %s HOST PORT KEY...\n", argv[0]);
		return 2;
	}
	ret = tf_context_open(NULL, &ctx);
	if (!ret)
		ret = tf_node_create(ctx, NULL, &node);
	for (int i = 3; !ret && i < argc; i++) {
		ret = get(node, argv[1], (uint16_t)atoi(argv[2]), argv[i]);
		if (ret == 3)
			status = 3, ret = 0;
	}
	if (ret) {
		fprintf(stderr, "kv_client: %s\n", tf_strerror(ret));
		status = 1;
	}
	tf_node_destroy(node);
	tf_context_close(ctx);
	return status;
}
