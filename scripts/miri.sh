#!/usr/bin/env bash
# Runs the pure-Rust tests above the hardware edge under Miri.
#
# Usage: scripts/miri.sh [--full]
#   (default)  the bounded set, every time (scripts/test-all.sh): the tests of the code with
#              `unsafe` in it, where Miri finds what native runs can't: the namespace registry
#              (crossbeam-epoch reclamation, raw pointers into its nodes) and the C ABI on the model
#              (raw pointers, callbacks, borrowed buffers and their bounds).
#   --full     also spec parsing and PRP building (scripts/test-all.sh --full). They have no
#              `unsafe` of their own, and are most of Miri's time: PRP lists of every size and
#              offset, and the property test of Identify parsing.
#
# Miri's sysroot is built once into target/miri-sysroot (MIRI_SYSROOT) and reused from there.
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
# Under target/ so that a CI machine that keeps target/ skips building it; `cargo miri setup`
# rebuilds it when the nightly toolchain changed.
MIRI_SYSROOT=$PWD/target/miri-sysroot
export MIRI_SYSROOT
cargo +nightly miri setup

# The C ABI on the model: the soundness of the calls a C program makes (callbacks, borrowed
# buffers, bounds). The long polling and whole-disk tests stay with the native runs.
abi_tests=(abi_tests::write_read_verify_and_every_command abi_tests::callbacks_may_submit_but_not_poll
    abi_tests::lists_namespaces_and_info abi_bounds_tests::reads_past_the_end_of_the_buffer_are_refused
    abi_bounds_tests::the_bound_is_the_length_asked_for_not_the_chunk)

if [[ "${1:-}" == --full ]]; then
    cargo +nightly miri test -p vfnvme --lib -- spec:: queue::prp namespaces::registry_tests
else
    cargo +nightly miri test -p vfnvme --lib -- namespaces::registry_tests
fi
cargo +nightly miri test -p vfnvme-ffi --features model --lib -- "${abi_tests[@]}"
