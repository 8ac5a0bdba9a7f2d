#!/usr/bin/env bash
# Installs the zsmalloc C API under PREFIX:
#   PREFIX/include/zsmalloc.h
#   PREFIX/lib/libzsmalloc.a
#   PREFIX/lib/libzsmalloc.so.VERSION, libzsmalloc.so.0 and libzsmalloc.so (links)
#   PREFIX/lib/pkgconfig/zsmalloc.pc
#
# Usage: crates/capi/install.sh PREFIX
#   Builds the libraries first (cargo build --release -p zmem-capi).
# Or:    ZSMALLOC_LIBDIR=DIR crates/capi/install.sh PREFIX
#   Installs libzsmalloc_capi.a and .so found in DIR (as libzsmalloc), building nothing
#   (the C API test uses this with the libraries cargo test just built).
#
# Then: PKG_CONFIG_PATH=PREFIX/lib/pkgconfig pkg-config --cflags --libs zsmalloc
set -euo pipefail

if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: $0 PREFIX" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mkdir -p "$1"
prefix=$(cd "$1" && pwd)

# The workspace version: the first `version = "..."` line of the root manifest.
version=$(sed -n 's/^version = "\([^"]*\)".*/\1/p' "$root/Cargo.toml" | head -n 1)
if [ -z "$version" ]; then
    echo "$0: no version in $root/Cargo.toml" >&2
    exit 1
fi

if [ -n "${ZSMALLOC_LIBDIR:-}" ]; then
    libs=$ZSMALLOC_LIBDIR
else
    (cd "$root" && cargo build --release -p zmem-capi)
    libs=${CARGO_TARGET_DIR:-$root/target}/release
fi
# Cargo names them libzsmalloc_capi (see Cargo.toml); they install as libzsmalloc.
for f in libzsmalloc_capi.a libzsmalloc_capi.so; do
    if [ ! -f "$libs/$f" ]; then
        echo "$0: $libs/$f not found" >&2
        exit 1
    fi
done

install -d "$prefix/include" "$prefix/lib/pkgconfig"
install -m 644 "$here/include/zsmalloc.h" "$prefix/include/zsmalloc.h"
install -m 644 "$libs/libzsmalloc_capi.a" "$prefix/lib/libzsmalloc.a"
install -m 755 "$libs/libzsmalloc_capi.so" "$prefix/lib/libzsmalloc.so.$version"
# The library's soname is libzsmalloc.so.0 (see build.rs).
ln -sfn "libzsmalloc.so.$version" "$prefix/lib/libzsmalloc.so.0"
ln -sfn "libzsmalloc.so.0" "$prefix/lib/libzsmalloc.so"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" \
    "$here/zsmalloc.pc.in" >"$prefix/lib/pkgconfig/zsmalloc.pc"
chmod 644 "$prefix/lib/pkgconfig/zsmalloc.pc"
echo "installed zsmalloc $version under $prefix"
