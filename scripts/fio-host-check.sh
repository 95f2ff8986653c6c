#!/usr/bin/env bash
# Builds the vfnvme fio engine and runs the host job files (ffi/fio/jobs/*.fio) with Debian's
# /usr/bin/fio against the in-memory controller model. Also checks that bad filenames and a
# missing thread=1 fail cleanly. Exits non-zero on any failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fio=${FIO:-/usr/bin/fio}
engine=$("$root/ffi/fio/build.sh" | tail -n1)
export VFNVME_FIO_ENGINE=$engine
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# fio writes verify state files into its working folder: keep them in the scratch folder.
cd "$out"
passed=0
failed=0

ok() { echo "fio-host-check: PASS $1"; passed=$((passed + 1)); }
bad() { echo "fio-host-check: FAIL $1"; failed=$((failed + 1)); }

for job in "$root"/ffi/fio/jobs/*.fio; do
    name=$(basename "$job" .fio)
    if "$fio" --output-format=json --output="$out/$name.json" "$job" >"$out/$name.log" 2>&1 &&
        python3 - "$out/$name.json" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
jobs = json.loads(text[text.index("{"):])["jobs"]
bad = [j["jobname"] for j in jobs if j["error"] != 0]
idle = [j["jobname"] for j in jobs
        if j["read"]["total_ios"] + j["write"]["total_ios"] + j["trim"]["total_ios"] == 0]
for j in jobs:
    print(f'  {j["jobname"]:<34} read {j["read"]["io_bytes"] >> 10:>8} KiB  write {j["write"]["io_bytes"] >> 10:>8} KiB  trim {j["trim"]["io_bytes"] >> 10:>8} KiB  err {j["error"]}')
if bad or idle:
    print(f"jobs with errors: {bad}; jobs without I/O: {idle}")
    sys.exit(1)
PY
    then
        ok "$name"
    else
        cat "$out/$name.log"
        bad "$name"
    fi
done

# Doorbell batching, counted by the model (the engine prints its counters at exit): one SQ
# doorbell write per I/O at iodepth 1 (nothing may be left unrung), and far fewer than one per
# I/O at iodepth 32, where fio commits after every io_u.
doorbells() {
    local what=$1 qd=$2 lo=$3 hi=$4 rc=0
    shift 4
    "$fio" --ioengine=external:"$engine" --thread=1 --name=doorbells --rw=randread --bs=4k \
        --norandommap=1 --size=1g --number_ios=20000 "--iodepth=$qd" "$@" \
        "--filename=trtype=model ns=1 id=db$qd backing=null blocks=262144" >"$out/db.log" 2>&1 || rc=$?
    local line
    line=$(grep -E "vfnvme: model:db$qd: [0-9]+ I/O commands" "$out/db.log" || true)
    if [[ $rc -eq 0 ]] && python3 - "$line" "$lo" "$hi" <<'PY'
import re, sys
line, lo, hi = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
m = re.search(r"(\d+) I/O commands, (\d+) SQ doorbell writes", line)
if not m:
    sys.exit(f"no doorbell counters in the output: {line!r}")
ios, sq = int(m.group(1)), int(m.group(2))
per_io = sq / ios if ios else float("inf")
print(f"  {ios} I/Os, {sq} SQ doorbell writes: {per_io:.3f} per I/O (allowed {lo}..{hi})")
sys.exit(0 if ios >= 20000 and lo <= per_io <= hi else 1)
PY
    then
        ok "$what"
    else
        cat "$out/db.log"
        bad "$what"
    fi
}
doorbells "one doorbell per I/O at iodepth 1" 1 0.999 1.01
doorbells "batched doorbells at iodepth 32" 32 0.01 0.35
# The batching is the driver's (defer_sq_doorbell): the engine option turns it off, and every
# commit then rings.
doorbells "defer_sq_doorbell=0: one doorbell per commit at iodepth 32" 32 0.999 1.01 \
    --defer_sq_doorbell=0

# Issue times from the TSC (ffi/fio/vfnvme_fio_issue_time.c): the engine spares fio one clock
# read per I/O, counted by preloading a clock_gettime counter (ffi/fio/clock_count.c) with fio's
# clock on clock_gettime, at iodepth 1 and 32, against tsc_issue_time=0. slat must stay what it
# is: positive, below lat, and lat = slat + clat.
clock_reads() {
    local qd=$1 tsc=$2
    CLOCK_COUNT_FILE="$out/clock-$qd-$tsc.txt" LD_PRELOAD="$(dirname "$engine")/clock_count.so" \
        "$fio" --ioengine=external:"$engine" --thread=1 --name=clock --rw=randread --bs=4k \
        --norandommap=1 --size=1g --number_ios=20000 "--iodepth=$qd" --clocksource=clock_gettime \
        "--tsc_issue_time=$tsc" --output-format=json --output="$out/clock-$qd-$tsc.json" \
        "--filename=trtype=model ns=1 id=clock$qd$tsc backing=null blocks=262144" \
        >"$out/clock.log" 2>&1
}
for qd in 1 32; do
    if clock_reads "$qd" 1 && clock_reads "$qd" 0 && python3 - "$out" "$qd" <<'PY'
import json, re, sys
out, qd = sys.argv[1], sys.argv[2]
def run(tsc):
    # The first thread to read the clock is fio's main thread (its startup calibration); the
    # job's thread is the busiest of the others.
    counts = [int(m) for m in re.findall(r"calls (\d+)", open(f"{out}/clock-{qd}-{tsc}.txt").read())]
    text = open(f"{out}/clock-{qd}-{tsc}.json").read()
    r = json.loads(text[text.index("{"):])["jobs"][0]["read"]
    ios = r["total_ios"]
    return max(counts[1:]) / ios, ios, r["slat_ns"]["mean"], r["clat_ns"]["mean"], r["lat_ns"]["mean"]
on, off = run(1), run(0)
print(f"  clock reads per I/O: {on[0]:.2f} with TSC issue times, {off[0]:.2f} without")
print(f"  slat {on[2]:.0f} ns, clat {on[3]:.0f} ns, lat {on[4]:.0f} ns")
ok = on[1] == off[1] == 20000 and on[0] <= off[0] - 0.95
ok = ok and 0 < on[2] < on[4] and abs(on[2] + on[3] - on[4]) <= 0.02 * on[4]
sys.exit(0 if ok else 1)
PY
    then
        ok "one clock read fewer per I/O with TSC issue times, iodepth $qd"
    else
        cat "$out/clock.log"
        bad "one clock read fewer per I/O with TSC issue times, iodepth $qd"
    fi
done

# Engine options (fio's options table) instead of filename keys, and the rule between them:
# a filename key overrides the option. Checked by what only those settings allow: 512-byte
# I/O (lba_size), namespace 2 (namespaces, ns), the whole namespace written (blocks: fio sizes
# the file from it), the model's name in the engine's exit line (id).
options_run() {
    local what=$1 bytes=$2 id=$3 rc=0
    shift 3
    "$fio" --ioengine=external:"$engine" --thread=1 --name=opts --rw=write --bs=512 \
        --iodepth=8 --output-format=json --output="$out/opts.json" "$@" >"$out/opts.log" 2>&1 || rc=$?
    if [[ $rc -eq 0 ]] && grep -q "vfnvme: model:$id: " "$out/opts.log" &&
        python3 - "$out/opts.json" "$bytes" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
job = json.loads(text[text.index("{"):])["jobs"][0]
got, want = job["write"]["io_bytes"], int(sys.argv[2])
print(f"  error {job['error']}, wrote {got} bytes (want {want})")
sys.exit(0 if job["error"] == 0 and got == want else 1)
PY
    then
        ok "$what"
    else
        cat "$out/opts.log"
        bad "$what (exit $rc)"
    fi
}
# fio lists the engine's options (--enghelp takes the engine's path, without external:).
"$fio" --enghelp="$engine" >"$out/enghelp.log" 2>&1 || true
missing=""
for key in trtype traddr ns id namespaces lba_size blocks latency_ns seed backing hang_reads \
    admin_timeout_ms io_timeout_ms io_retries reset_after_ms defer_sq_doorbell tsc_issue_time \
    inline_qd1 paths mp_policy mp_queue_if_no_path mp_delayed_removal_ms mp_fail_after_ms mp_fail \
    mp_detach_after_ms mp_attach_after_ms md_per_io_size pi_act pi_chk apptag apptag_mask \
    enable_sgl; do
    grep -q "^$key  *: ." "$out/enghelp.log" || missing="$missing $key"
done
if [[ -z "$missing" ]]; then
    ok "fio --enghelp lists every engine option"
else
    cat "$out/enghelp.log"
    bad "fio --enghelp lists every engine option (missing:$missing)"
fi
# enable_sgl (SPDK's name): the queue pairs send every I/O with SGLs (the engine says so), and
# data still verifies.
rc=0
"$fio" --ioengine=external:"$engine" --thread=1 --name=sgl --rw=randwrite --bsrange=512-64k \
    --iodepth=8 --size=8m --verify=crc32c --verify_fatal=1 --enable_sgl=1 \
    "--filename=trtype=model ns=1 id=sgl lba_size=512 blocks=65536" >"$out/sgl.log" 2>&1 || rc=$?
if [[ $rc -eq 0 ]] && grep -q "enable_sgl=1: every read and write goes with SGLs" "$out/sgl.log"; then
    ok "enable_sgl=1: SGLs for every I/O, crc32c verify"
else
    cat "$out/sgl.log"
    bad "enable_sgl=1: SGLs for every I/O, crc32c verify (exit $rc)"
fi
# No filename: fio names the file after the job; the target comes from the options alone.
options_run "options table: model, namespace 2 of 2, 512-byte blocks, 4096 blocks" $((4096 * 512)) \
    opts --trtype=model --id=opts --namespaces=2 --ns=2 --lba_size=512 --blocks=4096 --backing=null
options_run "filename keys override the options" $((2048 * 512)) prec \
    --trtype=model --id=opts --lba_size=4096 --blocks=4096 "--filename=id=prec lba_size=512 blocks=2048"

# getevents() honours its timeout: fio's own loop never passes one with min > 0, so a small
# driver (ffi/fio/getevents_check.c) calls the engine as fio would, on a model whose reads never
# complete. An engine that ignores the timeout polls forever: `timeout` turns that into a FAIL.
if timeout 60 "$(dirname "$engine")/getevents_check" "$engine" >"$out/ge.log" 2>&1; then
    ok "getevents returns at its timeout with min 1 and a hung read"
else
    cat "$out/ge.log"
    bad "getevents returns at its timeout with min 1 and a hung read"
fi

# A read the device never completes ends at the I/O timeout (an Abort, then a controller reset)
# as an EIO that fio reports, instead of hanging fio: on the model, virtual time passes while
# the engine polls a queue whose command the device holds. `timeout` turns a hang into a FAIL.
rc=0
timeout 120 "$fio" --ioengine=external:"$engine" --thread=1 --name=hung --rw=randread --bs=4k \
    --iodepth=4 --size=1m --io_timeout_ms=100 \
    "--filename=trtype=model ns=1 id=hungfio hang_reads=1" >"$out/hung.log" 2>&1 || rc=$?
if [[ $rc -ne 0 && $rc -ne 124 && $rc -lt 128 ]] && grep -q "Input/output error" "$out/hung.log" &&
    grep -q "aborted by controller reset" "$out/hung.log"; then
    ok "a hung read ends at io_timeout_ms with EIO (exit $rc)"
else
    cat "$out/hung.log"
    bad "a hung read ends at io_timeout_ms with EIO (exit $rc)"
fi

# Multipath heads on a model subsystem of two controllers: verify=crc32c passes while the path
# through controller 0 fails under I/O (ANA inaccessible, or hot removal), and the engine's
# per-path counts show the shift; round-robin uses both paths while both are usable.
multipath_run() {
    local what=$1 fail=$2 policy=$3 rc=0
    local hook=(--mp_fail_after_ms=100 "--mp_fail=$fail")
    # Namespace Attachment: detached from controller 0, attached again later.
    [[ $fail == detach ]] && hook=(--mp_detach_after_ms=100 --mp_attach_after_ms=100000)
    "$fio" --ioengine=external:"$engine" --thread=1 --name=mp --rw=randwrite --bs=4k \
        --iodepth=16 --size=32m --loops=10 --verify=crc32c --do_verify=1 \
        "--mp_policy=$policy" "${hook[@]}" \
        --output-format=json --output="$out/mp.json" \
        "--filename=trtype=model paths=2 ns=1 id=mp$fail blocks=8192 lba_size=4096" \
        >"$out/mp.log" 2>&1 || rc=$?
    if [[ $rc -eq 0 ]] && python3 - "$out/mp.json" "$out/mp.log" "$fail" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
job = json.loads(text[text.index("{"):])["jobs"][0]
log = open(sys.argv[2]).read()
m = re.search(r"I/Os per path: \S+=(\d+) \S+=(\d+) \(failovers (\d+)", log)
if not m:
    sys.exit("no per-path line in the engine's output")
p0, p1, fo = map(int, m.groups())
ios = job["write"]["total_ios"] + job["read"]["total_ios"]
print(f"  error {job['error']}, {ios} I/Os, path 0 {p0}, path 1 {p1}, failovers {fo}")
ok = job["error"] == 0 and ios == 163840 and p0 + p1 >= ios and p1 > p0
if sys.argv[3] == "remove":
    ok = ok and "controller 0 lost" in log
elif sys.argv[3] == "detach":
    ok = ok and "path through controller 0 removed" in log
else:
    ok = ok and "optimized -> inaccessible" in log
sys.exit(0 if ok else 1)
PY
    then
        ok "$what"
    else
        cat "$out/mp.log"
        bad "$what (exit $rc)"
    fi
}
multipath_run "multipath head: verify passes while path 0 turns ANA inaccessible" ana round-robin
multipath_run "multipath head: verify passes while controller 0 is removed" remove queue-depth
multipath_run "multipath head: verify passes while ns 1 is detached from controller 0" detach \
    round-robin

# Failures must be clean fio errors with a message, not crashes.
expect_error() {
    local what=$1 pattern=$2
    shift 2
    local rc=0
    "$fio" --ioengine=external:"$engine" --name=neg --size=1m "$@" >"$out/neg.log" 2>&1 || rc=$?
    if [[ $rc -ne 0 && $rc -lt 128 ]] && grep -q "$pattern" "$out/neg.log"; then
        ok "$what"
    else
        cat "$out/neg.log"
        bad "$what (exit $rc)"
    fi
}
# Verification must be able to fail: verify-only against a fresh model reads back zeroes.
expect_error "verify catches bad data" "verify: bad magic" --thread=1 --rw=write --bs=4k \
    --verify=crc32c --verify_only=1 "--filename=trtype=model ns=1 id=fresh"
expect_error "no thread=1" "needs thread=1" "--filename=trtype=model ns=1"
expect_error "unknown key" "unknown key" --thread=1 "--filename=trtype=model ns=1 colour=blue"
expect_error "bad traddr" "bad traddr" --thread=1 "--filename=trtype=PCIe traddr=zz ns=1"
expect_error "bad trtype option" "option trtype: trtype must be PCIe or model" --thread=1 \
    --trtype=rdma "--filename=ns=1"
expect_error "no trtype anywhere" "trtype=PCIe or trtype=model is missing" --thread=1 "--filename=ns=1"
expect_error "missing namespace" "namespace 9" --thread=1 "--filename=trtype=model ns=9"
expect_error "no such device" "opening pcie:0000:00:1f.7" --thread=1 "--filename=0000.00.1f.7/1"
expect_error "unknown path policy" "use numa, round-robin or queue-depth" --thread=1 \
    --mp_policy=fastest "--filename=trtype=model paths=2 ns=1 id=badpol"
expect_error "bad address in a head" "bad address 'zz'" --thread=1 \
    "--filename=trtype=PCIe traddr=0000.00.10.0+zz ns=1"
expect_error "head of a missing namespace" "no head for namespace 5" --thread=1 \
    "--filename=trtype=model paths=2 ns=5 id=nohead"

echo "fio-host-check: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
