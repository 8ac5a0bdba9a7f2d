/* SPDX-License-Identifier: MIT OR Apache-2.0 (zmem's test shim).
 * Unaligned loads and stores through a packed one-member struct, for
 * little-endian machines only. */
#ifndef ZMEM_SHIM_UNALIGNED_H
#define ZMEM_SHIM_UNALIGNED_H
#include <linux/types.h>
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the lz4 oracle is built for little-endian machines only"
#endif
#define zmem_packed_(p) struct __attribute__((packed)) { __typeof__(*(p)) v; }
#define get_unaligned(p) (((const zmem_packed_(p) *)(p))->v)
#define put_unaligned(val, p) ((void)(((zmem_packed_(p) *)(p))->v = (val)))
#define get_unaligned_le16(p) get_unaligned((const u16 *)(p))
#define put_unaligned_le16(val, p) put_unaligned((u16)(val), (u16 *)(p))
#endif
