#!/bin/sh
# Runs inside the `vfnvme vm` guest: prints the guest's view of the scenario's NVMe controllers
# (an lspci-like summary from sysfs) and of the hugepages, so a run shows what vfnvme drives.
set -eu

show() {
    bdf=$1
    dev=/sys/bus/pci/devices/$bdf
    if [ ! -e "$dev" ]; then
        echo "$bdf: not present in the guest"
        return 1
    fi
    driver=$(readlink "$dev/driver" 2>/dev/null || echo none)
    group=$(readlink "$dev/iommu_group" 2>/dev/null || echo none)
    # BAR0: first line of `resource` is "start end flags".
    read -r bar0_start bar0_end _ < "$dev/resource"
    bar0_size=$(( bar0_end - bar0_start + 1 ))
    echo "$bdf  vendor $(cat "$dev/vendor") device $(cat "$dev/device") class $(cat "$dev/class")"
    echo "    driver: ${driver##*/}   IOMMU group: ${group##*/} (/dev/vfio/${group##*/}: $([ -e "/dev/vfio/${group##*/}" ] && echo present || echo missing))"
    echo "    BAR0: $bar0_start, $bar0_size bytes   NUMA node: $(cat "$dev/numa_node")"
    for ctrl in "$dev"/nvme/nvme*; do
        [ -e "$ctrl" ] || continue
        echo "    kernel ${ctrl##*/}: serial '$(cat "$ctrl/serial" | tr -s ' ')' model '$(cat "$ctrl/model" | tr -s ' ')' fw $(cat "$ctrl/firmware_rev")"
    done
}

echo "guest: $(uname -sr), $(nproc) CPUs, scenario ${VFNVME_SCENARIO:-?}"
echo "hugepages: $(awk '/HugePages_Total/ { print $2 }' /proc/meminfo) x $(awk '/Hugepagesize/ { print $2, $3 }' /proc/meminfo)"
echo "expected: serial ${VFNVME_EXPECT_SERIAL:-?}, model '${VFNVME_EXPECT_MODEL:-?}', namespaces (nsid:blocks:lba) ${VFNVME_EXPECT_NS:-?}"
status=0
for bdf in $(echo "${VFNVME_VFIO_DEVICES:-}" "${VFNVME_KERNEL_DEVICES:-}" | tr ', ' '  '); do
    show "$bdf" || status=1
done
exit $status
