/* SPDX-License-Identifier: MIT OR Apache-2.0 (zmem's test shim) */
#ifndef ZMEM_SHIM_BITREV_H
#define ZMEM_SHIM_BITREV_H
#include <linux/types.h>
static inline u32 bitrev32(u32 x)
{
	u32 r = 0;
	for (int i = 0; i < 32; i++, x >>= 1)
		r = r << 1 | (x & 1);
	return r;
}
#endif
