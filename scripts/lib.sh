# Shared by the scripts in this folder (sourced, not run).

# Fails unless root: the guest harness installs packages and starts QEMU with the host's root
# shared into the guest.
require_root() {
    if [ "$(id -u)" -ne 0 ]; then
        echo "error: $0 must run as root (it installs packages and boots QEMU guests): sudo $0" >&2
        exit 1
    fi
}

# Prints a step header.
step() {
    echo
    echo "==> $*"
}

# The Cargo profile of scripts/test-all.sh's every-time run (Cargo.toml's [profile.ci]: release
# with debug assertions and overflow checks), and so of .ci/run's guest preparation: the host
# tests, the guest test binaries, the `vfnvme` binary and the C library are one build.
# shellcheck disable=SC2034 # used by the scripts that source this file
TEST_PROFILE=ci

# Builds the vfnvme tool in the given Cargo profile (debug (= dev), release, ci, ...) and prints
# its path (target/<profile>/vfnvme, target/debug/vfnvme for dev).
build_vfnvme() {
    local profile=$1
    [ "$profile" = debug ] && profile=dev
    cargo build --profile "$profile" -p vfnvme-tools --bin vfnvme \
        --message-format=json-render-diagnostics |
        sed -n 's/.*"executable":"\([^"]*\/vfnvme\)".*/\1/p' | tail -n 1
}
