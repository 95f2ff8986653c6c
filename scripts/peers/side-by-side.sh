#!/usr/bin/env bash
# vfnvme against its peers, side by side in ONE QEMU guest (scenario `peers`: five identical
# null-co controllers with 4 KiB LBAs on vfio-pci), 4 KiB random reads, one thread, each tool on
# its own controller, the tools alternating (round by round, queue depth by queue depth):
#
#   tool         controller  what runs
#   vfnvme       00:10.0     vfnvme perf
#   libvfn       00:11.0     libvfn's examples/perf
#   spdk         00:12.0     SPDK's spdk_nvme_perf -L
#   fio-vfnvme   00:13.0     fio 3.33 with vfnvme's engine (ffi/fio)
#   fio-spdk     00:14.0     fio 3.33 with SPDK's fio plugin (spdk_nvme)
#
# Two more fio rows, not in the default set, show how much of a fio row is fio's and QEMU's:
#   fio-model    (none)      fio + vfnvme's engine on the in-memory controller model: the engine,
#                            C ABI and driver with no device round trip (the model's own work,
#                            8-10 us per command under TCG, is in it: a ceiling only where fio's
#                            clock or the device's round trip outweighs that)
#   fio-null     (none)      fio's own null engine: no engine work at all (fio's ceiling)
#
# Prints one table: tool, QD, IOPS, mean latency, p99 latency, and the ratio of IOPS to the best
# peer at that QD (perf tools: the better of libvfn and spdk_nvme_perf; fio rows: fio-spdk).
# Build everything first with scripts/peers/build.sh; usage and caveats are in docs/peers.md.
#
# Usage: scripts/peers/side-by-side.sh [OPTIONS]          (as root: it boots a QEMU guest)
#   --setup harness   the project's harness as it is: QEMU with a 1 ns timer slack, guest
#                     clocksource tsc (default)
#   --setup defaults  plain QEMU: QEMU's inherited timer slack (`vfnvme vm --qemu-defaults`) and
#                     the clocksource a guest on QEMU's default CPU model gets, hpet (see below)
#   --setup busy      the harness, plus a CPU load of the host's size (one busy loop per host
#                     CPU) running beside QEMU for the whole run, the same for every tool
#   --busy            add that load to any setup
#   --clocksource CS  switch the guest to clocksource CS (tsc, hpet, acpi_pm) before the runs
#   --seconds N       measured seconds per run (default 5)
#   --qds "1 32"      queue depths (default "1 32")
#   --rounds N        rounds of all tools (default 1); with more, each row is the run with the
#                     median IOPS (the lower middle one for an even count); the JSON keeps every run
#   --tools "..."     subset/order of: vfnvme libvfn spdk fio-vfnvme fio-spdk (default all), and
#                     the ceilings fio-model fio-null
#   --json FILE       also write the results as JSON
#   --timeout S       guest timeout in seconds (default 2400)
#   --vfnvme-args "…" extra arguments for every `vfnvme perf` run (A/B experiments, e.g.
#                     "--clock tsc"); the table's label says they were given
#   --fio-args "…"    extra arguments for both fio runs (e.g. "--clocksource=cpu"); in the label
#   --vfnvme-cpus L   the guest CPUs vfnvme perf is pinned to (default 0, as spdk_nvme_perf's
#                     core mask 0x1; "none": not pinned, as libvfn's perf and fio); in the label
#   --vfnvme-variant "…"  one more vfnvme perf row with these extra arguments (repeatable: A/B of
#                     several variants in one boot, each run right after vfnvme perf in each
#                     round, on its controller); e.g. --vfnvme-variant "--queue-size 2048"
#   --fio-vfnvme-variant "…"  one more fio + vfnvme row with these extra fio arguments, run right
#                     after fio + vfnvme in each round, on its controller; e.g.
#                     --fio-vfnvme-variant "--tsc_issue_time=0"
# Environment: PEERS_OUT (the folder build.sh filled, default target/peers), VFNVME (the vfnvme
# binary, default target/release/vfnvme), FIO_ENGINE (default target/fio/vfnvme_fio.so).
#
# Every guest gets `-cpu max,vendor=GenuineIntel`: the SPDK and DPDK builds need SSE4.2 (built
# for corei7) and DPDK needs an Intel vendor to accept the emulated IOMMU's 39-bit address width
# in IOVA-as-VA mode. Every tool runs on that CPU. On it (invariant TSC) Linux picks the TSC as
# clocksource even without `clocksource=tsc`, whereas on QEMU's default CPU model (qemu64) it
# picks hpet; so `--setup defaults` switches the guest to hpet at run time, as plain QEMU has it.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
all_tools="vfnvme libvfn spdk fio-vfnvme fio-spdk"
ceiling_tools="fio-model fio-null"

