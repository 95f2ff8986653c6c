#!/usr/bin/env bash
# A controller reset under fio with verify=crc32c (issue 11), in a guest (scenario `pair`).
# While the engine writes and verifies on 0000:00:11.0, the engine's test hook resets the
# controller through the API (`reset_after_ms`: vfnvme_ctrl_reset from the admin poller, as an
# application would) with I/O in flight.
# - io_retries=3: the job finishes with no error at all and verify passes; the engine reports
#   the reset and the retried commands.
# - io_retries=0: the job still finishes; only I/Os in flight at the reset fail (EIO).
# Exits non-zero on failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [[ "${1:-}" == --guest ]]; then
    engine=$2
    cd "${VFNVME_OUT_DIR:?run this through vfnvme vm}"
    run() {
        local name=$1 retries=$2
        shift 2
        local start=$SECONDS rc=0
        # --eta=never: fio's status line would flood the console log.
        fio --ioengine=external:"$engine" --thread=1 --name="$name" --eta=never \
            "--filename=trtype=PCIe traddr=0000.00.11.0 ns=1" \
            --rw=write --bs=64k --iodepth=16 --size=64m --loops=400 --runtime=15 \
            --verify=crc32c --verify_backlog=64 --io_retries="$retries" --reset_after_ms=4000 \
                "$@" --output-format=json --output="$name.json" 2>"$name.err" || rc=$?
        echo "fio-reset-check: $name: fio exited $rc after $((SECONDS - start)) s"
        cat "$name.err" >&2 || true
        return 0
    }
    run with-retries 3
    run without-retries 0 --continue_on_error=all
    python3 - <<'PY'
import json, re
def load(name):
    text = open(f"{name}.json").read()
    start = text.index("{")
    log = text[:start]
    return log, json.loads(text[start:])["jobs"][0]
for name, retries in (("with-retries", 3), ("without-retries", 0)):
    log, j = load(name)
    err = open(f"{name}.err").read()
    w, r = j["write"]["io_bytes"] >> 20, j["read"]["io_bytes"] >> 20
    total_err = j.get("total_err", 0)
    retried = re.findall(r"(\d+) I/O commands retried", err)
    print(f"{name}: error {j['error']}, total_err {total_err}, written {w} MiB, "
          f"verified {r} MiB, retried {retried}, events: "
          + "; ".join(l.split(': ', 2)[-1] for l in log.splitlines() if 'vfnvme:' in l))
    assert "reset done" in log, f"{name}: no reset seen by the engine: {log!r}"
    assert w > 0 and r > 0, f"{name}: nothing written or verified"
    if retries:
        assert j["error"] == 0, f"{name}: fio error {j['error']}"
        assert total_err == 0, f"{name}: {total_err} errors with retries on"
        assert retried and int(retried[0]) > 0, f"{name}: no retry counted: {err!r}"
    else:
        # Only what was in flight at the reset fails, with EIO (fio's first error, kept with
        # continue_on_error): at most the queue depth, and as many verify reads of those
        # blocks; a verify mismatch would be EILSEQ.
        assert j["error"] == 5, f"{name}: fio error {j['error']}"
        assert 0 < total_err <= 2 * 16, f"{name}: {total_err} errors"
print("fio-reset-check: OK")
PY
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
engine=$("$root/ffi/fio/build.sh" | tail -n1)
"$vm" vm --scenario pair -- "$root/scripts/fio-reset-check.sh" --guest "$engine"
