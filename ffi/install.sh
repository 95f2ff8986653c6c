#!/usr/bin/env bash
# Installs the C library under PREFIX (default /usr/local):
#   LIBDIR/libvfnvme.so.0 (soname libvfnvme.so.0, symbol version VFNVME_0), the link-time symlink
#   LIBDIR/libvfnvme.so -> libvfnvme.so.0, LIBDIR/libvfnvme.a, PREFIX/include/vfnvme.h,
#   LIBDIR/pkgconfig/vfnvme.pc and the licence texts in PREFIX/share/doc/vfnvme.
#   ffi/install.sh [PREFIX]        PREFIX may also come from the environment; LIBDIR (default
#                                  PREFIX/lib) too. DESTDIR is honoured for staging.
# Then: cc app.c $(pkg-config --cflags --libs vfnvme)
# or, with libvfnvme.a linked in (the system libraries it needs come from Libs.private):
#   cc app.c $(pkg-config --cflags vfnvme) $(pkg-config --static --libs vfnvme | sed 's/-lvfnvme\b/-l:libvfnvme.a/')
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=${1:-${PREFIX:-/usr/local}}
libdir=${LIBDIR:-$prefix/lib}
dest=${DESTDIR:-}
# The product library: without the model feature, in a target dir of its own so that it does not
# replace the model-enabled library the tests build in target/release.
target=${CARGO_TARGET_DIR:-$root/target/product}
built=$(CARGO_TARGET_DIR=$target "$root/ffi/build-lib.sh" release)
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n1)
install -D -m 0755 "$built/libvfnvme.so.0" "$dest$libdir/libvfnvme.so.0"
ln -sfn libvfnvme.so.0 "$dest$libdir/libvfnvme.so"
install -D -m 0644 "$built/libvfnvme.a" "$dest$libdir/libvfnvme.a"
install -D -m 0644 "$root/ffi/include/vfnvme.h" "$dest$prefix/include/vfnvme.h"
install -D -m 0644 -t "$dest$prefix/share/doc/vfnvme" "$root/LICENSE-MIT" "$root/LICENSE-APACHE"
mkdir -p "$dest$libdir/pkgconfig"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@LIBDIR@|$libdir|g" -e "s|@VERSION@|$version|g" \
    -e "s|@LIBS_PRIVATE@|$(cat "$built/libvfnvme.native-libs")|g" \
    "$root/ffi/vfnvme.pc.in" >"$dest$libdir/pkgconfig/vfnvme.pc"
echo "installed into $dest$prefix (pkg-config file: $libdir/pkgconfig/vfnvme.pc)"
case "$dest$libdir" in
    /usr/lib* | /usr/local/lib* | /lib*) echo "run ldconfig to update the dynamic linker's cache" ;;
esac
