/* SPDX-License-Identifier: MIT */
/*
 * info.h - what tollfree-info's parts share.
 */
#ifndef TOLLFREE_INFO_H
#define TOLLFREE_INFO_H

#include <stdbool.h>

/* tollfree-info -s [--json] [--wait MS] [PID|FILE] (info_stats.c):
 * 0 or the exit status. */
int info_show_stats(const char *what, bool json, int wait_ms);

#endif /* TOLLFREE_INFO_H */
