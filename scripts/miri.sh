#!/usr/bin/env bash
# Runs the pure-Rust tests above the hardware edge under Miri.
#
# Usage: scripts/miri.sh [--full]
#   (default)  the bounded set, every time (scripts/test-all.sh, about two minutes): tests of
#              the code with `unsafe` in it, where Miri finds what native runs can't: the
#              namespace registry (crossbeam-epoch reclamation, raw pointers into its nodes) and
#              one test of the C ABI on the model (callbacks re-entering the library).
#   --full     everything (scripts/test-all.sh --full): also spec parsing and PRP building,
#              which have no `unsafe` of their own and are most of Miri's time (PRP lists of
#              every size and offset, the property test of Identify parsing), and the other C ABI
#              tests (every command with borrowed buffers, namespaces, bounds of a buffer, the
#              marks of an iovec's pieces).
#
# Miri needs a nightly toolchain with the miri and rust-src components. This script installs them
# with rustup when they are missing; if that fails (no nightly can be fetched), it says so and
# exits 0: the optimised host tests in scripts/test-all.sh (profile ci) then stand in for it.
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
    echo "      the optimised host tests (cargo test --profile ci) cover what it would have run."
    exit 0
fi

export CARGO_TARGET_DIR=target/miri
export MIRIFLAGS="-Zmiri-tree-borrows -Zmiri-ignore-leaks -Zmiri-permissive-provenance"
# Miri's sysroot (its own build of std, under a minute on two cores): the one `cargo miri setup`
# keeps in ~/.cache/miri when the machine has it already, else one under target/, so that a CI
# machine that keeps target/ builds it once. `cargo miri setup` rebuilds either when the nightly
# changed.
if [[ -z "${MIRI_SYSROOT:-}" && ! -d "${XDG_CACHE_HOME:-$HOME/.cache}/miri" ]]; then
    MIRI_SYSROOT=$PWD/target/miri-sysroot
    export MIRI_SYSROOT
fi
cargo +nightly miri setup

# The C ABI on the model: the soundness of the calls a C program makes (callbacks, borrowed
# buffers, bounds). The long polling and whole-disk tests stay with the native runs.
abi_tests=(abi_tests::write_read_verify_and_every_command abi_tests::callbacks_may_submit_but_not_poll
    abi_tests::lists_namespaces_and_info abi_bounds_tests::reads_past_the_end_of_the_buffer_are_refused
    abi_bounds_tests::the_bound_is_the_length_asked_for_not_the_chunk
    abi_iov_tests::every_piece_buffer_is_refused_by_free_until_the_completion
    requests::tests)

if [[ "${1:-}" == --full ]]; then
    cargo +nightly miri test -p vfnvme --lib -- spec:: queue::prp namespaces::registry_tests
    cargo +nightly miri test -p vfnvme-ffi --features model --lib -- "${abi_tests[@]}"
else
    # Every registry test (all of them together take less than a minute under Miri): epoch
    # reclamation, and readers racing a writer, where Miri's data race detector looks.
    cargo +nightly miri test -p vfnvme --lib -- namespaces::registry_tests
    # One C ABI test (each takes 40 s or more under Miri): callbacks that submit from inside
    # the library's poll loop, the re-entry where an aliasing error would hide.
    cargo +nightly miri test -p vfnvme-ffi --features model --lib -- \
        abi_tests::callbacks_may_submit_but_not_poll
fi
