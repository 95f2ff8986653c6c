#!/usr/bin/env bash
# fio side by side in ONE QEMU guest (scenario `sidebyside`): controller 00:10.0 on vfio-pci
# (driven by vfnvme through its fio engine) and the identical controller 00:11.0 on the kernel
# nvme driver (io_uring, io_uring with hipri polling, io_uring_cmd on /dev/ngXn1, libaio), plus
# fio's null engine as the ceiling. 4 KiB random reads, 1 job, iodepth 1 and 32.
#
# The jobs are ffi/fio/sidebyside.fio, one section per engine (run with --section).
# Prints: engine, QD, IOPS, mean latency (total, lat_ns), p99 completion latency (clat_ns),
# ratio of IOPS to io_uring and share of fio's null-engine ceiling at the same QD. Figures from
# emulation compare only within a run.
#
# Environment: SBS_SECONDS (runtime per run, default 5), SBS_QDS (default "1 32"),
# SBS_ENGINES (subset of: vfnvme io_uring io_uring_hipri io_uring_cmd libaio null),
# SBS_POLL_QUEUES (nvme poll queues for hipri, default 2), VFNVME_VM (vfnvme binary; default
# target/debug/vfnvme, built here), PROFILE (Cargo profile of the engine's library, ffi/fio/build.sh).
# The JSON of every run and the table stay in the run's output folder (printed at the end).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${SBS_SECONDS:-5}
qds=${SBS_QDS:-"1 32"}
engines=${SBS_ENGINES:-"vfnvme io_uring io_uring_hipri io_uring_cmd libaio null"}

