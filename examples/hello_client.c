/* SPDX-License-Identifier: MIT */
/* hello_client - one short session: connect, WRITE a greeting, close.
 * Build: cc -o hello_client hello_client.c $(pkg-config --cflags --libs tollfree)
 * Usage: hello_client HOST PORT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tollfree/tollfree.h>

#define TRY(_call)                   \
	do {                         \
		if ((ret = (_call))) \
			goto out;    \
	} while (0)

int main(int argc, char **argv)
{
	tf_context_t *ctx = NULL;
	tf_node_t *node = NULL;
	tf_session_t *s = NULL;
	struct tf_wc wc;
	char *msg;
	int buf, ret;

	if (argc != 3) {
		fprintf(stderr, "usage: %s HOST PORT\n", argv[0]);
		return 2;
	}
	TRY(tf_context_open(NULL, &ctx));
	TRY(tf_node_create(ctx, NULL, &node));
	/* The server's exposure 0 (address, length, key) comes with it. */
	TRY(tf_session_connect(node, argv[1], atoi(argv[2]), NULL, &s));
	TRY(tf_session_rent(s, 64, &buf, (void **)&msg));
	snprintf(msg, 64, "hello, tollfree");
	/* RDMA WRITE from our slice (offset 0) to exposure 0 (offset 0). */
	TRY(tf_session_write(s, buf, 0, 0, 0, strlen(msg) + 1, 1));
	if (tf_session_wait(s, 1, &wc, 5000) != 1 || wc.status != TF_WC_SUCCESS)
		TRY(-EIO);
	printf("wrote: %s\n", msg);
out:
	if (ret)
		fprintf(stderr, "hello_client: %s\n", tf_strerror(ret));
	tf_session_close(s); /* revokes our keys, then tells the server */
	tf_node_destroy(node);
	tf_context_close(ctx);
	return ret ? 1 : 0;
}
