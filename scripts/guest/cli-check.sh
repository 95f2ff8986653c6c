#!/bin/sh
# Runs inside `vfnvme vm --scenario crosscheck`: checks `vfnvme list`, `identify`, `setup`
# (--reset to nvme, the refusal to take a controller with a mounted file system, binding back)
# and `perf`'s typed errors on a real (emulated) controller. Exits non-zero on the first surprise.
#
# Usage: scripts/guest/cli-check.sh [VFNVME_BINARY]   (default target/release/vfnvme)
set -u
V=${1:-target/release/vfnvme}
B=$(echo "${VFNVME_VFIO_DEVICES:-}" | cut -d, -f1)
fail() { echo "cli-check: FAIL: $*" >&2; exit 1; }
expect() { # expect STATUS TEXT -- COMMAND...: runs it, checks the exit status and the output
    want=$1 text=$2; shift 3
    out=$("$@" 2>&1); got=$?
    echo "\$ $*"; echo "$out" | sed 's/^/    /'
    [ "$got" -eq "$want" ] || fail "$* exited $got, expected $want"
    echo "$out" | grep -q -- "$text" || fail "$*: no '$text' in the output"
}
[ -n "$B" ] || fail "no controller on vfio-pci"

expect 0 "$VFNVME_EXPECT_SERIAL" -- "$V" list
expect 0 "$VFNVME_EXPECT_SERIAL" -- "$V" identify "$B"
expect 1 "not a multiple" -- "$V" perf --device "$B" --io-size 1000 --time 1
expect 1 "namespace 9 is not active" -- "$V" perf --device "$B" --nsid 9 --time 1
expect 0 "giving it back" -- "$V" setup --reset "$B"
for _ in 1 2 3 4 5 6 7 8 9 10; do
    ns=$(ls /sys/bus/pci/devices/"$B"/nvme/nvme*/ 2>/dev/null | grep -m1 '^nvme[0-9]*n1$') && break
    sleep 0.5
done
[ -n "${ns:-}" ] || fail "the kernel did not bring up a namespace of $B"
expect 1 "not vfio-pci" -- "$V" perf --device "$B" --time 1
modprobe ext4 && mkfs.ext4 -q "/dev/$ns" && mkdir -p /tmp/cli-check && mount "/dev/$ns" /tmp/cli-check ||
    fail "could not mount a file system on /dev/$ns"
expect 0 "NOT binding" -- "$V" setup --dry-run
expect 1 "mounted on /tmp/cli-check" -- "$V" setup "$B"
umount /tmp/cli-check
expect 0 "binding to vfio-pci" -- "$V" setup "$B"
expect 0 "IOPS" -- "$V" perf --device "$B" --qd 4 --time 1
echo "cli-check: all passed"
