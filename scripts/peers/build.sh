#!/usr/bin/env bash
# Builds the peers that scripts/peers/side-by-side.sh measures vfnvme against, from source trees
# given by path, into target/peers/ (never into tracked files, never in CI):
#   - libvfn's perf example                      -> target/peers/bin/libvfn-perf
#   - DPDK (static, only what SPDK's NVMe path needs) -> target/peers/dpdk/ (install prefix)
#   - SPDK's spdk_nvme_perf                      -> target/peers/bin/spdk_nvme_perf
#   - SPDK's fio plugin (ioengine spdk_nvme)     -> target/peers/bin/spdk_nvme (fio ioengine=PATH)
#   - vfnvme's own fio engine (ffi/fio/build.sh) -> target/fio/vfnvme_fio.so
#
# Usage: scripts/peers/build.sh [libvfn] [dpdk] [spdk] [vfnvme]   (default: all four, in that order)
#
# Environment (source trees, checked before anything is built):
#   LIBVFN_SRC  SamsungDS/libvfn tree (tested: v5.1.0)
#   DPDK_SRC    DPDK/dpdk tree (tested: v25.07, the version SPDK 25.09's CHANGELOG names)
#   SPDK_SRC    spdk/spdk tree (tested: v25.09), without submodules
#   FIO_SRC     fio source tree; default: the one ffi/fio/build.sh uses (Debian's fio 3.33,
#               fetched into target/fio-src/ by `apt-get source fio`), so both fio engines are
#               built against the fio that runs them
#   PEERS_OUT   output folder (default target/peers)
#   PEERS_NO_APT=1  don't install Debian packages (they must be there already)
#
# What is changed in the source trees: nothing. libvfn and DPDK are built out of tree (meson
# build folders under PEERS_OUT). SPDK builds in its own tree, so SPDK_SRC is copied to
# PEERS_OUT/spdk and built there; in that COPY ONLY, `configure` is edited so that a missing
# isa-l submodule turns ISA-L off instead of stopping (see patch_spdk_configure below).
#
# Needs root for apt-get (as the rest of the guest harness does). Build facts: docs/peers.md.
set -euo pipefail
shopt -s inherit_errexit

root=$(cd "$(dirname "$0")/../.." && pwd)
out=${PEERS_OUT:-${CARGO_TARGET_DIR:-$root/target}/peers}
jobs=${JOBS:-$(nproc)}
# DPDK's meson build imports pyelftools: Debian's python3 has it (python3-pyelftools), a python3
# from pyenv or a venv on PATH does not. The peers build with the system's tools only (sys).
sys() { PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }

die() {
    echo "peers/build.sh: error: $*" >&2
    exit 1
}
note() { echo "peers/build.sh: $*" >&2; }

# Checks that the variable named $1 points at a source tree holding file $2 (relative).
need_tree() {
    local var=$1 marker=$2 what=$3 dir=${!1:-}
    [[ -n "$dir" ]] || die "$var is not set: give the path of a $what source tree, e.g. $var=/work/peers-src/... $0"
    [[ -d "$dir" ]] || die "$var=$dir: no such folder"
    [[ -f "$dir/$marker" ]] || die "$var=$dir does not look like a $what tree (no $marker)"
    (cd "$dir" && pwd)
}

