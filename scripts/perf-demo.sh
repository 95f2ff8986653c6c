#!/usr/bin/env bash
# The main job of vfnvme, shown end to end: boot a QEMU guest whose emulated NVMe controller
# (QEMU null-co, 4 KiB blocks) sits on vfio-pci behind an emulated IOMMU, and look at the
# controller vfnvme drives there.
#
# Usage: scripts/perf-demo.sh [SCENARIO]   (default: null; e.g. sidebyside)
# Runs as root; installs QEMU, busybox, fio and a guest kernel on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
require_root

step "build vfnvme (release)"
vfnvme=$(build_vfnvme release)
[ -x "$vfnvme" ] || { echo "error: could not find the built vfnvme binary" >&2; exit 1; }

step "guest: the controller on vfio-pci"
"$vfnvme" vm --scenario "${1:-null}" -- scripts/guest/show-controllers.sh
