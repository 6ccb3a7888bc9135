/* SPDX-License-Identifier: MIT */
/*
 * tollfree.h - umbrella header of the tollfree library.
 *
 * tollfree gives short-lived RDMA sessions the speed RDMA promises without
 * the memory-registration tax.  See tollfree(7).
 */
#ifndef TOLLFREE_H
#define TOLLFREE_H

#include <tollfree/base.h>
#include <tollfree/context.h>
#include <tollfree/mr.h>
#include <tollfree/qp.h>
#include <tollfree/rcache.h>
#include <tollfree/pool.h>
#include <tollfree/session.h>

#endif /* TOLLFREE_H */
