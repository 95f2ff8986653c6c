#!/usr/bin/env bash
# Builds libvfnvme.so and ffi/examples/{hello,bounds,iovec}.c against the committed header; with
# --run, runs them against the controller model (so the library is built with the `model`
# feature). Output: target/ffi-examples/{hello,bounds,iovec}; prints the path of hello (the others
# are next to it). PROFILE: the Cargo profile of the library (release by default;
# ffi/build-lib.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
profile=${PROFILE:-release}
"$root/ffi/build-lib.sh" "$profile" --features model >/dev/null
mkdir -p "$target/ffi-examples"
for example in bounds hello iovec; do
    ${CC:-gcc} -std=c11 -O2 -Wall -Wextra -Werror -DVFNVME_MODEL -I"$root/ffi/include" \
        -o "$target/ffi-examples/$example" "$root/ffi/examples/$example.c" \
        -L"$target/$profile" -lvfnvme -Wl,-rpath,"$target/$profile"
done
echo "$target/ffi-examples/hello"
if [[ "${1:-}" == --run ]]; then
    "$target/ffi-examples/hello" --model
    "$target/ffi-examples/bounds" --model
    "$target/ffi-examples/iovec" --model
fi