# ---------------------------------------------------------------- guest side
if [[ "${1:-}" == --guest ]]; then
    out=${VFNVME_OUT_DIR:?run this through vfnvme vm}/sidebyside
    mkdir -p "$out"
    engine_so=$2
    vfio_bdf=${VFNVME_VFIO_DEVICES%% *}
    vfio_bdf=${vfio_bdf%%,*}
    kern_bdf=${VFNVME_KERNEL_DEVICES%% *}
    kern_bdf=${kern_bdf%%,*}
    vfio_bdf=${vfio_bdf:-0000:00:10.0}
    kern_bdf=${kern_bdf:-0000:00:11.0}
    ctrl_dir=$( (ls -d /sys/bus/pci/devices/$kern_bdf/nvme/nvme* 2>/dev/null || true) | head -n1)
    [[ -n "$ctrl_dir" ]] || { echo "sidebyside: no kernel nvme controller at $kern_bdf" >&2; exit 1; }
    ctrl=${ctrl_dir##*/}

    # Polled queues for hipri: nvme's poll_queues is writable at run time and read when a
    # controller is probed, so rebind the kernel's controller after setting it. (A controller
    # reset also re-creates the queues, but under QEMU with interrupt remapping it leaves the
    # interrupt-driven queues nearly dead, so rebinding it is.)
    poll=${SBS_POLL_QUEUES:-2}
    if [[ " $engines " == *" io_uring_hipri "* ]]; then
        if echo "$poll" >/sys/module/nvme/parameters/poll_queues 2>/dev/null &&
            echo "$kern_bdf" >/sys/bus/pci/drivers/nvme/unbind 2>/dev/null &&
            echo "$kern_bdf" >/sys/bus/pci/drivers/nvme/bind 2>/dev/null; then
            ctrl=""
            for _ in $(seq 200); do
                ctrl_dir=$( (ls -d /sys/bus/pci/devices/$kern_bdf/nvme/nvme* 2>/dev/null || true) | head -n1)
                ctrl=${ctrl_dir##*/}
                [[ -n "$ctrl" && "$(cat /sys/class/nvme/$ctrl/state 2>/dev/null)" == live ]] && break
                sleep 0.1
            done
        else
            echo "sidebyside: could not enable $poll nvme poll queues; hipri will fall back to interrupts" >&2
        fi
        dmesg | grep -E "$ctrl: .*poll queues" | tail -n1 || true
    fi
    ns=""
    for _ in $(seq 100); do
        ns=$( (ls -d /sys/class/nvme/$ctrl/${ctrl}n* /sys/class/nvme/$ctrl/nvme*c*n* 2>/dev/null || true) | head -n1)
        [[ -n "$ns" && -e /dev/${ns##*/} ]] && break
        sleep 0.1
    done
    blk=/dev/${ns##*/}
    [[ -e "$blk" ]] || { echo "sidebyside: no block device for $ctrl" >&2; exit 1; }
    ngdev=/dev/ng${ctrl#nvme}n1
    cd "$out"
    echo "sidebyside: vfnvme on $vfio_bdf, kernel on $kern_bdf ($blk, $ngdev), ${seconds}s per run"

    # The exact jobs: ffi/fio/sidebyside.fio, one section per engine.
    jobfile=$root/ffi/fio/sidebyside.fio
    export VFNVME_FIO_ENGINE=$engine_so SBS_TRADDR=${vfio_bdf//:/.} SBS_BLK=$blk SBS_NG=$ngdev
    export SBS_SECONDS=$seconds
    failures=0
    for qd in $qds; do
        for e in $engines; do
            case $e in
            vfnvme | io_uring | io_uring_hipri | io_uring_cmd | libaio | null) ;;
            *) echo "sidebyside: unknown engine $e" >&2; exit 2 ;;
            esac
            json=$out/$e-qd$qd.json
            if ! SBS_QD=$qd fio "--section=$e" --output-format=json "--output=$json" "$jobfile" \
                >"$out/$e-qd$qd.log" 2>&1; then
                echo "sidebyside: $e qd $qd failed:" >&2
                tail -n 5 "$out/$e-qd$qd.log" "$json" >&2 || true
                rm -f "$json"
                failures=$((failures + 1))
            fi
        done
    done
    python3 - "$out" "$qds" "$engines" <<'EOF' | tee "$out/table.txt"
import json, os, sys
out, qds, engines = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def load(e, qd):
    try:
        with open(os.path.join(out, f"{e}-qd{qd}.json")) as f:
            text = f.read()
        r = json.loads(text[text.index("{"):])["jobs"][0]["read"]
        return r["iops"], r["lat_ns"]["mean"] / 1000, r["clat_ns"].get("percentile", {}).get("99.000000", 0) / 1000
    except Exception:
        return None
print(f"{'engine':<16}{'QD':>4}{'IOPS':>12}{'mean lat us':>14}{'p99 clat us':>14}{'vs io_uring':>13}{'of null':>9}")
for qd in qds:
    base = load("io_uring", qd)
    ceiling = load("null", qd)
    for e in engines:
        r = load(e, qd)
        if r is None:
            print(f"{e:<16}{qd:>4}{'failed':>12}")
            continue
        ratio = f"{r[0] / base[0]:.2f}x" if base and base[0] else "-"
        share = f"{100 * r[0] / ceiling[0]:.0f}%" if ceiling and ceiling[0] else "-"
        print(f"{e:<16}{qd:>4}{r[0]:>12.0f}{r[1]:>14.1f}{r[2]:>14.1f}{ratio:>13}{share:>9}")
EOF
    # A run that failed fails the script (the table still shows the others).
    [[ $failures -eq 0 ]] || { echo "sidebyside: $failures run(s) failed" >&2; exit 1; }
    exit 0
fi

# ---------------------------------------------------------------- host side
cd "$root"
vm=${VFNVME_VM:-}
if [[ -z "$vm" ]]; then
    cargo build -q -p vfnvme-tools
    vm=$root/target/debug/vfnvme
fi
engine_so=$("$root/ffi/fio/build.sh" | tail -n1)
"$vm" vm --scenario sidebyside \
    --env "SBS_SECONDS=$seconds" --env "SBS_QDS=$qds" --env "SBS_ENGINES=$engines" \
    --env "SBS_POLL_QUEUES=${SBS_POLL_QUEUES:-2}" \
    -- "$root/scripts/fio-side-by-side.sh" --guest "$engine_so"
