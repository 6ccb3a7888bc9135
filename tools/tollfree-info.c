/* SPDX-License-Identifier: MIT */
/*
 * tollfree-info - what the library has been built with and how it is
 * configured (see tollfree-info(1)).
 *
 *   tollfree-info [-d]              providers, devices and capabilities
 *   tollfree-info -c [--man] [--component C]
 *                                   configuration variables
 *   tollfree-info -s [--json] [--wait MS] [PID|FILE]
 *                                   statistics of running processes
 *                                   (TOLLFREE_STATS_PUBLISH=y) or of a
 *                                   dump (TOLLFREE_STATS=file:FILE)
 *   tollfree-info -v                version
 *
 * "-c --man" prints the variables as a man(7) RUNTIME PARAMETERS section:
 * the man pages are generated from it, so the documented defaults are the
 * defaults the code parses (hand-copied defaults drift).
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <tollfree/tollfree.h>

#include "info.h"

#define ARRAY_SIZE(_a) (sizeof(_a) / sizeof((_a)[0]))

/* ------------------------------------------------------------ -d */

#define MAX_PROVIDERS 16

struct provider_list {
	unsigned n;
	struct {
		char name[16];
		int available;
	} p[MAX_PROVIDERS];
};

static void collect_provider(const char *name, int available, void *arg)
{
	struct provider_list *l = arg;

	if (l->n == MAX_PROVIDERS)
		return;
	snprintf(l->p[l->n].name, sizeof(l->p[l->n].name), "%s", name);
	l->p[l->n].available = available;
	l->n++;
}

static const struct {
	uint64_t flag;
	const char *name;
} cap_names[] = {
	{TF_CAP_MW_TYPE2, "mw_type2"},
	{TF_CAP_ATOMIC, "atomic"},
	{TF_CAP_SEND_WITH_INV, "send_with_inv"},
	{TF_CAP_ODP, "odp"},
	{TF_CAP_REREG, "rereg"},
	{TF_CAP_MEM_ALLOC, "mem_alloc"},
	{TF_CAP_CQ_FD, "cq_fd"},
	{TF_CAP_INLINE, "inline"},
	{TF_CAP_IMM_DATA, "imm_data"},
	{TF_CAP_RDMA_CM, "rdma_cm"},
	{TF_CAP_REMOTE_ACK, "remote_ack"},
	{TF_CAP_AUTO_PROGRESS, "auto_progress"},
	{TF_CAP_QP_RESET, "qp_reset"},
	{TF_CAP_CONNECT_CMD, "connect_cmd"},
};

/*
 * The soft provider's "auto" picks a transport per peer when a QP connects
 * (caps say "auto" until then, "auto:shm" and so on after).  Connect a
 * loopback pair of QPs, a peer on this host, so that the caps show what
 * auto chooses here.  Returns 0 or a negative error code.
 */
static int probe_auto_transport(tf_context_t *ctx)
{
	tf_qp_params_t qp = {0};
	tf_pd_t *pd = NULL;
	tf_cq_t *cq = NULL;
	tf_qp_t *a = NULL, *b = NULL;
	uint8_t addr_a[TF_QP_ADDR_MAX], addr_b[TF_QP_ADDR_MAX];
	size_t len_a = sizeof(addr_a), len_b = sizeof(addr_b);
	int ret;

	ret = tf_pd_create(ctx, &pd);
	if (!ret)
		ret = tf_cq_create(ctx, NULL, &cq);
	qp.send_cq = cq;
	qp.recv_cq = cq;
	if (!ret)
		ret = tf_qp_create(pd, &qp, &a);
	if (!ret)
		ret = tf_qp_create(pd, &qp, &b);
	if (!ret)
		ret = tf_qp_get_addr(a, addr_a, &len_a);
	if (!ret)
		ret = tf_qp_get_addr(b, addr_b, &len_b);
	if (!ret)
		ret = tf_qp_connect(a, addr_b, len_b);
	if (!ret)
		ret = tf_qp_connect(b, addr_a, len_a);
	tf_qp_destroy(b);
	tf_qp_destroy(a);
	tf_cq_destroy(cq);
	tf_pd_destroy(pd);
	return ret;
}

