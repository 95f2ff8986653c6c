#!/usr/bin/env bash
# Builds the C library and names it libvfnvme.so (and libvfnvme.a) next to cargo's output.
#   ffi/build-lib.sh PROFILE [cargo build options, e.g. --features model]
# PROFILE: release, debug, or another Cargo profile of Cargo.toml (ci).
# Prints the directory that holds libvfnvme.so. The Rust library target is called
# `vfnvme_capi` (so that it and the driver crate `vfnvme` both build their docs); the shared
# object carries the soname libvfnvme.so (set in ffi/build.rs), so programs link `-lvfnvme`.
# CARGO_TARGET_DIR is honoured.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
profile=${1:?usage: ffi/build-lib.sh release|debug|ci [cargo options]}
shift
target=${CARGO_TARGET_DIR:-$root/target}
# Any Cargo profile: release, debug (= dev), or one of Cargo.toml's own (ci: scripts/test-all.sh).
case "$profile" in
    debug | dev) cargo_profile=dev dir=$target/debug ;;
    "" | */* | -*) echo "build-lib.sh: '$profile' is not a Cargo profile" >&2; exit 2 ;;
    *) cargo_profile=$profile dir=$target/$profile ;;
esac
cargo build -q --profile "$cargo_profile" -p vfnvme-ffi --manifest-path "$root/Cargo.toml" "$@"
cp -f "$dir/libvfnvme_capi.so" "$dir/libvfnvme.so.tmp" && mv -f "$dir/libvfnvme.so.tmp" "$dir/libvfnvme.so"
cp -f "$dir/libvfnvme_capi.a" "$dir/libvfnvme.a.tmp" && mv -f "$dir/libvfnvme.a.tmp" "$dir/libvfnvme.a"
echo "$dir"
