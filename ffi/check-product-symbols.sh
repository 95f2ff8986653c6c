#!/usr/bin/env bash
# Builds the product library as ffi/install.sh does (release, without the `model` feature, in
# target/product) and checks its packaging:
#   - libvfnvme.so.0 has the soname libvfnvme.so.0, and libvfnvme.so links to it;
#   - it exports exactly the functions that ffi/include/vfnvme.h declares outside its
#     VFNVME_MODEL part (so no symbol of the in-memory model), each in symbol version VFNVME_0
#     (objdump -T), and nothing else (no Rust or std symbol leaks).
# Exits non-zero and names the offending symbols otherwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${PRODUCT_TARGET_DIR:-$root/target/product}
dir=$(CARGO_TARGET_DIR=$target "$root/ffi/build-lib.sh" release)
lib=$dir/libvfnvme.so.0
fail() {
    echo "check-product-symbols: $*" >&2
    exit 1
}

soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[[ "$soname" == libvfnvme.so.0 ]] || fail "$lib has soname '$soname', not libvfnvme.so.0"
[[ "$(readlink "$dir/libvfnvme.so")" == libvfnvme.so.0 ]] ||
    fail "$dir/libvfnvme.so is not a symlink to libvfnvme.so.0"

# Defined dynamic symbols as "VERSION NAME" (objdump -T: ... SECTION SIZE VERSION NAME).
exports=$(objdump -T "$lib" | awk '$NF != "" && /^[0-9a-f]+ / && !/\*UND\*/ { print $(NF-1), $NF }' |
    sort -k2)
# The version definition itself is an absolute symbol named after its node.
exports=$(grep -v '^VFNVME_0 VFNVME_0$' <<<"$exports" || true)
unversioned=$(grep -v '^VFNVME_0 ' <<<"$exports" || true)
[[ -z "$unversioned" ]] || fail "symbols outside version VFNVME_0:"$'\n'"$unversioned"
names=$(awk '{ print $2 }' <<<"$exports")
model=$(grep -i 'model' <<<"$names" || true)
[[ -z "$model" ]] || fail "the product library exports model symbols:"$'\n'"$model"

# The header's functions without -DVFNVME_MODEL, the product's C ABI.
declared=$(${CC:-cc} -E -P -x c "$root/ffi/include/vfnvme.h" |
    grep -oE '\bvfnvme_[a-z0-9_]+\(' | tr -d '(' | sort -u)
extra=$(comm -13 <(echo "$declared") <(sort -u <<<"$names"))
missing=$(comm -23 <(echo "$declared") <(sort -u <<<"$names"))
[[ -z "$extra" ]] || fail "exported but not declared in vfnvme.h:"$'\n'"$extra"
[[ -z "$missing" ]] || fail "declared in vfnvme.h but not exported:"$'\n'"$missing"
count=$(wc -l <<<"$names")
(( count >= 20 )) || fail "$lib exports only $count symbols; is it the C ABI?"
echo "check-product-symbols: $lib (soname $soname) exports the header's $count functions," \
    "all in VFNVME_0, and nothing else"
