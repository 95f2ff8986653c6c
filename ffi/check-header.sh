#!/usr/bin/env bash
# Checks that the committed ffi/include/vfnvme.h matches what cbindgen generates from ffi/src.
# --update rewrites the committed header instead. Exits non-zero when they differ.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
committed=$root/ffi/include/vfnvme.h
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# PROFILE (optional): the Cargo profile to build in (scripts/test-all.sh: ci, the build it has).
VFNVME_HEADER_OUT=$tmp/vfnvme.h cargo build -q ${PROFILE:+--profile "$PROFILE"} -p vfnvme-ffi \
    --features model --manifest-path "$root/Cargo.toml"
[[ -s $tmp/vfnvme.h ]] || { echo "check-header: cbindgen produced no header (see cargo warnings)" >&2; exit 1; }
if [[ "${1:-}" == --update ]]; then
    mkdir -p "$(dirname "$committed")"
    cp "$tmp/vfnvme.h" "$committed"
    echo "check-header: wrote $committed"
    exit 0
fi
if ! diff -u "$committed" "$tmp/vfnvme.h"; then
    echo "check-header: ffi/include/vfnvme.h is stale; run ffi/check-header.sh --update and commit it" >&2
    exit 1
fi
echo "check-header: ffi/include/vfnvme.h is up to date"