# ---------------------------------------------------------------- guest side
if [[ "${1:-}" == --guest ]]; then
    seconds=${PEERS_SECONDS:?} qds=${PEERS_QDS:?} rounds=${PEERS_ROUNDS:?} tools=${PEERS_TOOLS:?}
    bin=${PEERS_BIN:?} vfnvme=${PEERS_VFNVME:?} engine=${PEERS_FIO_ENGINE:?}
    out=${VFNVME_OUT_DIR:?run this through vfnvme vm}/peers
    mkdir -p "$out"
    py=/usr/bin/python3

    # SPDK's PCI lock files go to /var/tmp, DPDK's runtime files to RUNTIME_DIRECTORY, its
    # shared memory to /dev/shm: all must be writable (the guest's root is the host's, read-only).
    mountpoint -q /var/tmp || mount -t tmpfs -o mode=1777 tmpfs /var/tmp
    mountpoint -q /dev/shm || mount -t tmpfs -o mode=1777 tmpfs /dev/shm
    RUNTIME_DIRECTORY=$(mktemp -d /tmp/peers-runtime.XXXXXX)
    export RUNTIME_DIRECTORY
    cs_dir=/sys/devices/system/clocksource/clocksource0
    if [[ -n "${PEERS_CLOCKSOURCE:-}" ]]; then
        grep -qw "$PEERS_CLOCKSOURCE" "$cs_dir/available_clocksource" || {
            echo "side-by-side: the guest has no clocksource $PEERS_CLOCKSOURCE (it has: $(cat "$cs_dir/available_clocksource"))" >&2
            exit 2
        }
        echo "$PEERS_CLOCKSOURCE" >"$cs_dir/current_clocksource"
        [[ $(cat "$cs_dir/current_clocksource") == "$PEERS_CLOCKSOURCE" ]] || {
            echo "side-by-side: could not switch the guest to clocksource $PEERS_CLOCKSOURCE" >&2
            exit 2
        }
    fi

    bdf_of() {
        case $1 in
        vfnvme | vfnvme-v*) echo 0000:00:10.0 ;;
        libvfn) echo 0000:00:11.0 ;;
        spdk) echo 0000:00:12.0 ;;
        fio-vfnvme | fio-vfnvme-v) echo 0000:00:13.0 ;;
        fio-spdk) echo 0000:00:14.0 ;;
        fio-model | fio-null) echo none ;;
        esac
    }
    fio_common=(--name=peers --rw=randread --bs=4k --numjobs=1 --thread=1 --time_based=1
        "--runtime=$seconds" --size=1g --norandommap=1 --randrepeat=0 --output-format=json)
    # Extra arguments given to both fio runs (word-split on purpose: several may be given).
    # shellcheck disable=SC2206
    fio_common+=(${PEERS_FIO_ARGS:-})

    # The variants' extra arguments (--vfnvme-variant), separated by '|': tool vfnvme-vN has the
    # Nth.
    variant_args() {
        local IFS='|' list
        read -r -a list <<<"${PEERS_VFNVME_VARIANTS:-}"
        echo "${list[$(($1 - 1))]:-}"
    }

    # Runs tool $1 at QD $2; its output goes to $3.{log,json}.
    run_tool() {
        local tool=$1 qd=$2 base=$3 bdf extra=""
        bdf=$(bdf_of "$tool")
        case $tool in
        vfnvme | vfnvme-v*)
            [[ $tool == vfnvme-v* ]] && extra=$(variant_args "${tool#vfnvme-v}")
            # Pinned to CPU 0 by default, as spdk_nvme_perf is (core mask 0x1).
            local pin=()
            [[ "${PEERS_VFNVME_CPUS:-0}" == none ]] || pin=(--cpus "${PEERS_VFNVME_CPUS:-0}")
            # Extra arguments are word-split on purpose: several may be given.
            # shellcheck disable=SC2086
            "$vfnvme" perf --device "$bdf" --qd "$qd" --time "$seconds" --pattern randread \
                --io-size 4096 "${pin[@]}" --json "$base.json" ${PEERS_VFNVME_ARGS:-} $extra ;;
        libvfn)
            "$bin/libvfn-perf" -d "$bdf" -N 1 -p randread -q "$qd" -t "$seconds" ;;
        spdk)
            "$bin/spdk_nvme_perf" -r "trtype:PCIe traddr:$bdf" -q "$qd" -o 4096 -w randread \
                -t "$seconds" -L ;;
        fio-vfnvme | fio-vfnvme-v | fio-model)
            [[ $tool == fio-vfnvme-v ]] && extra=${PEERS_FIO_VFNVME_VARIANT:-}
            local file="trtype=PCIe traddr=${bdf//:/.} ns=1"
            # The model: 1 GiB of 4 KiB blocks, as the controllers; reads complete at the next poll.
            [[ $tool == fio-model ]] && file="trtype=model ns=1 id=ceiling lba_size=4096 blocks=262144"
            # shellcheck disable=SC2086
            fio "${fio_common[@]}" "--ioengine=external:$engine" "--iodepth=$qd" \
                "--filename=$file" "--output=$base.json" $extra ;;
        fio-spdk)
            fio "${fio_common[@]}" "--ioengine=$bin/spdk_nvme" "--iodepth=$qd" \
                "--filename=trtype=PCIe traddr=${bdf//:/.} ns=1" "--output=$base.json" ;;
        fio-null)
            fio "${fio_common[@]}" --ioengine=null "--iodepth=$qd" "--output=$base.json" ;;
        esac
    }

    echo "side-by-side: setup ${PEERS_SETUP:-?}; ${seconds} s per run, QD $qds, $rounds round(s); $(nproc) vCPUs; clocksource $(cat "$cs_dir/current_clocksource")"
    failures=0
    for round in $(seq "$rounds"); do
        for qd in $qds; do
            for tool in $tools; do
                base=$out/$tool-qd$qd-r$round
                printf 'side-by-side: round %s QD %-3s %-11s on %s ... ' "$round" "$qd" "$tool" "$(bdf_of "$tool")"
                if run_tool "$tool" "$qd" "$base" >"$base.log" 2>&1; then
                    echo ok
                else
                    echo "FAILED (status $?), last lines of $base.log:"
                    tail -n 8 "$base.log" | sed 's/^/    /'
                    failures=$((failures + 1))
                fi
                # DPDK keeps its hugepage files when a process ends; free them for the next tool.
                rm -f /dev/hugepages/spdk* /dev/hugepages/rtemap* /dev/shm/spdk* 2>/dev/null || true
            done
        done
    done

    "$py" - "$out" "$qds" "$rounds" "$tools" "${PEERS_SETUP:-?}" "$seconds" <<'EOF' | tee "$out/table.txt"
