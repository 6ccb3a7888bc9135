/* SPDX-License-Identifier: MIT */
/*
 * tf_test_unit.c - harness helpers for the unit tests only (tf_test_unit.h).
 */
#include <errno.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tf_test_unit.h"

int tf_test_drop_ipc_lock(void)
{
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2];

	if (syscall(SYS_capget, &h, d))
		return -errno;
	d[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
	d[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
	d[CAP_IPC_LOCK / 32].inheritable &= ~(1u << (CAP_IPC_LOCK % 32));
	if (syscall(SYS_capset, &h, d))
		return -errno;
	return 0;
}
