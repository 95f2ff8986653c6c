#!/usr/bin/env bash
# vfnvme with and without an IOMMU, same tool, same run: boots two QEMU guests one after the
# other with the same null-co controller (4 KiB LBAs), scenario null (emulated Intel IOMMU,
# vfio-pci) and scenario nullnoiommu (no IOMMU, uio_pci_generic after
# `vfnvme setup --no-iommu`), and runs `vfnvme perf` (4 KiB random reads, QD 1 and 32) in each.
# Prints one table (IOPS, mean and p99 latency, ratio to the IOMMU guest) and writes the reports
# as one JSON document.
#
# Usage: sudo scripts/perf-noiommu.sh [--json FILE]    (default target/perf-noiommu.json)
# Env:   VFNVME_PERF_TIME seconds per run (default 5), VFNVME_PERF_QDS (default "1 32"),
#        VFNVME_PERF_PROFILE cargo profile of the vfnvme binary (default release)
# Figures from emulation compare only within one run; they move with the host's load.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
require_root

json_out=target/perf-noiommu.json
while [ $# -gt 0 ]; do
    case $1 in
        --json) json_out=${2:?--json needs a file}; shift 2 ;;
        -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
command -v jq >/dev/null || { echo "error: needs jq (apt-get install jq)" >&2; exit 1; }

profile=${VFNVME_PERF_PROFILE:-release}
step "build vfnvme ($profile)"
vfnvme=$(build_vfnvme "$profile")
[ -x "$vfnvme" ] || { echo "error: could not find the built vfnvme binary" >&2; exit 1; }

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
for mode in iommu no-iommu; do
    scenario=null
    [ "$mode" = no-iommu ] && scenario=nullnoiommu
    step "guest $scenario: vfnvme perf, $mode, ${VFNVME_PERF_TIME:-5} s per run"
    if ! "$vfnvme" vm --scenario "$scenario" -- scripts/guest/perf-noiommu.sh "$mode" "$vfnvme" |
        tee "$logs/$mode.log"; then
        echo "error: the $mode guest failed (its log is above)" >&2
        exit 1
    fi
done

# The reports: {"iommu": {"1": {...}, "32": {...}}, "no-iommu": {...}}.
grep -h '^PERF-JSON ' "$logs"/*.log | tr -d '\r' |
    jq -Rn '[inputs | capture("^PERF-JSON (?<mode>[^ ]+) (?<qd>[0-9]+) (?<report>.*)$")
        | {mode, qd, report: (.report | fromjson)}]
        | reduce .[] as $r ({}; .[$r.mode][$r.qd] = $r.report)' > "$json_out"

step "vfnvme perf, 4 KiB random reads, with and without an IOMMU (one run)"
printf '%-34s %4s %12s %14s %13s %10s\n' mode QD IOPS "mean lat (us)" "p99 lat (us)" "x iommu"
for qd in ${VFNVME_PERF_QDS:-1 32}; do
    for mode in iommu no-iommu; do
        jq -r --arg m "$mode" --arg qd "$qd" '
            (.iommu[$qd].iops // 0) as $base | .[$m][$qd] // empty
            | [$m, $qd, .iops, .latency_ns.mean / 1000, .latency_ns.p99 / 1000,
               (if $base > 0 then .iops / $base else 0 end)] | @tsv' "$json_out" |
            awk -F '\t' '{
                name = ($1 == "iommu") ? "iommu (vfio-pci, emulated VT-d)" : "no-iommu (uio_pci_generic)";
                printf "%-34s %4s %12.0f %14.1f %13.1f %9.2fx\n", name, $2, $3, $4, $5, $6 }'
    done
done
echo "JSON: $json_out"
