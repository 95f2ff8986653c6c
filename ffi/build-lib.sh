#!/usr/bin/env bash
# Builds the C library: libvfnvme.so.0 (soname libvfnvme.so.0, every C ABI function in symbol
# version VFNVME_0 of ffi/vfnvme.map), the link-time symlink libvfnvme.so -> libvfnvme.so.0,
# libvfnvme.a, and libvfnvme.native-libs (the system libraries a static link of libvfnvme.a
# needs, as rustc reports them: ffi/install.sh puts them in vfnvme.pc's Libs.private).
#   ffi/build-lib.sh PROFILE [cargo build options, e.g. --features model]
# PROFILE: release, debug, or another Cargo profile of Cargo.toml (ci).
# Prints the directory that holds them. CARGO_TARGET_DIR is honoured; CC is the linker driver.
#
# The Rust library target is called `vfnvme_capi` (so that it and the driver crate `vfnvme` both
# build their docs). The shared object is linked here from the static library rather than taken
# from cargo's cdylib: rustc gives a cdylib its own version script, which a second one cannot
# override (rust-lld ignores our versions, GNU ld refuses the mix), so cargo's
# libvfnvme_capi.so has no symbol versions.
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
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Always this one invocation (the same arguments each time, so it is fresh when nothing changed;
# rustc's note is replayed from cargo's cache then).
if ! cargo rustc -q --profile "$cargo_profile" -p vfnvme-ffi --lib --crate-type staticlib \
    --manifest-path "$root/Cargo.toml" "$@" -- --print native-static-libs 2>"$log"; then
    cat "$log" >&2
    exit 1
fi
grep -v -e 'native-static-libs' -e 'native artifacts when linking against this static' "$log" |
    grep -v '^$' >&2 || true
native=$(sed -n 's/^note: native-static-libs: //p' "$log" | tail -n1)
[[ -n "$native" ]] || { echo "build-lib.sh: rustc reported no native-static-libs" >&2; exit 1; }

cp -f "$dir/libvfnvme_capi.a" "$dir/libvfnvme.a.tmp" && mv -f "$dir/libvfnvme.a.tmp" "$dir/libvfnvme.a"
echo "$native" >"$dir/libvfnvme.native-libs"
# The shared object: the whole static library, the C ABI exported with its versions, the rest
# local and dropped where unused; every symbol resolved now (--no-undefined).
# shellcheck disable=SC2086 # $native is a list of -l options
${CC:-cc} -shared -o "$dir/libvfnvme.so.0.tmp" -Wl,-soname,libvfnvme.so.0 \
    -Wl,--whole-archive "$dir/libvfnvme_capi.a" -Wl,--no-whole-archive \
    -Wl,--version-script="$root/ffi/vfnvme.map" -Wl,--gc-sections -Wl,--no-undefined \
    -Wl,-z,relro,-z,now -Wl,-z,noexecstack -Wl,--as-needed $native
mv -f "$dir/libvfnvme.so.0.tmp" "$dir/libvfnvme.so.0"
ln -sfn libvfnvme.so.0 "$dir/libvfnvme.so.tmp" && mv -fT "$dir/libvfnvme.so.tmp" "$dir/libvfnvme.so"
echo "$dir"
