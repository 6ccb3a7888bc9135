/* SPDX-License-Identifier: MIT */
/* hello_server - accept one session and let the client WRITE into it.
 * Build: cc -o hello_server hello_server.c $(pkg-config --cflags --libs tollfree)
 * Usage: hello_server [PORT]    (default 0: an ephemeral port, printed) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <tollfree/tollfree.h>

#define TRY(_call)                   \
	do {                         \
		if ((ret = (_call))) \
			goto out;    \
	} while (0)

int main(int argc, char **argv)
{
	tf_listener_params_t lp = {.field_mask = TF_LISTENER_PARAM_PORT,
				   .port = argc > 1 ? atoi(argv[1]) : 0};
	tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_FLAGS,
				  .flags = TF_SESSION_DEFER_ESTABLISH};
	tf_context_t *ctx = NULL;
	tf_node_t *node = NULL;
	tf_listener_t *l = NULL;
	tf_session_t *s = NULL;
	struct tf_wc wc;
	char *msg;
	int buf, exp, ret;

	TRY(tf_context_open(NULL, &ctx)); /* TOLLFREE_PROVIDER, default auto */
	TRY(tf_node_create(ctx, NULL, &node));
	TRY(tf_listener_create(node, &lp, &l)); /* on 127.0.0.1 */
	printf("listening on port %u\n", tf_listener_port(l));
	fflush(stdout);
	TRY(tf_listener_accept(l, &sp, -1, &s));
	/* 64 bytes of the node's registered pool, and a key to them for
	 * this client only: it travels in the ACCEPT. */
	TRY(tf_session_rent(s, 64, &buf, (void **)&msg));
	msg[0] = 0;
	TRY(tf_session_expose(s, buf, 0, 64, TF_ACCESS_REMOTE_WRITE, &exp));
	TRY(tf_session_establish(s));
	/* Serve until the client closes: over tcp its WRITE needs us. */
	while (tf_session_state(s) == TF_SESSION_OPEN)
		tf_session_wait(s, 1, &wc, 100);
	TRY(tf_session_state(s) == TF_SESSION_PEER_CLOSED ? 0 : -ECONNRESET);
	printf("received: %.63s\n", msg);
out:
	if (ret)
		fprintf(stderr, "hello_server: %s\n", tf_strerror(ret));
	tf_session_close(s); /* revokes the key before the slice is reused */
	tf_listener_destroy(l);
	tf_node_destroy(node);
	tf_context_close(ctx);
	return ret ? 1 : 0;
}
