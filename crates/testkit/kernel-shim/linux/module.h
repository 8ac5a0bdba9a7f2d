/* SPDX-License-Identifier: MIT OR Apache-2.0 (zmem's test shim) */
#ifndef ZMEM_SHIM_MODULE_H
#define ZMEM_SHIM_MODULE_H
#define EXPORT_SYMBOL(sym)
#define EXPORT_SYMBOL_GPL(sym)
#define MODULE_LICENSE(s)
#define MODULE_DESCRIPTION(s)
#endif
