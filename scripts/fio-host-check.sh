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
    "$fio" --ioengine=external:"$engine" --thread=1 --name=doorbells --rw=randread --bs=4k \
        --norandommap=1 --size=1g --number_ios=20000 "--iodepth=$qd" \
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
expect_error "missing namespace" "namespace 9" --thread=1 "--filename=trtype=model ns=9"
expect_error "no such device" "opening pcie:0000:00:1f.7" --thread=1 "--filename=0000.00.1f.7/1"

echo "fio-host-check: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
