/* SPDX-License-Identifier: MIT */
/*
 * fork.c - the fork generation: bumped in every child created by fork(),
 * so that objects made before the fork refuse to work in the child
 * (-TF_EFORK) instead of touching registrations the child does not own.
 */
#include "util.h"

atomic_uint tf__fork_generation;

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_child(void)
{
	atomic_fetch_add(&tf__fork_generation, 1);
}

static void fork_register(void)
{
	pthread_atfork(NULL, NULL, fork_child);
}

void tf__fork_init(void)
{
	pthread_once(&fork_once, fork_register);
}