import json, os, re, statistics, sys

out, qds, rounds, tools, setup, seconds = sys.argv[1], sys.argv[2].split(), int(sys.argv[3]), sys.argv[4].split(), sys.argv[5], float(sys.argv[6])
LABEL = {
    "vfnvme": "vfnvme perf",
    "libvfn": "libvfn perf",
    "spdk": "spdk_nvme_perf",
    "fio-vfnvme": "fio + vfnvme",
    "fio-spdk": "fio + spdk_nvme",
    "fio-model": "fio + vfnvme, model (ceiling)",
    "fio-null": "fio + null engine (ceiling)",
}
# The peers a row is compared with: perf tools against the better perf peer, fio against SPDK's plugin.
PEERS = {"vfnvme": ["libvfn", "spdk"], "libvfn": ["libvfn", "spdk"], "spdk": ["libvfn", "spdk"],
         "fio-vfnvme": ["fio-spdk"], "fio-spdk": ["fio-spdk"],
         "fio-model": ["fio-spdk"], "fio-null": ["fio-spdk"]}
# vfnvme perf variants (--vfnvme-variant): tool vfnvme-vN runs with the Nth, "|"-separated.
for n, extra in enumerate(filter(None, os.environ.get("PEERS_VFNVME_VARIANTS", "").split("|")), 1):
    LABEL[f"vfnvme-v{n}"] = f"vfnvme perf {extra}"
    PEERS[f"vfnvme-v{n}"] = PEERS["vfnvme"]
