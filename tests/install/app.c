/* SPDX-License-Identifier: MIT */
/*
 * app - a program outside the tree, built against an installed tollfree
 * by scripts/install-check.sh, once with pkg-config and once with
 * find_package(tollfree).  It checks that the headers and the library it
 * runs with agree, opens a context on the soft provider and prints what it
 * found.
 *
 * Build: cc -o app app.c $(pkg-config --cflags --libs tollfree)
 */
#include <stdio.h>

#include <tollfree/tollfree.h>

int main(void)
{
	tf_context_params_t p = {.field_mask = TF_CONTEXT_PARAM_PROVIDER,
				 .provider = "soft"};
	tf_context_t *ctx = NULL;
	int ret;

	if (tf_version() != TOLLFREE_VERSION) {
		fprintf(stderr, "app: headers %d.%d.%d, library %s\n",
			TOLLFREE_VERSION_MAJOR, TOLLFREE_VERSION_MINOR,
			TOLLFREE_VERSION_PATCH, tf_version_string());
		return 1;
	}
	ret = tf_context_open(&p, &ctx);
	if (ret) {
		fprintf(stderr, "app: %s\n", tf_strerror(ret));
		return 1;
	}
	printf("app: tollfree %s, provider %s\n", tf_version_string(),
	       tf_context_provider(ctx));
	tf_context_close(ctx);
	return 0;
}
