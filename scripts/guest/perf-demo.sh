#!/bin/sh
# Runs inside the `vfnvme vm` guest: shows the controller, then `vfnvme perf` 4 KiB random
# reads at QD1 and QD32 on the first controller on vfio-pci.
#
# Usage: scripts/guest/perf-demo.sh [VFNVME_BINARY]   (default target/release/vfnvme)
# Env:   VFNVME_PERF_TIME seconds per run (default 3)
set -eu
vfnvme=${1:-target/release/vfnvme}
time_s=${VFNVME_PERF_TIME:-3}
bdf=$(echo "${VFNVME_VFIO_DEVICES:-}" | cut -d, -f1)
[ -n "$bdf" ] || { echo "error: no controller on vfio-pci in this guest" >&2; exit 2; }

"$(dirname "$0")/show-controllers.sh"
echo
"$vfnvme" identify "$bdf"
for qd in 1 32; do
    echo
    echo "== vfnvme perf --device $bdf --qd $qd --time $time_s (4 KiB randread)"
    "$vfnvme" perf --device "$bdf" --qd "$qd" --time "$time_s"
done
