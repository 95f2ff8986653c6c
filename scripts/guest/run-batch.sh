#!/usr/bin/env bash
# Guest side of scripts/test-all.sh's shared boots: runs several guest test binaries of one
# scenario one after the other in this guest.
#   scripts/guest/run-batch.sh NAME EXE DIR [NAME EXE DIR]...
# Each binary runs from its crate's folder DIR (as cargo would), after a line
# "run-batch: start NAME" and before "run-batch: end NAME status S, T s", which test-all.sh splits
# the log by. All of them run; exits 1 if any failed.
set -u
failed=0
while [ $# -ge 3 ]; do
    name=$1 exe=$2 dir=$3
    shift 3
    echo "run-batch: start $name"
    start=$SECONDS
    (cd "$dir" && "$exe")
    status=$?
    echo "run-batch: end $name status $status, $((SECONDS - start)) s"
    [ "$status" -eq 0 ] || failed=1
done
exit "$failed"