# The fio + vfnvme variant (--fio-vfnvme-variant).
LABEL["fio-vfnvme-v"] = "fio + vfnvme " + os.environ.get("PEERS_FIO_VFNVME_VARIANT", "")
PEERS["fio-vfnvme-v"] = PEERS["fio-vfnvme"]

def parse(tool, base):
    """(iops, mean_us, p99_us or None) of one run, or None if it failed."""
    try:
        if tool == "vfnvme" or tool.startswith("vfnvme-v"):
            d = json.load(open(base + ".json"))
            return d["iops"], d["latency_ns"]["mean"] / 1000, d["latency_ns"]["p99"] / 1000
        if tool.startswith("fio-"):
            text = open(base + ".json").read()
            r = json.loads(text[text.index("{"):])["jobs"][0]["read"]
            p99 = r["clat_ns"].get("percentile", {}).get("99.000000")
            return r["iops"], r["lat_ns"]["mean"] / 1000, p99 / 1000 if p99 else None
        log = open(base + ".log").read()
        if tool == "libvfn":
            # Last line: iops mbps lavg lmin lmax (lavg in us, TSC-timed); no percentiles.
            last = [l for l in log.splitlines() if l.strip()][-1].split()
            return float(last[0]), float(last[2]), None
        if tool == "spdk":
            m = re.search(r"^Total\s*:\s*([\d.]+)\s+([\d.]+)\s+([\d.]+)", log, re.M)
            p = re.search(r"^\s*99\.00000%\s*:\s*([\d.]+)us", log, re.M)
            return float(m.group(1)), float(m.group(3)), float(p.group(1)) if p else None
    except (OSError, ValueError, KeyError, IndexError, AttributeError, TypeError):
        return None

runs = {}
for tool in tools:
    for qd in qds:
        runs[(tool, qd)] = [parse(tool, os.path.join(out, f"{tool}-qd{qd}-r{r}")) for r in range(1, rounds + 1)]

def round_ratios(tool, qd):
    """Per round: the tool's IOPS over the best peer's in the same round (the runs of one round
    are minutes apart at most, so a load that drifts over the whole run cancels out)."""
    out = []
    for r in range(rounds):
        mine = runs[(tool, qd)][r]
        peer = [runs[(p, qd)][r] for p in PEERS[tool] if p in tools]
        peer = [p[0] for p in peer if p]
        out.append(mine[0] / max(peer) if mine and peer else None)
    return out

