/* SPDX-License-Identifier: MIT OR Apache-2.0 (zmem's test shim) */
#include <string.h>
