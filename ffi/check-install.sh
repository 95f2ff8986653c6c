#!/usr/bin/env bash
# Checks the installed C library as a user of it would meet it: installs the product library
# with ffi/install.sh into a temporary PREFIX (and once more staged with DESTDIR, which must
# give the same files), then builds ffi/examples/version.c (product symbols only) with
# pkg-config twice and runs both:
#   - dynamically: `pkg-config --cflags --libs vfnvme`, run with LD_LIBRARY_PATH; it must load
#     libvfnvme.so.0 from the prefix;
#   - statically: `pkg-config --static --libs vfnvme` with libvfnvme.a in place of -lvfnvme; it
#     must have no libvfnvme.so dependency (readelf -d) and run without LD_LIBRARY_PATH.
# Both must print the library's version (the workspace's, and pkg-config's), the expected
# typed errors and the same list of NVMe controllers (vfnvme_enumerate). Reuses target/product (ffi/check-product-symbols.sh builds the same library).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cc=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "check-install: $*" >&2
    exit 1
}

# pkg-config is the point of the check; a fresh Debian machine may not have it yet.
if ! command -v pkg-config >/dev/null; then
    [[ $(id -u) == 0 ]] || fail "pkg-config is missing: apt-get install pkgconf"
    echo "check-install: installing pkgconf (pkg-config)" >&2
    apt-get install -y -qq pkgconf >&2 || { apt-get update -qq >&2 && apt-get install -y -qq pkgconf >&2; }
fi

prefix=$tmp/usr
"$root/ffi/install.sh" "$prefix" >/dev/null
DESTDIR=$tmp/stage "$root/ffi/install.sh" /opt/vfnvme >/dev/null
(cd "$prefix" && find . | sort) >"$tmp/prefix.list"
(cd "$tmp/stage/opt/vfnvme" && find . | sort) >"$tmp/stage.list"
diff -u "$tmp/prefix.list" "$tmp/stage.list" >&2 || fail "DESTDIR staging installs other files"
grep -q '^prefix=/opt/vfnvme$' "$tmp/stage/opt/vfnvme/lib/pkgconfig/vfnvme.pc" ||
    fail "the staged vfnvme.pc does not name PREFIX /opt/vfnvme"
[[ "$(readlink "$prefix/lib/libvfnvme.so")" == libvfnvme.so.0 ]] ||
    fail "libvfnvme.so is not a symlink to libvfnvme.so.0"

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n1)
[[ "$(pkg-config --modversion vfnvme)" == "$version" ]] ||
    fail "pkg-config --modversion vfnvme is $(pkg-config --modversion vfnvme), not $version"
src=$root/ffi/examples/version.c
flags=(-std=c11 -O1 -Wall -Wextra -Werror)
# shellcheck disable=SC2046 # pkg-config's output is a list of options
"$cc" "${flags[@]}" -o "$tmp/version-dynamic" "$src" $(pkg-config --cflags --libs vfnvme)
# shellcheck disable=SC2046
"$cc" "${flags[@]}" -o "$tmp/version-static" "$src" $(pkg-config --cflags vfnvme) \
    $(pkg-config --static --libs vfnvme | sed 's/-lvfnvme\b/-l:libvfnvme.a/')

needed=$(readelf -d "$tmp/version-dynamic" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
grep -qx libvfnvme.so.0 <<<"$needed" || fail "the dynamic program does not need libvfnvme.so.0"
loaded=$(LD_LIBRARY_PATH=$prefix/lib ldd "$tmp/version-dynamic" | awk '$1 == "libvfnvme.so.0" { print $3 }')
[[ "$loaded" == "$prefix/lib/libvfnvme.so.0" ]] || fail "libvfnvme.so.0 resolves to '$loaded'"
needed=$(readelf -d "$tmp/version-static" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
if grep -q libvfnvme <<<"$needed"; then
    fail "the static program depends on $(grep libvfnvme <<<"$needed")"
fi

expected="libvfnvme $version ($version)
options without size: invalid argument (NULL pointer, zero or oversized count, bad option)
open 0000:ff:1f.7: device or controller error"
dynamic=$(LD_LIBRARY_PATH=$prefix/lib "$tmp/version-dynamic") || fail "the dynamic program failed"
static=$(env -u LD_LIBRARY_PATH "$tmp/version-static") || fail "the static program failed"
# The first lines are fixed; then the machine's NVMe controllers (their count, then one line
# each), which only have to be the same for both programs.
[[ "$dynamic" == "$static" ]] || fail "the dynamic and static programs disagree:"$'\n'"$dynamic"$'\n'"$static"
for out in "$dynamic" "$static"; do
    [[ "$(head -n 3 <<<"$out")" == "$expected" ]] ||
        fail "unexpected output:"$'\n'"$out"$'\n'"expected first:"$'\n'"$expected"
    grep -Eq '^NVMe controllers: [0-9]+$' <<<"$out" || fail "no controller count (vfnvme_enumerate):"$'\n'"$out"
done
expected=$dynamic
echo "check-install: installed $version; version.c built with pkg-config, dynamic" \
    "(libvfnvme.so.0) and static (libvfnvme.a, no libvfnvme.so dependency), both print:"
while IFS= read -r line; do
    echo "    $line"
done <<<"$dynamic"
