#!/usr/bin/env bash
# The main job of vfnvme, shown end to end: boot a QEMU guest whose emulated NVMe controller
# (QEMU null-co, 4 KiB blocks) sits on vfio-pci behind an emulated IOMMU, and measure it with
# `vfnvme perf`: 4 KiB random reads at QD1 and QD32, IOPS and latency.
#
# Usage: scripts/perf-demo.sh [SCENARIO]   (default: null)
# Env:   VFNVME_PERF_TIME seconds per run (default 3)
# Runs as root; installs QEMU, busybox, fio and a guest kernel on first use.
# For vfnvme against the kernel's driver on identical hardware: scripts/perf-vs-kernel.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
require_root

step "build vfnvme (release)"
vfnvme=$(build_vfnvme release)
[ -x "$vfnvme" ] || { echo "error: could not find the built vfnvme binary" >&2; exit 1; }

step "guest: vfnvme perf on the controller on vfio-pci"
"$vfnvme" vm --scenario "${1:-null}" -- scripts/guest/perf-demo.sh "$vfnvme"
