#!/usr/bin/env bash
# Installs libvfnvme.so, vfnvme.h and vfnvme.pc under PREFIX (default /usr/local).
#   ffi/install.sh [PREFIX]        DESTDIR is honoured for staging.
# Then: gcc app.c $(pkg-config --cflags --libs vfnvme)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=${1:-/usr/local}
libdir=${LIBDIR:-$prefix/lib}
dest=${DESTDIR:-}
# The product library: without the model feature, in a target dir of its own so that it does not
# replace the model-enabled library the tests build in target/release.
target=${CARGO_TARGET_DIR:-$root/target/product}
CARGO_TARGET_DIR=$target "$root/ffi/build-lib.sh" release >/dev/null
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n1)
install -D -m 0755 "$target/release/libvfnvme.so" "$dest$libdir/libvfnvme.so"
install -D -m 0644 "$root/ffi/include/vfnvme.h" "$dest$prefix/include/vfnvme.h"
mkdir -p "$dest$libdir/pkgconfig"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@LIBDIR@|$libdir|g" -e "s|@VERSION@|$version|g" \
    "$root/ffi/vfnvme.pc.in" >"$dest$libdir/pkgconfig/vfnvme.pc"
echo "installed into $dest$prefix (pkg-config file: $libdir/pkgconfig/vfnvme.pc)"
