#!/usr/bin/env bash
# vfnvme against the kernel, on identical hardware in ONE QEMU guest (scenario sidebyside):
# 0000:00:10.0 on vfio-pci driven by `vfnvme perf`, 0000:00:11.0 on the kernel's nvme driver
# driven by fio with io_uring; both QEMU null-co controllers with 4 KiB LBAs. 4 KiB random reads
# at QD1 and QD32; prints one table (IOPS, mean and p99 latency, ratio to io_uring).
#
# Usage: sudo scripts/perf-vs-kernel.sh
# Env:   VFNVME_PERF_TIME=SECONDS per run (default 5; e.g. 2 for a quick look)
#        VFNVME_PERF_QDS="1 32" queue depths
# Figures from emulation compare only within one run; they move with the host's load.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
require_root

step "build vfnvme (release)"
vfnvme=$(build_vfnvme release)
[ -x "$vfnvme" ] || { echo "error: could not find the built vfnvme binary" >&2; exit 1; }

step "guest (sidebyside): vfnvme perf vs fio io_uring, ${VFNVME_PERF_TIME:-5} s per run"
"$vfnvme" vm --scenario sidebyside -- scripts/guest/perf-vs-kernel.sh "$vfnvme"