static void print_caps(const tf_caps_t *c, int probe_ret)
{
	uint64_t known = 0;
	size_t i;

	printf("    device:          %s\n", c->device);
	if (probe_ret)
		printf("    transport:       %s (choice for a peer on this "
		       "host unknown: %s)\n",
		       c->transport, tf_strerror(probe_ret));
	else if (!strncmp(c->transport, "auto:", 5))
		printf("    transport:       %s (chosen for a peer on this "
		       "host; tcp to other hosts)\n",
		       c->transport);
	else
		printf("    transport:       %s\n", c->transport);
	printf("    flags:          ");
	for (i = 0; i < ARRAY_SIZE(cap_names); i++) {
		known |= cap_names[i].flag;
		if (c->flags & cap_names[i].flag)
			printf(" %s", cap_names[i].name);
	}
	if (c->flags & ~known)
		printf(" 0x%" PRIx64, c->flags & ~known);
	if (!c->flags)
		printf(" (none)");
	printf("\n");
	printf("    max_mr_size:     %" PRIu64 "\n", c->max_mr_size);
	printf("    max_mr:          %u\n", c->max_mr);
	printf("    max_mw:          %u\n", c->max_mw);
	printf("    max_qp:          %u\n", c->max_qp);
	printf("    max_qp_wr:       %u\n", c->max_qp_wr);
	printf("    max_cqe:         %u\n", c->max_cqe);
	printf("    max_sge:         %u\n", c->max_sge);
	printf("    max_inline_data: %u\n", c->max_inline_data);
	printf("    max_msg_size:    %u\n", c->max_msg_size);
}

static int show_devices(void)
{
	struct provider_list l;
	unsigned i;
	int failures = 0;

	memset(&l, 0, sizeof(l));
	tf_provider_foreach(collect_provider, &l);
	printf("tollfree %s: %u provider%s built in\n", tf_version_string(),
	       l.n, l.n == 1 ? "" : "s");
	for (i = 0; i < l.n; i++) {
		tf_context_params_t p = {
			.field_mask = TF_CONTEXT_PARAM_PROVIDER,
			.provider = l.p[i].name,
		};
		tf_context_t *ctx;
		tf_caps_t caps;
		int ret, probe = 0;

		printf("provider %s: ", l.p[i].name);
		if (l.p[i].available < 0) {
			printf("probe failed: %s\n",
			       tf_strerror(l.p[i].available));
			continue;
		}
		if (!l.p[i].available) {
			printf("no device\n");
			continue;
		}
		ret = tf_context_open(&p, &ctx);
		if (ret) {
			printf("available, but opening it failed: %s\n",
			       tf_strerror(ret));
			failures++;
			continue;
		}
		memset(&caps, 0, sizeof(caps));
		ret = tf_context_query_caps(ctx, &caps);
		if (!ret && !strcmp(caps.transport, "auto")) {
			probe = probe_auto_transport(ctx);
			if (!probe)
				ret = tf_context_query_caps(ctx, &caps);
		}
		if (ret) {
			printf("available, but querying it failed: %s\n",
			       tf_strerror(ret));
			failures++;
		} else {
			printf("available\n");
			print_caps(&caps, probe);
		}
		tf_context_close(ctx);
	}
	return failures ? 1 : 0;
}

/* ------------------------------------------------------------ -c */

struct config_walk {
	const char *component; /* filter, or NULL */
	bool man;
	unsigned shown;
};

/* Write @s for nroff: backslashes are escaped and a leading '.' or '\''
 * would be read as a request. */
static void nroff_str(const char *s)
{
	if (*s == '.' || *s == '\'')
		fputs("\\&", stdout);
	for (; *s; s++) {
		if (*s == '\\')
			fputs("\\e", stdout);
		else if (*s == '-')
			fputs("\\-", stdout);
		else if (*s == '\n')
			fputc(' ', stdout);
		else
			fputc(*s, stdout);
	}
}

