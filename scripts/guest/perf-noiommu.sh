#!/bin/sh
# Runs inside a guest of scripts/perf-noiommu.sh: `vfnvme perf`, 4 KiB random reads at each
# queue depth, on the scenario's one null-co controller, and prints each report as one line
# `PERF-JSON MODE QD {...}` for the host to collect.
#   iommu:    scenario null, the controller on vfio-pci behind the emulated IOMMU;
#   no-iommu: scenario nullnoiommu (no IOMMU), the controller bound here with
#             `vfnvme setup --no-iommu` (uio_pci_generic) and measured with --no-iommu.
#
# Usage: scripts/guest/perf-noiommu.sh iommu|no-iommu VFNVME_BINARY
# Env:   VFNVME_PERF_TIME seconds per run (default 5), VFNVME_PERF_QDS (default "1 32")
set -eu

mode=$1
vfnvme=$2
time_s=${VFNVME_PERF_TIME:-5}
qds=${VFNVME_PERF_QDS:-1 32}
out=$(mktemp -d /tmp/perf-noiommu.XXXXXX)
case $mode in
    iommu)
        bdf=$(echo "${VFNVME_VFIO_DEVICES:-}" | cut -d, -f1)
        flag=
        ;;
    no-iommu)
        bdf=$(echo "${VFNVME_KERNEL_DEVICES:-}" | cut -d, -f1)
        flag=--no-iommu
        [ -n "$bdf" ] && "$vfnvme" setup --no-iommu "$bdf"
        ;;
    *)
        echo "error: mode $mode is neither iommu nor no-iommu" >&2
        exit 2
        ;;
esac
[ -n "$bdf" ] || {
    echo "error: no controller for mode $mode (scenario null or nullnoiommu)" >&2
    exit 2
}
for qd in $qds; do
    echo "-- $mode, QD $qd, $bdf"
    # shellcheck disable=SC2086 # $flag is empty or one word
    "$vfnvme" perf $flag --device "$bdf" --qd "$qd" --io-size 4k --pattern randread \
        --time "$time_s" --json "$out/$qd.json" | grep -E "^(IOPS|latency)"
    echo "PERF-JSON $mode $qd $(jq -c . "$out/$qd.json")"
done