apt_install() {
    [[ "${PEERS_NO_APT:-0}" == 1 ]] && return
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [[ ${#missing[@]} -eq 0 ]] && return
    [[ $(id -u) -eq 0 ]] || die "missing Debian packages ${missing[*]}: install them (apt-get install) or run as root"
    note "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
}

build_libvfn() {
    local src
    src=$(need_tree LIBVFN_SRC examples/perf.c libvfn)
    apt_install meson ninja-build pkg-config libnvme-dev libjson-c-dev build-essential
    local b=$out/libvfn-build
    if [[ ! -f "$b/build.ninja" ]]; then
        sys meson setup "$b" "$src" --buildtype=release -Ddefault_library=static -Dlibnvme=enabled >"$out/libvfn-setup.log" 2>&1 ||
            { tail -n 20 "$out/libvfn-setup.log" >&2; die "meson setup of libvfn failed (log $out/libvfn-setup.log)"; }
    fi
    sys ninja -C "$b" -j "$jobs" examples/perf >"$out/libvfn-build.log" 2>&1 ||
        { tail -n 20 "$out/libvfn-build.log" >&2; die "building libvfn's perf failed (log $out/libvfn-build.log)"; }
    install -D -m 755 "$b/examples/perf" "$out/bin/libvfn-perf"
    note "libvfn perf: $out/bin/libvfn-perf"
}

spdk_packages() {
    apt_install libnuma-dev uuid-dev libssl-dev libaio-dev libncurses-dev libjson-c-dev \
        python3-pyelftools meson ninja-build pkg-config build-essential
}

build_dpdk() {
    local src
    src=$(need_tree DPDK_SRC lib/eal/include/rte_eal.h DPDK)
    spdk_packages
    local b=$out/dpdk-build prefix=$out/dpdk
    if [[ -f "$prefix/lib/pkgconfig/libdpdk.pc" ]]; then
        note "DPDK already installed in $prefix (remove it to rebuild)"
        return
    fi
    if [[ ! -f "$b/build.ninja" ]]; then
        # Static, for a generic x86-64 CPU with SSE4.2 (corei7), so that the binaries run in a
        # QEMU guest whose CPU is not the host's; only the libraries and drivers SPDK's
        # PCIe NVMe path links.
        sys meson setup "$b" "$src" --prefix="$prefix" --libdir=lib -Dcpu_instruction_set=corei7 \
            -Ddefault_library=static -Dtests=false -Denable_docs=false -Denable_kmods=false \
            -Ddisable_apps='*' -Dexamples= \
            -Denable_libs=eal,ring,mempool,pci,log,kvargs,telemetry,power,timer,ethdev,net,mbuf,rcu \
            -Denable_drivers=bus/pci,bus/vdev,mempool/ring,power/acpi,power/amd_pstate,power/cppc,power/intel_pstate,power/intel_uncore,power/kvm_vm \
            -Dc_args=-fPIC >"$out/dpdk-setup.log" 2>&1 ||
            { tail -n 20 "$out/dpdk-setup.log" >&2; die "meson setup of DPDK failed (log $out/dpdk-setup.log)"; }
    fi
    note "building DPDK (a few minutes on 2 cores)"
    sys ninja -C "$b" -j "$jobs" install >"$out/dpdk-build.log" 2>&1 ||
        { tail -n 20 "$out/dpdk-build.log" >&2; die "building DPDK failed (log $out/dpdk-build.log)"; }
    note "DPDK: $prefix"
}

# SPDK's configure stops when the isa-l submodule is missing (a source archive or a clone without
# `--recursive` has none) and has no option to go on without it. In the copy only, the `exit 1`
# after its "ISA-L is required but was not found" message becomes `CONFIG[ISAL]=n`, the same
# setting configure already falls back to when nasm is too old. The NVMe PCIe driver, perf and the
# fio plugin don't use ISA-L (it serves the accel, compression and crypto modules, all off here).
patch_spdk_configure() {
    local cfg=$1/configure
    if [[ -f "$1/isa-l/autogen.sh" ]] || grep -q 'vfnvme peers/build.sh' "$cfg"; then
        return # the submodule is there, or the copy is patched already
    fi
    python3 - "$cfg" <<'EOF' || die "could not patch $cfg: its ISA-L check is not the one SPDK 25.09 has; edit it by hand"
import sys
path = sys.argv[1]
text = open(path).read()
old = ('\t\techo "and then re-run this script."\n'
       '\t\texit 1\n')
new = ('\t\techo "and then re-run this script."\n'
       '\t\techo "(vfnvme peers/build.sh: going on with ISA-L off; the NVMe PCIe driver does not need it)"\n'
       '\t\tCONFIG[ISAL]=n\n')
if text.count(old) < 1 or 'ISA-L is required but was not found' not in text:
    sys.exit(1)
i = text.index('ISA-L is required but was not found')
j = text.index(old, i)
open(path, 'w').write(text[:j] + new + text[j + len(old):])
EOF
    # The nasm check that follows the patched block only ever sets ISAL=n: nothing else to do.
    note "patched $cfg: a missing isa-l submodule turns ISA-L off"
}

fio_tree() {
    if [[ -n "${FIO_SRC:-}" ]]; then
        [[ -f "$FIO_SRC/ioengines.h" ]] || die "FIO_SRC=$FIO_SRC is not a fio source tree (no ioengines.h)"
        (cd "$FIO_SRC" && pwd)
        return
    fi
    local tree
    # No fio-src folder yet (a fresh checkout) is not an error: pipefail would make it one.
    tree=$(find "${CARGO_TARGET_DIR:-$root/target}/fio-src" -maxdepth 1 -type d -name 'fio-*' 2>/dev/null | sort | tail -n1 || true)
    if [[ -z "$tree" || ! -f "$tree/ioengines.h" ]]; then
        note "no fio tree yet: running ffi/fio/build.sh to fetch Debian's fio source"
        "$root/ffi/fio/build.sh" >/dev/null
        tree=$(find "${CARGO_TARGET_DIR:-$root/target}/fio-src" -maxdepth 1 -type d -name 'fio-*' | sort | tail -n1)
    fi
    [[ -f "$tree/ioengines.h" ]] || die "no fio source tree found; set FIO_SRC"
    echo "$tree"
}

build_spdk() {
    local src fio
    src=$(need_tree SPDK_SRC app/spdk_nvme_perf/perf.c SPDK)
    [[ -f "$out/dpdk/lib/pkgconfig/libdpdk.pc" ]] || die "no DPDK in $out/dpdk: run '$0 dpdk' (with DPDK_SRC) first"
    spdk_packages
    fio=$(fio_tree)
    [[ -f "$fio/config-host.h" ]] || (cd "$fio" && ./configure --disable-native >/dev/null) ||
        die "configuring the fio tree $fio failed"
    local s=$out/spdk
    mkdir -p "$s"
    # Copy (rsync-like, keeps objects of an earlier build when the sources did not change).
    cp -a -u "$src/." "$s/"
    patch_spdk_configure "$s"
    local without=()
    for f in vhost virtio crypto idxd rdma nvme-cuse fsdev aio-fsdev uring xnvme ublk usdt shared \
        ocf vfio-user iscsi-initiator avahi golang sma; do
        without+=("--without-$f")
    done
    if [[ ! -f "$s/mk/config.mk" || "$s/configure" -nt "$s/mk/config.mk" ]]; then
        (cd "$s" && sys ./configure --target-arch=corei7 --with-dpdk="$out/dpdk" --with-fio="$fio" \
            --disable-tests --disable-unit-tests "${without[@]}") >"$out/spdk-configure.log" 2>&1 ||
            { tail -n 20 "$out/spdk-configure.log" >&2; die "SPDK's configure failed (log $out/spdk-configure.log)"; }
    fi
    # The generated headers and the build folders, as the top-level `make` makes them first.
    sys make -C "$s" mk/cc.mk build_dir include/spdk/config.h include/spdk/version.h >"$out/spdk-build.log" 2>&1 ||
        { tail -n 30 "$out/spdk-build.log" >&2; die "SPDK's generated headers failed (log $out/spdk-build.log)"; }
    # Only what spdk_nvme_perf and the NVMe fio plugin link.
    local d
    for d in lib/log lib/util lib/dma lib/json lib/jsonrpc lib/rpc lib/trace lib/keyring lib/sock \
        lib/thread lib/vmd lib/env_dpdk lib/nvme module/sock/posix module/keyring/file \
        app/spdk_nvme_perf app/fio/nvme; do
        sys make -C "$s/$d" -j "$jobs" >>"$out/spdk-build.log" 2>&1 ||
            { tail -n 30 "$out/spdk-build.log" >&2; die "building SPDK's $d failed (log $out/spdk-build.log)"; }
    done
    install -D -m 755 "$s/build/bin/spdk_nvme_perf" "$out/bin/spdk_nvme_perf"
    install -D -m 755 "$s/build/fio/spdk_nvme" "$out/bin/spdk_nvme"
    note "SPDK: $out/bin/spdk_nvme_perf, fio plugin $out/bin/spdk_nvme (built against $fio)"
}

build_vfnvme() {
    FIO_SRC=$(fio_tree) "$root/ffi/fio/build.sh" >/dev/null
    (cd "$root" && cargo build -q --release -p vfnvme-tools --bin vfnvme)
    note "vfnvme: $root/target/release/vfnvme, fio engine $root/target/fio/vfnvme_fio.so"
}

what=("$@")
[[ ${#what[@]} -gt 0 ]] || what=(libvfn dpdk spdk vfnvme)
# Check every source path first, so a typo fails at once rather than after DPDK's build.
for w in "${what[@]}"; do
    case $w in
    libvfn) need_tree LIBVFN_SRC examples/perf.c libvfn >/dev/null ;;
    dpdk) [[ -f "$out/dpdk/lib/pkgconfig/libdpdk.pc" ]] || need_tree DPDK_SRC lib/eal/include/rte_eal.h DPDK >/dev/null ;;
    spdk) need_tree SPDK_SRC app/spdk_nvme_perf/perf.c SPDK >/dev/null ;;
    vfnvme) ;;
    *) die "unknown part '$w': choose from libvfn dpdk spdk vfnvme" ;;
    esac
done
mkdir -p "$out/bin"
for w in "${what[@]}"; do
    "build_$w"
done