static void show_var(const char *name, const char *deflt, const char *value,
		     const char *component, const char *help, void *arg)
{
	struct config_walk *w = arg;
	const char *env;

	if (w->component && strcmp(w->component, component))
		return;
	w->shown++;
	if (w->man) {
		fputs(".TP\n.B ", stdout);
		nroff_str(name);
		fputs("\n", stdout);
		nroff_str(help);
		fputs(".\nDefault: ", stdout);
		if (*deflt) {
			fputs("\\fB", stdout);
			nroff_str(deflt);
			fputs("\\fR", stdout);
		} else {
			fputs("empty", stdout);
		}
		fputs(".\n", stdout);
		return;
	}
	printf("%s\n", name);
	printf("    component: %s\n", component);
	printf("    default:   %s\n", *deflt ? deflt : "(empty)");
	env = getenv(name);
	if (env && tf_config_check(name, env))
		/* The library took the default (or, for a security
		 * setting, refuses to create a node); the bad value itself
		 * is not echoed: it may be a key. */
		printf("    value:     INVALID in the environment (%zu "
		       "bytes); in effect: %s\n",
		       strlen(env), *value ? value : "(empty)");
	else
		printf("    value:     %s%s\n", *value ? value : "(empty)",
		       strcmp(value, deflt) ? "   (from the environment)" : "");
	printf("    %s\n", help);
}

static int show_config(const char *component, bool man)
{
	struct config_walk w = {.component = component, .man = man};

	if (man) {
		fputs(".SH \"RUNTIME PARAMETERS\"\n", stdout);
		fputs("The library reads these environment variables once, "
		      "when the first context is opened;\n"
		      "values passed through the API take precedence.\n"
		      "Sizes accept K, M and G suffixes and \\fBinf\\fR; "
		      "booleans accept y/n, yes/no, 1/0 and on/off.\n",
		      stdout);
	}
	tf_config_foreach(show_var, &w);
	if (component && !w.shown) {
		fprintf(stderr,
			"tollfree-info: no variable of component "
			"'%s'\n",
			component);
		return 1;
	}
	return 0;
}

/* ------------------------------------------------------------ main */

static void usage(FILE *f)
{
	fprintf(f, "usage: tollfree-info [-d]        providers, devices and "
		   "capabilities (default)\n"
		   "       tollfree-info -c [--man] [--component C]\n"
		   "                                configuration variables "
		   "(--man: as nroff)\n"
		   "       tollfree-info -s [--json] [--wait MS] [PID|FILE]\n"
		   "                                statistics of running "
		   "processes or of a dump\n"
		   "       tollfree-info -v        version\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"devices", no_argument, NULL, 'd'},
		{"config", no_argument, NULL, 'c'},
		{"man", no_argument, NULL, 'm'},
		{"component", required_argument, NULL, 'C'},
		{"stats", no_argument, NULL, 's'},
		{"json", no_argument, NULL, 'j'},
		{"wait", required_argument, NULL, 'w'},
		{"version", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *component = NULL;
	bool devices = false, config = false, man = false, version = false;
	bool stats = false, json = false, wait_set = false;
	int c, wait_ms = 200;
	char *end;

	while ((c = getopt_long(argc, argv, "dcsvh", opts, NULL)) != -1) {
		switch (c) {
		case 'd':
			devices = true;
			break;
		case 'c':
			config = true;
			break;
		case 'm':
			man = true;
			break;
		case 'C':
			component = optarg;
			break;
		case 's':
			stats = true;
			break;
		case 'j':
			json = true;
			break;
		case 'w':
			errno = 0;
			wait_ms = (int)strtol(optarg, &end, 10);
			if (errno || *end || wait_ms < 0 || wait_ms > 60000) {
				fprintf(stderr,
					"tollfree-info: --wait takes 0 to "
					"60000 ms\n");
				return 2;
			}
			wait_set = true;
			break;
		case 'v':
			version = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	/* -s takes one optional operand; nothing else takes any. */
	if (optind < argc - (stats ? 1 : 0) ||
	    ((man || component) && !config) || ((json || wait_set) && !stats) ||
	    devices + config + version + stats > 1) {
		usage(stderr);
		return 2;
	}
	if (stats)
		return info_show_stats(optind < argc ? argv[optind] : NULL,
				       json, wait_ms);
	if (version) {
		/* Both: a program built against one version may run with a
		 * newer library. */
		printf("tollfree-info %d.%d.%d, library %s\n",
		       TOLLFREE_VERSION_MAJOR, TOLLFREE_VERSION_MINOR,
		       TOLLFREE_VERSION_PATCH, tf_version_string());
		return 0;
	}
	if (config)
		return show_config(component, man);
	return show_devices();
}
