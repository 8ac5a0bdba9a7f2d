/* SPDX-License-Identifier: MIT OR Apache-2.0 (zmem's test shim) */
#ifndef ZMEM_SHIM_KERNEL_H
#define ZMEM_SHIM_KERNEL_H
#include <assert.h>
#include <linux/types.h>
#define BUG_ON(c) assert(!(c))
#define max(a, b) ((a) > (b) ? (a) : (b))
#define static_assert _Static_assert
#endif
