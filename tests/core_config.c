/* SPDX-License-Identifier: MIT */
/* core_config: the TOLLFREE_* table parses, formats and rejects values. */
#include <errno.h>
#include <string.h>

#include "tf_test.h"

static int n_vars;

static void count_var(const char *name, const char *deflt, const char *value,
		      const char *component, const char *help, void *arg)
{
	(void)arg;
	CHECK(!strncmp(name, "TOLLFREE_", 9));
	CHECK(deflt && value && component && help && help[0]);
	n_vars++;
}

int main(void)
{
	char buf[256];

	tf_test_begin("core_config");
	CHECK(tf_config_foreach(count_var, NULL) == n_vars);
	CHECK(n_vars > 10);
	CHECK_OK(tf_config_get("TOLLFREE_PROVIDER", buf, sizeof(buf)));
	CHECK_OK(tf_config_get("SOFT_SHM_RING_SIZE", buf, sizeof(buf)));
	CHECK_ERR(tf_config_get("NO_SUCH_VAR", buf, sizeof(buf)), -ENOENT);
	CHECK_ERR(tf_config_get("PROVIDER", buf, 1), -ENOSPC);
	CHECK_OK(tf_config_check("SOFT_SHM_RING_SIZE", "64K"));
	CHECK_OK(tf_config_check("SOFT_MAX_MSG", "inf"));
	CHECK_ERR(tf_config_check("SOFT_SHM_RING_SIZE", "64Q"), -EINVAL);
	CHECK_ERR(tf_config_check("SOFT_SHM_RING_SIZE", "-1"), -EINVAL);
	CHECK_ERR(
		tf_config_check("SOFT_SHM_RING_SIZE", "99999999999999999999G"),
		-EINVAL);
	CHECK_OK(tf_config_check("SOFT_PROGRESS_THREAD", "yes"));
	CHECK_ERR(tf_config_check("SOFT_PROGRESS_THREAD", "maybe"), -EINVAL);
	CHECK_OK(tf_config_check("LOG_LEVEL", "debug"));
	CHECK_ERR(tf_config_check("LOG_LEVEL", "loud"), -EINVAL);
	CHECK_ERR(tf_config_check("QP_MAX_WR", "4294967296"), -EINVAL);
	CHECK(!strcmp(tf_strerror(-TF_EAUTH), "peer failed authentication"));
	CHECK(!strcmp(tf_strerror(-ENOMEM), strerror(ENOMEM)));
	CHECK(tf_version() == TOLLFREE_VERSION);
	CHECK(TOLLFREE_CHECK_VERSION(0, 1));
	return tf_test_end();
}
