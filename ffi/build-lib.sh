#!/usr/bin/env bash
# Builds the C library and names it libvfnvme.so (and libvfnvme.a) next to cargo's output.
#   ffi/build-lib.sh release|debug [cargo build options, e.g. --features model]
# Prints the directory that holds libvfnvme.so. The Rust library target is called
# `vfnvme_capi` (so that it and the driver crate `vfnvme` both build their docs); the shared
# object carries the soname libvfnvme.so (set in ffi/build.rs), so programs link `-lvfnvme`.
# CARGO_TARGET_DIR is honoured.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
profile=${1:?usage: ffi/build-lib.sh release|debug [cargo options]}
shift
target=${CARGO_TARGET_DIR:-$root/target}
case "$profile" in
    release) cargo build -q --release -p vfnvme-ffi --manifest-path "$root/Cargo.toml" "$@" ;;
    debug) cargo build -q -p vfnvme-ffi --manifest-path "$root/Cargo.toml" "$@" ;;
    *) echo "build-lib.sh: profile must be release or debug, not '$profile'" >&2; exit 2 ;;
esac
dir=$target/$profile
cp -f "$dir/libvfnvme_capi.so" "$dir/libvfnvme.so.tmp" && mv -f "$dir/libvfnvme.so.tmp" "$dir/libvfnvme.so"
cp -f "$dir/libvfnvme_capi.a" "$dir/libvfnvme.a.tmp" && mv -f "$dir/libvfnvme.a.tmp" "$dir/libvfnvme.a"
echo "$dir"
