#!/usr/bin/env bash
# The C ABI and the fio engine on real (emulated) devices: boots one guest (scenario `pair`:
# two raw-image controllers on vfio-pci) and runs ffi/examples/hello, ffi/examples/bounds and
# ffi/examples/iovec against 00:10.0, then a fio crc32c verify job spanning both controllers (one
# file each), a short randread, and a randread whose target comes from the engine's options table.
# Exits non-zero on failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

if [[ "${1:-}" == --guest ]]; then
    hello=$2 engine=$3
    cd "${VFNVME_OUT_DIR:?run this through vfnvme vm}"
    "$hello" 0000:00:10.0
    # Reads past the end of a buffer, or into a freed one, are refused (issue 9).
    "$(dirname "$hello")/bounds" 0000:00:10.0
    # iovecs of 2..16 odd pieces through readv/writev, prefer_sgl off and on (QEMU has SGLs).
    "$(dirname "$hello")/iovec" 0000:00:10.0
    # No IOMMU (DMAR) fault from any of it.
    if dmesg | grep -E 'DMAR.*(fault|Request device)'; then
        echo "ffi-guest-check: the IOMMU logged DMA faults" >&2
        exit 1
    fi
    fio --ioengine=external:"$engine" --thread=1 --name=verify-two-controllers \
        "--filename=trtype=PCIe traddr=0000.00.10.0 ns=1:0000.00.11.0/1" \
        --rw=randwrite --bsrange=512-256k --iodepth=16 --size=32m \
        --verify=crc32c --verify_fatal=1 --output-format=json --output=verify.json
    fio --ioengine=external:"$engine" --thread=1 --name=randread \
        "--filename=trtype=PCIe traddr=0000.00.10.0 ns=1" --rw=randread --bs=4k --iodepth=32 \
        --time_based=1 --runtime=2 --output-format=json --output=randread.json
    # The target from the engine's options table alone (no filename: fio names the file after
    # the job), with the admin timeout option and enable_sgl (QEMU has SGLs: the engine says
    # every I/O goes with them), on the second controller.
    fio --ioengine=external:"$engine" --thread=1 --name=options-table --trtype=PCIe \
        --traddr=0000.00.11.0 --ns=1 --admin_timeout_ms=10000 --enable_sgl=1 --rw=randread \
        --bs=4k --iodepth=8 --number_ios=2000 --output-format=json --output=options.json \
        2>&1 | tee options.log
    grep -q "enable_sgl=1: every read and write goes with SGLs" options.log options.json
    python3 - <<'PY'
import json
for name in ("verify", "randread", "options"):
    text = open(f"{name}.json").read()
    for j in json.loads(text[text.index("{"):])["jobs"]:
        print(f'{j["jobname"]}: error {j["error"]}, read {j["read"]["io_bytes"] >> 10} KiB, '
              f'write {j["write"]["io_bytes"] >> 10} KiB, read IOPS {j["read"]["iops"]:.0f}')
        assert j["error"] == 0 and j["read"]["io_bytes"] > 0, f"{name} failed"
PY
    echo "ffi-guest-check: OK"
    exit 0
fi

cd "$root"
# VFNVME_VM: the vfnvme binary that boots the guest (test-all.sh's); else target/debug's, built
# here. PROFILE: the Cargo profile of the C library (ffi/build-lib.sh; release by default).
vm=${VFNVME_VM:-}
if [[ -z "$vm" ]]; then
    cargo build -q -p vfnvme-tools
    vm=$root/target/debug/vfnvme
fi
hello=$("$root/ffi/build-example.sh" | tail -n1)
engine=$("$root/ffi/fio/build.sh" | tail -n1)
"$vm" vm --scenario pair -- "$root/scripts/ffi-guest-check.sh" --guest "$hello" "$engine"
