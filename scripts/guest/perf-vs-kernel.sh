#!/bin/sh
# Runs inside the `vfnvme vm --scenario sidebyside` guest: 4 KiB random reads on two identical
# QEMU null-co controllers, one driven by vfnvme over vfio-pci (0000:00:10.0), one by the kernel's
# nvme driver with fio and io_uring (0000:00:11.0), at QD1 and QD32; prints one table.
#
# Usage: scripts/guest/perf-vs-kernel.sh [VFNVME_BINARY]   (default target/release/vfnvme)
# Env:   VFNVME_PERF_TIME   seconds per run (default 5)
#        VFNVME_PERF_QDS    queue depths (default "1 32")
set -eu

vfnvme=${1:-target/release/vfnvme}
time_s=${VFNVME_PERF_TIME:-5}
qds=${VFNVME_PERF_QDS:-1 32}
vfio_bdf=$(echo "${VFNVME_VFIO_DEVICES:-}" | cut -d, -f1)
kernel_bdf=$(echo "${VFNVME_KERNEL_DEVICES:-}" | cut -d, -f1)
[ -n "$vfio_bdf" ] && [ -n "$kernel_bdf" ] || {
    echo "error: needs a controller on vfio-pci and one on nvme (scenario sidebyside)" >&2
    exit 2
}
kdev=
for ns in /sys/bus/pci/devices/"$kernel_bdf"/nvme/nvme*/nvme*n1; do
    [ -e "$ns" ] && kdev=/dev/${ns##*/}
done
[ -n "$kdev" ] && [ -b "$kdev" ] || {
    echo "error: no block device of the kernel's controller $kernel_bdf" >&2
    exit 2
}
out=$(mktemp -d /tmp/perf-vs-kernel.XXXXXX)

echo "vfnvme: $vfio_bdf (vfio-pci)   kernel: $kernel_bdf ($kdev, io_uring)   ${time_s} s per run, 4 KiB randread"
for qd in $qds; do
    echo "-- QD $qd: vfnvme"
    "$vfnvme" perf --device "$vfio_bdf" --qd "$qd" --time "$time_s" --json "$out/vfnvme-$qd.json" | grep -E "^(IOPS|latency)"
    echo "-- QD $qd: vfnvme, shadow doorbells on"
    "$vfnvme" perf --device "$vfio_bdf" --qd "$qd" --time "$time_s" --shadow-doorbells \
        --json "$out/vfnvme-shadow-$qd.json" | grep -E "^(IOPS|latency)"
    echo "-- QD $qd: fio io_uring on $kdev"
    fio --name=kernel --filename="$kdev" --ioengine=io_uring --direct=1 --rw=randread --bs=4k \
        --iodepth="$qd" --runtime="$time_s" --time_based --numjobs=1 \
        --eta=never --output-format=json --output="$out/fio-$qd.json"
    jq -r '.jobs[0].read | "IOPS \(.iops | floor)  mean lat \(.lat_ns.mean / 1000 | floor) us"' "$out/fio-$qd.json"
done

# One row: driver QD IOPS mean_us p99_us (p99 of fio is its completion latency, clat).
row() {
    case $1 in
        io_uring) jq -r --arg qd "$2" '.jobs[0].read | [$qd, .iops, .lat_ns.mean / 1000, .clat_ns.percentile["99.000000"] / 1000] | @tsv' "$out/fio-$2.json" ;;
        vfnvme) jq -r --arg qd "$2" '[$qd, .iops, .latency_ns.mean / 1000, .latency_ns.p99 / 1000] | @tsv' "$out/vfnvme-$2.json" ;;
        vfnvme-shadow) jq -r --arg qd "$2" '[$qd, .iops, .latency_ns.mean / 1000, .latency_ns.p99 / 1000] | @tsv' "$out/vfnvme-shadow-$2.json" ;;
    esac
}
echo
printf '%-26s %4s %12s %14s %13s %12s\n' driver QD IOPS "mean lat (us)" "p99 lat (us)" "x io_uring"
for qd in $qds; do
    base=$(row io_uring "$qd" | cut -f2)
    for d in vfnvme vfnvme-shadow io_uring; do
        row "$d" "$qd" | awk -F '\t' -v d="$d" -v base="$base" '{
            name = d; if (d == "vfnvme") name = "vfnvme (vfio, polled)";
            if (d == "vfnvme-shadow") name = "vfnvme, shadow doorbells";
            if (d == "io_uring") name = "kernel nvme + io_uring";
            printf "%-26s %4s %12.0f %14.1f %13.1f %11.2fx\n", name, $1, $2, $3, $4, (base > 0 ? $2 / base : 0) }'
    done
done
if [ -n "${VFNVME_OUT_DIR:-}" ] && [ -d "$VFNVME_OUT_DIR" ]; then
    cp "$out"/*.json "$VFNVME_OUT_DIR"/ && echo "JSON reports: $VFNVME_OUT_DIR"
fi
