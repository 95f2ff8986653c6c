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

# Builds the vfnvme tool in the given profile ("debug" or "release") and prints its path.
build_vfnvme() {
    local profile_flag=()
    [ "$1" = release ] && profile_flag=(--release)
    cargo build "${profile_flag[@]}" -p vfnvme-tools --bin vfnvme \
        --message-format=json-render-diagnostics |
        sed -n 's/.*"executable":"\([^"]*\/vfnvme\)".*/\1/p' | tail -n 1
}
