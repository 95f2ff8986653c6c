#!/usr/bin/env bash
# Runs the pure-Rust tests above the hardware edge under Miri: spec parsing, PRP building, the
# namespace registry, and the C ABI's tests on the in-memory model.
#
# Miri needs a nightly toolchain with the miri and rust-src components. This script installs them
# with rustup when they are missing; if that fails (no nightly can be fetched), it says so and
# exits 0: the release-mode host tests in scripts/test-all.sh then stand in for it.
#
# Flags: tree borrows, because crossbeam-epoch (the registry's reclamation) is known to break
# Stacked Borrows' rules in ways Tree Borrows accepts; ignore leaks, because crossbeam-epoch's
# global collector keeps deferred garbage past the end of a test by design.
set -euo pipefail
cd "$(dirname "$0")/.."

have_miri() { cargo +nightly miri --version >/dev/null 2>&1; }

if ! have_miri; then
    echo "Miri: installing the nightly toolchain with miri and rust-src (rustup)"
    timeout 600 rustup toolchain install nightly --profile minimal --component miri,rust-src ||
        true
fi
if ! have_miri; then
    echo "Miri: SKIPPED: no nightly toolchain with Miri could be installed here;"
    echo "      the release-mode host tests (cargo test --release) cover what it would have run."
    exit 0
fi

export CARGO_TARGET_DIR=target/miri
export MIRIFLAGS="-Zmiri-tree-borrows -Zmiri-ignore-leaks"
cargo +nightly miri setup
cargo +nightly miri test -p vfnvme --lib -- spec:: queue::prp namespace::registry_tests
cargo +nightly miri test -p vfnvme-ffi --lib -- abi_
