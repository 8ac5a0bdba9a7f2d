#!/usr/bin/env bash
# Installs the region C API under PREFIX:
#   PREFIX/include/zmem_region.h
#   PREFIX/lib/libzmem_region.a
#   PREFIX/lib/libzmem_region.so.VERSION, libzmem_region.so.0 and libzmem_region.so (links)
#   PREFIX/lib/pkgconfig/zmem_region.pc
#
# Usage: crates/region-capi/install.sh PREFIX
#   Builds the libraries first (cargo build --release -p zmem-region-capi).
# Or:    ZMEM_REGION_LIBDIR=DIR crates/region-capi/install.sh PREFIX
#   Installs libzmem_region.a and .so found in DIR, building nothing
#   (the C API test uses this with the libraries cargo test just built).
#
# Then: PKG_CONFIG_PATH=PREFIX/lib/pkgconfig pkg-config --cflags --libs zmem_region
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

if [ -n "${ZMEM_REGION_LIBDIR:-}" ]; then
    libs=$ZMEM_REGION_LIBDIR
else
    (cd "$root" && cargo build --release -p zmem-region-capi)
    libs=${CARGO_TARGET_DIR:-$root/target}/release
fi
for f in libzmem_region.a libzmem_region.so; do
    if [ ! -f "$libs/$f" ]; then
        echo "$0: $libs/$f not found" >&2
        exit 1
    fi
done

install -d "$prefix/include" "$prefix/lib/pkgconfig"
install -m 644 "$here/include/zmem_region.h" "$prefix/include/zmem_region.h"
install -m 644 "$libs/libzmem_region.a" "$prefix/lib/libzmem_region.a"
install -m 755 "$libs/libzmem_region.so" "$prefix/lib/libzmem_region.so.$version"
# The library's soname is libzmem_region.so.0 (see build.rs).
ln -sfn "libzmem_region.so.$version" "$prefix/lib/libzmem_region.so.0"
ln -sfn "libzmem_region.so.0" "$prefix/lib/libzmem_region.so"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" \
    "$here/zmem_region.pc.in" >"$prefix/lib/pkgconfig/zmem_region.pc"
chmod 644 "$prefix/lib/pkgconfig/zmem_region.pc"
echo "installed zmem_region $version under $prefix"
