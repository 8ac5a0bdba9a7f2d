/* SPDX-License-Identifier: MIT OR Apache-2.0 (zmem's test shim) */
#ifndef ZMEM_SHIM_BITOPS_H
#define ZMEM_SHIM_BITOPS_H
#define BITS_PER_LONG 64
#define __ffs(x) ((unsigned long)__builtin_ctzl(x))
#define __fls(x) ((unsigned long)(63 - __builtin_clzl(x)))
#endif
