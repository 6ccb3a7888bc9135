/* SPDX-License-Identifier: MIT */
/*
 * session_psk_env: security settings fail closed, and secrets are never
 * shown.  Each case runs in a child process (the environment is read once
 * per process):
 *   1. a 300-byte TOLLFREE_SESSION_PSK: node creation fails (-EINVAL)
 *      instead of running without authentication, and nothing logged
 *      contains the key;
 *   2. a 200-byte key (the documented limit is 256): accepted, auth on;
 *   3. TOLLFREE_SESSION_PSK_FILE readable by others (0644): refused
 *      (-EACCES); 4. the same file at 0600: accepted, auth on;
 *   5. a malformed value (TOLLFREE_POOL_MAX=abc): the first library call
 *      returns (it used to deadlock in the logger) and the default is
 *      used;
 *   6. tollfree-info -c with a key set shows "(set)", never the key, and
 *      flags the malformed value as INVALID.
 * Before: case 1 created a node without authentication and logged the key
 * in clear; case 5 hung; case 6 printed the key.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tf_test_unit.h"

static char key300[301], key200[201];
static bool leaked;

static void watch_log(tf_log_level_t level, const char *subsys, const char *msg,
		      void *arg)
{
	(void)level;
	(void)subsys;
	(void)arg;
	if (strstr(msg, "kkkkkkkk"))
		leaked = true;
}

/* In a child: set @name=@value, create a node; exit with 0 if it failed
 * with @want_err (or succeeded with auth on when @want_err is 0), 1 if
 * not, 2 if a key leaked into the log. */
static int child(const char *name, const char *value, int want_err)
{
	pid_t pid = fork();
	int st;

	CHECK(pid >= 0);
	if (pid == 0) {
		tf_context_t *ctx;
		tf_node_t *node;
		tf_node_stats_t ns;
		int ret;

		alarm(30);
		setenv(name, value, 1);
		tf_log_set_handler(watch_log, NULL);
		if (tf_context_open(NULL, &ctx))
			_exit(1);
		ret = tf_node_create(ctx, NULL, &node);
		if (leaked)
			_exit(2);
		if (want_err) {
			if (ret != want_err) {
				fprintf(stderr,
					"%s: node create returned %d, "
					"expected %d\n",
					name, ret, want_err);
				_exit(1);
			}
		} else {
			if (ret || tf_node_query_stats(node, &ns) || !ns.auth)
				_exit(1);
			tf_node_destroy(node);
		}
		tf_context_close(ctx);
		_exit(0);
	}
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECKF(WIFEXITED(st), "%s: child died (signal %d)", name,
	       WIFSIGNALED(st) ? WTERMSIG(st) : 0);
	return WEXITSTATUS(st);
}

static char *run_info(const char *env)
{
	static char out[65536];
	char cmd[512];
	size_t n;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "%s timeout 20 %s -c 2>&1", env,
		 TF_TEST_INFO_BIN);
	f = popen(cmd, "r");
	CHECK(f != NULL);
	n = fread(out, 1, sizeof(out) - 1, f);
	out[n] = '\0';
	CHECKF(pclose(f) == 0, "%s failed: %s", cmd, out);
	return out;
}

int main(void)
{
	char path[] = "/tmp/tf_psk_XXXXXX";
	const char *o;
	int fd;

	tf_test_begin("session_psk_env");
	memset(key300, 'k', 300);
	memset(key200, 'k', 200);

	CHECK(child("TOLLFREE_SESSION_PSK", key300, -EINVAL) == 0);
	CHECK(child("TOLLFREE_SESSION_PSK", key200, 0) == 0);

	fd = mkstemp(path);
	CHECK(fd >= 0);
	CHECK(write(fd, "file key", 8) == 8);
	close(fd);
	CHECK(chmod(path, 0644) == 0);
	CHECK(child("TOLLFREE_SESSION_PSK_FILE", path, -EACCES) == 0);
	CHECK(chmod(path, 0600) == 0);
	CHECK(child("TOLLFREE_SESSION_PSK_FILE", path, 0) == 0);
	unlink(path);

	/* A malformed value: returns, with the default. */
	{
		pid_t pid = fork();
		int st;

		CHECK(pid >= 0);
		if (pid == 0) {
			char buf[64];

			alarm(10);
			setenv("TOLLFREE_POOL_MAX", "abc", 1);
			if (tf_config_get("POOL_MAX", buf, sizeof(buf)) < 0 ||
			    strcmp(buf, "1G"))
				_exit(1);
			_exit(0);
		}
		CHECK(waitpid(pid, &st, 0) == pid);
		CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		       "malformed value: status 0x%x (hung: SIGALRM)", st);
	}

	o = run_info("TOLLFREE_SESSION_PSK=topsecretvalue "
		     "TOLLFREE_POOL_MAX=notasize");
	CHECKF(!strstr(o, "topsecretvalue"), "tollfree-info -c printed the "
					     "key");
	CHECK(strstr(o, "(set)"));
	CHECK(strstr(o, "INVALID"));
	return tf_test_end();
}
