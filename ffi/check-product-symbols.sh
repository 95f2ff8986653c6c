#!/usr/bin/env bash
# Builds the product libvfnvme.so as ffi/install.sh does (release, without the `model` feature,
# in target/product) and checks with `nm -D` that it exports the C ABI and no symbol of the
# in-memory model. Exits non-zero and names the symbols otherwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${PRODUCT_TARGET_DIR:-$root/target/product}
CARGO_TARGET_DIR=$target "$root/ffi/build-lib.sh" release >/dev/null
lib=$target/release/libvfnvme.so
exports=$(nm -D --defined-only "$lib" | awk '{print $3}')
abi=$(grep -c '^vfnvme_' <<<"$exports" || true)
if (( abi < 20 )); then
    echo "check-product-symbols: $lib exports only $abi vfnvme_* symbols; is it the C ABI?" >&2
    exit 1
fi
model=$(grep -i 'model' <<<"$exports" || true)
if [[ -n "$model" ]]; then
    echo "check-product-symbols: the product library exports model symbols:" >&2
    echo "$model" >&2
    exit 1
fi
echo "check-product-symbols: $lib exports $abi vfnvme_* symbols and none of the model"