def pick(tool, qd):
    ok = sorted((r for r in runs.get((tool, qd), []) if r), key=lambda r: r[0])
    return ok[(len(ok) - 1) // 2] if ok else None

rows = []
print(f"setup: {setup}; 4 KiB randread, 1 thread, {seconds:g} s per run, {rounds} round(s)")
W = max([16] + [len(LABEL[t]) + 1 for t in tools])
print(f"{'tool':<{W}}{'QD':>4}{'IOPS':>12}{'mean us':>10}{'p99 us':>10}{'vs best peer':>14}{'per round':>11}{'rounds ahead':>14}")
for qd in qds:
    for tool in tools:
        r = pick(tool, qd)
        peers = [pick(p, qd) for p in PEERS[tool] if p in tools]
        peers = [p for p in peers if p]
        best = max((p[0] for p in peers), default=None)
        if r is None:
            print(f"{LABEL[tool]:<{W}}{qd:>4}{'failed':>12}")
            rows.append({"tool": tool, "qd": int(qd), "failed": True})
            continue
        ratio = r[0] / best if best else None
        p99 = f"{r[2]:.1f}" if r[2] is not None else "n/a"
        rs = f"{ratio:.2f}x" if ratio else "-"
        per_round_all = round_ratios(tool, qd)
        rr = [x for x in per_round_all if x is not None]
        per_round = statistics.median(rr) if rr else None
        pr = f"{per_round:.2f}x" if per_round else "-"
        ahead = f"{sum(x > 1.0 for x in rr)} of {len(rr)}" if rr else "-"
        print(f"{LABEL[tool]:<{W}}{qd:>4}{r[0]:>12.0f}{r[1]:>10.1f}{p99:>10}{rs:>14}{pr:>11}{ahead:>14}")
        rows.append({"tool": tool, "label": LABEL[tool], "qd": int(qd), "iops": r[0], "mean_us": r[1],
                     "p99_us": r[2], "ratio_vs_best_peer": ratio,
                     "runs_iops": [x[0] if x else None for x in runs[(tool, qd)]],
                     "round_ratios": per_round_all, "median_round_ratio": per_round})
print("per round: the median over the rounds of its IOPS over the best peer's in the same round;"
      " rounds ahead: the rounds in which it was above")
print("p99: vfnvme perf and spdk_nvme_perf -L over all I/Os; fio's completion latency (clat); libvfn's perf prints none")
with open(os.path.join(out, "results.json"), "w") as f:
    json.dump({"setup": setup, "seconds": seconds, "rounds": rounds, "io_size": 4096,
               "pattern": "randread", "rows": rows}, f, indent=1)
EOF
    echo "side-by-side: results in $out/results.json"
    [[ $failures -eq 0 ]] || { echo "side-by-side: $failures run(s) failed" >&2; exit 1; }
    exit 0
fi

# ---------------------------------------------------------------- host side
setup=harness busy=0 seconds=5 qds="1 32" rounds=1 tools=$all_tools json="" timeout=2400 clocksource=""
vfnvme_args="" fio_args="" vfnvme_cpus=0 variants=() fio_variant=""
while [[ $# -gt 0 ]]; do
    case $1 in
    --setup) setup=${2:?--setup needs harness, defaults or busy}; shift 2 ;;
    --busy) busy=1; shift ;;
    --clocksource) clocksource=${2:?--clocksource needs a name, e.g. hpet}; shift 2 ;;
    --seconds) seconds=${2:?}; shift 2 ;;
    --qds) qds=${2:?}; shift 2 ;;
    --rounds) rounds=${2:?}; shift 2 ;;
    --tools) tools=${2:?}; shift 2 ;;
    --json) json=${2:?}; shift 2 ;;
    --timeout) timeout=${2:?}; shift 2 ;;
    --vfnvme-args) vfnvme_args=${2?}; shift 2 ;;
    --fio-args) fio_args=${2?}; shift 2 ;;
    --vfnvme-cpus) vfnvme_cpus=${2:?--vfnvme-cpus needs a CPU list or none}; shift 2 ;;
    --vfnvme-variant) variants+=("${2:?--vfnvme-variant needs the extra arguments}"); shift 2 ;;
    --fio-vfnvme-variant) fio_variant=${2:?--fio-vfnvme-variant needs the extra arguments}; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "side-by-side: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
vm_flags=()
case $setup in
harness) ;;
defaults)
    vm_flags+=(--qemu-defaults)
    clocksource=${clocksource:-hpet}
    ;;
busy) busy=1 ;;
*) echo "side-by-side: --setup must be harness, defaults or busy, not '$setup'" >&2; exit 2 ;;
esac
for t in $tools; do
    [[ " $all_tools $ceiling_tools " == *" $t "* ]] || { echo "side-by-side: unknown tool '$t' (choose from: $all_tools $ceiling_tools)" >&2; exit 2; }
