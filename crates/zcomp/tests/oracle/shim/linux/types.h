/* The kernel definitions lib/zlib_deflate uses, for building it in user
 * space as the test oracle of kernel-compat's deflate. Written for zmem.
 * SPDX-License-Identifier: MIT OR Apache-2.0 */
#ifndef ZMEM_SHIM_TYPES_H
#define ZMEM_SHIM_TYPES_H
#include <stddef.h>
#include <stdint.h>
typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
#endif
