/* The few kernel definitions lib/lzo's C files use, for building them in
 * user space in zmem-lzo-speed (a benchmark, never linked into zmem).
 * Written for zmem; force-included before each kernel file by build.rs.
 * SPDX-License-Identifier: MIT OR Apache-2.0 */
#ifndef ZMEM_KSHIM_H
#define ZMEM_KSHIM_H
#include <stddef.h>
#include <stdint.h>

typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;

/* x86-64 and arm64 only (little-endian, cheap unaligned access): what the
 * kernel's configuration gives lib/lzo on those machines. */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "zmem-lzo-speed builds the kernel's lzo for little-endian machines only"
#endif
#define __LITTLE_ENDIAN 1234
#define CONFIG_HAVE_EFFICIENT_UNALIGNED_ACCESS 1
#define CONFIG_X86_64 1

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define noinline __attribute__((noinline))
#define min(a, b) ((a) < (b) ? (a) : (b))
#define min_t(type, a, b) min((type)(a), (type)(b))
#define ALIGN(x, a) (((x) + ((a) - 1)) & ~(uintptr_t)((a) - 1))
#define IS_ALIGNED(x, a) (((x) & ((uintptr_t)(a) - 1)) == 0)
#define BUILD_BUG_ON(c) _Static_assert(!(c), #c)
#define EXPORT_SYMBOL_GPL(sym)
#define MODULE_LICENSE(s)
#define MODULE_DESCRIPTION(s)

/* Unaligned loads and stores through memcpy, which compilers turn into
 * single moves. */
#define get_unaligned(p)                                                   \
	({                                                                 \
		__typeof__(*(p)) zmem_v_;                                  \
		__builtin_memcpy(&zmem_v_, (p), sizeof(zmem_v_));          \
		zmem_v_;                                                   \
	})
#define put_unaligned(v, p)                                                \
	do {                                                               \
		__typeof__(*(p)) zmem_v_ = (v);                            \
		__builtin_memcpy((p), &zmem_v_, sizeof(zmem_v_));          \
	} while (0)
#define get_unaligned_le16(p) get_unaligned((const u16 *)(p))
#define get_unaligned_le32(p) get_unaligned((const u32 *)(p))
#define put_unaligned_le16(v, p) put_unaligned((u16)(v), (u16 *)(p))
#define put_unaligned_le32(v, p) put_unaligned((u32)(v), (u32 *)(p))

/* The kernel's lzo work-memory size and return codes used by lib/lzo. */
#define LZO1X_1_MEM_COMPRESS (8192 * sizeof(unsigned short))
#define LZO_E_OK 0
#define LZO_E_ERROR (-1)
#define LZO_E_INPUT_OVERRUN (-4)
#define LZO_E_OUTPUT_OVERRUN (-5)
#define LZO_E_LOOKBEHIND_OVERRUN (-6)
#define LZO_E_INPUT_NOT_CONSUMED (-8)
#endif