done
if [[ ${#variants[@]} -gt 0 ]]; then
    # Each variant runs right after vfnvme perf (or first, without it) in every round.
    vlist="" vtools=""
    for i in "${!variants[@]}"; do
        [[ "${variants[$i]}" != *"|"* ]] || { echo "side-by-side: --vfnvme-variant can't contain '|'" >&2; exit 2; }
        vlist+="${vlist:+|}${variants[$i]}"
        vtools+=" vfnvme-v$((i + 1))"
    done
    if [[ " $tools " == *" vfnvme "* ]]; then
        tools=$(sed "s/\(^\| \)vfnvme\( \|$\)/\1vfnvme$vtools\2/" <<<"$tools")
    else
        tools="${vtools# } $tools"
    fi
fi
if [[ -n "$fio_variant" ]]; then
    [[ " $tools " == *" fio-vfnvme "* ]] || { echo "side-by-side: --fio-vfnvme-variant needs the tool fio-vfnvme" >&2; exit 2; }
    tools=$(sed "s/\(^\| \)fio-vfnvme\( \|$\)/\1fio-vfnvme fio-vfnvme-v\2/" <<<"$tools")
fi
[[ "$seconds" =~ ^[0-9]+$ && "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "side-by-side: --seconds and --rounds take whole numbers" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "side-by-side: run as root (it boots a QEMU guest with vfio)" >&2; exit 1; }

target=${CARGO_TARGET_DIR:-$root/target}
bin=${PEERS_OUT:-$target/peers}/bin
vfnvme=${VFNVME:-$target/release/vfnvme}
engine=${FIO_ENGINE:-$target/fio/vfnvme_fio.so}
need() { [[ -x "$1" || -f "$1" ]] || { echo "side-by-side: $1 is missing: build it with scripts/peers/build.sh ($2)" >&2; exit 1; }; }
for t in $tools; do
    case $t in
    vfnvme) need "$vfnvme" vfnvme ;;
    libvfn) need "$bin/libvfn-perf" "LIBVFN_SRC=... build.sh libvfn" ;;
    spdk) need "$bin/spdk_nvme_perf" "DPDK_SRC=... SPDK_SRC=... build.sh dpdk spdk" ;;
    fio-vfnvme | fio-model) need "$engine" vfnvme ;;
    fio-spdk) need "$bin/spdk_nvme" "DPDK_SRC=... SPDK_SRC=... build.sh dpdk spdk" ;;
    esac
done
need "$vfnvme" vfnvme

label=$setup
[[ $busy -eq 1 && $setup != busy ]] && label="$setup+busy"
[[ -n "$vfnvme_args" ]] && label="$label, vfnvme perf $vfnvme_args"
[[ -n "$fio_args" ]] && label="$label, fio $fio_args"
[[ "$vfnvme_cpus" != 0 ]] && label="$label, vfnvme perf on CPUs $vfnvme_cpus"
load_pids=()
stop_load() {
    local p
    for p in "${load_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${load_pids[@]}"; do wait "$p" 2>/dev/null || true; done
    load_pids=()
}
trap stop_load EXIT
if [[ $busy -eq 1 ]]; then
    # One busy loop per host CPU, at QEMU's priority, for the whole guest run.
    for _ in $(seq "$(nproc)"); do
        bash -c 'while :; do :; done' &
        load_pids+=($!)
    done
    echo "side-by-side: host load: ${#load_pids[@]} busy loops (pids ${load_pids[*]})"
fi

log=$(mktemp /tmp/peers-side-by-side.XXXXXX.log)
set +e
"$vfnvme" vm --scenario peers "${vm_flags[@]}" --timeout "$timeout" \
    --qemu-arg=-cpu --qemu-arg=max,vendor=GenuineIntel \
    --env "PEERS_SECONDS=$seconds" --env "PEERS_QDS=$qds" --env "PEERS_ROUNDS=$rounds" \
    --env "PEERS_TOOLS=$tools" --env "PEERS_BIN=$bin" --env "PEERS_VFNVME=$vfnvme" \
    --env "PEERS_FIO_ENGINE=$engine" --env "PEERS_SETUP=$label" \
    --env "PEERS_CLOCKSOURCE=$clocksource" --env "PEERS_VFNVME_ARGS=$vfnvme_args" \
    --env "PEERS_FIO_ARGS=$fio_args" --env "PEERS_VFNVME_CPUS=$vfnvme_cpus" \
    --env "PEERS_VFNVME_VARIANTS=${vlist:-}" --env "PEERS_FIO_VFNVME_VARIANT=$fio_variant" \
    -- "$root/scripts/peers/side-by-side.sh" --guest 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
stop_load
results=$(sed -n 's/^side-by-side: results in \(.*\)$/\1/p' "$log" | tr -d '\r' | tail -n1)
rm -f "$log"
if [[ -n "$json" ]]; then
    if [[ -n "$results" && -f "$results" ]]; then
        cp "$results" "$json"
        echo "side-by-side: JSON written to $json"
    else
        echo "side-by-side: no results to write to $json" >&2
        [[ $status -ne 0 ]] || status=1
    fi
fi
exit "$status"
