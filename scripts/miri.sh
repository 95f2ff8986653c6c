#!/usr/bin/env bash
# Runs the pure-Rust tests above the hardware edge under Miri: spec parsing, PRP building, the
# namespace registry, and the C ABI's tests on the in-memory model.
#
# Miri needs a nightly toolchain with the miri and rust-src components. This script installs them
# with rustup when they are missing; if that fails (no nightly can be fetched), it says so and
# exits 0: the release-mode host tests in scripts/test-all.sh then stand in for it.
#
# Flags: permissive provenance, because device addresses are integers turned into pointers
# by design (DMA memory); tree borrows, because crossbeam-epoch (the registry's reclamation) is known to break
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
export MIRIFLAGS="-Zmiri-tree-borrows -Zmiri-ignore-leaks -Zmiri-permissive-provenance"
cargo +nightly miri setup
cargo +nightly miri test -p vfnvme --lib -- spec:: queue::prp namespaces::registry_tests
# The C ABI on the model: the soundness of the calls a C program makes (callbacks, borrowed
# buffers, bounds). The long polling and whole-disk tests stay with the native runs.
cargo +nightly miri test -p vfnvme-ffi --features model --lib -- \
    abi_tests::write_read_verify_and_every_command abi_tests::callbacks_may_submit_but_not_poll \
    abi_tests::lists_namespaces_and_info abi_bounds_tests::reads_past_the_end_of_the_buffer_are_refused \
    abi_bounds_tests::the_bound_is_the_length_asked_for_not_the_chunk
