/* The kernel definitions lib/lz4 and lib/zlib_deflate use, for building
 * them in user space as test oracles (testkit::kernel_oracle). Written for
 * zmem.
 * SPDX-License-Identifier: MIT OR Apache-2.0 */
#ifndef ZMEM_SHIM_TYPES_H
#define ZMEM_SHIM_TYPES_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
/* lz4defs.h uses these before it includes linux/kernel.h. */
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define BUILD_BUG_ON(c) _Static_assert(!(c), #c)
#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif
#endif
