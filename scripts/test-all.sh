#!/usr/bin/env bash
# Every test of vfnvme: the host tests (`cargo test --workspace`, against the in-memory
# controller model), then each guest test binary inside a QEMU guest of its scenario.
#
# Usage: scripts/test-all.sh [--full] [--guest-only] [FILTER...]
#   --full        also the longer suite (run it before resolving an issue): the host tests in a
#                 debug build and in a plain release build, every Miri test, the full-length
#                 fio side by side (docs/testing.md)
#   --guest-only  skip the host tests
#   FILTER        run only the guest test binaries whose name contains one of these words
#
# Guest tests are tests/tests/guest_<scenario>[_<what>].rs (see docs/testing.md). Runs as root.
# Those named *fio* get the fio engine, built with ffi/fio/build.sh, in VFNVME_FIO_ENGINE.
# Everything here but --full's extra builds is one Cargo build, profile ci (scripts/lib.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

guest_only=0
full=0
filters=()
for arg in "$@"; do
    case "$arg" in
        --guest-only) guest_only=1 ;;
        --full) full=1 ;;
        -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
        *) filters+=("$arg") ;;
    esac
done

require_root

# The Cargo profile of the host tests, the guest test binaries, the vfnvme binary and the C
# library (of the C example and the fio engine): one build. ffi/*.sh take it in PROFILE.
profile=$TEST_PROFILE
export PROFILE=$profile

step "build (profile $profile)"
vfnvme=$(build_vfnvme "$profile")
[ -x "$vfnvme" ] || { echo "error: could not find the built vfnvme binary" >&2; exit 1; }

step "prepare the guest (installs QEMU, busybox, fio and a kernel if missing)"
"$vfnvme" vm --prepare

failed=0
summary=()

# Runs one named check; its failure fails the run (after the others have run).
check() {
    local name=$1 start=$SECONDS
    shift
    step "$name"
    if "$@"; then
        summary+=("ok    $name $((SECONDS - start)) s")
    else
        summary+=("FAIL  $name $((SECONDS - start)) s")
        failed=1
    fi
}

# With VFNVME_PRUNE_TARGET=1 (.ci/run sets it), --full's extra builds (target/debug,
# target/release) are removed once their step is done, so that one run fits on a CI machine's
# disk. The every-time run's build folders (target/ci, target/product, target/doc, target/miri,
# target/loom: about 2.5 GB in all) stay, as caches for a machine that keeps target/.
prune() {
    if [ "${VFNVME_PRUNE_TARGET:-0}" = 1 ]; then
        local dir
        for dir in "$@"; do
            echo "==> prune $dir ($(du -sh "$dir" 2>/dev/null | cut -f1) freed)"
            rm -rf "$dir"
        done
    fi
}

if [ "$guest_only" -eq 0 ]; then
    # --all-features turns on vfnvme-ffi's `model` feature, which the C ABI's tests run on.
    # Guest tests print SKIPPED (host) here. The seeded tests take their seed counts from
    # cfg!(debug_assertions), which the ci profile has on although it is optimised: give them
    # their release counts.
    check "host tests: cargo test --profile $profile (release + debug assertions, overflow checks)" \
        env FAULT_SEEDS="${FAULT_SEEDS:-1000}" MP_FLAP_SEEDS="${MP_FLAP_SEEDS:-1000}" \
        SEEDS="${SEEDS:-1000}" cargo test --workspace --all-features --profile "$profile"
    if [ "$full" -eq 1 ]; then
        # --full: a debug build (unoptimised: another schedule of the threaded tests, the debug
        # seed counts) and a plain release build (no debug assertions: what users build).
        check "host tests, debug build (--full)" cargo test --workspace --all-features
        prune target/debug
        check "host tests, release build (--full)" \
            cargo test --workspace --all-features --release
        prune target/release
    fi
    check "C ABI: the product library: soname libvfnvme.so.0, the header's functions in VFNVME_0, nothing else exported" \
        ffi/check-product-symbols.sh
    check "C ABI: installed (ffi/install.sh), a C program builds with pkg-config, dynamic and static" \
        ffi/check-install.sh
    check "docs: every crate documents (no collision, no broken link)" \
        env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features
    if [ "$full" -eq 1 ]; then
        check "Miri: every test of scripts/miri.sh --full" scripts/miri.sh --full
    else
        check "Miri: the bounded set (scripts/miri.sh; --full: all)" scripts/miri.sh
    fi
    check "loom: model-check the namespace registry and the heads' path lists" \
        env RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
        cargo test -p vfnvme --lib --release -- namespace multipath::paths_loom
    check "C ABI: header up to date" ffi/check-header.sh
    check "C ABI: example on the model" ffi/build-example.sh --run
    check "fio engine: host jobs on the model" scripts/fio-host-check.sh
fi


# Scenario names, longest first, so guest_data4k_* picks data4k, not data.
mapfile -t scenarios < <("$vfnvme" vm --list-scenarios | awk '/^[^ ]/ { print length($1), $1 }' |
    sort -rn | awk '{ print $2 }')

scenario_of() {
    local stem=${1#guest_} s
    for s in "${scenarios[@]}"; do
        if [ "$stem" = "$s" ] || [[ "$stem" == "${s}_"* ]]; then
            echo "$s"
            return
        fi
    done
}

wanted() {
    [ "${#filters[@]}" -eq 0 ] && return 0
    local f
    for f in "${filters[@]}"; do
        [[ "$1" == *"$f"* ]] && return 0
    done
    return 1
}

step "list guest test binaries"
artifacts=target/test-all-artifacts.json
mkdir -p target
cargo test --workspace --all-features --profile "$profile" --no-run \
    --message-format=json-render-diagnostics > "$artifacts"
guest_tests=()
while IFS= read -r line; do
    name=$(sed -n 's/.*"target":{"kind":\["test"\],[^}]*"name":"\([^"]*\)".*/\1/p' <<< "$line")
    exe=$(sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' <<< "$line")
    manifest=$(sed -n 's/.*"manifest_path":"\([^"]*\)".*/\1/p' <<< "$line")
    [[ "$name" == guest_* ]] || continue
    [ -n "$exe" ] || continue
    wanted "$name" || continue
    guest_tests+=("$name|$exe|$(dirname "$manifest")")
done < <(grep '"reason":"compiler-artifact"' "$artifacts" | grep '"kind":\["test"\]')
echo "${#guest_tests[@]} guest test binaries"

# Guest tests named *fio* run fio with the vfnvme engine: build it once (ffi/fio/build.sh; the
# first build fetches fio's source) and hand its path over in VFNVME_FIO_ENGINE.
for entry in "${guest_tests[@]}"; do
    if [[ "${entry%%|*}" == *fio* ]] && [ -z "${VFNVME_FIO_ENGINE:-}" ]; then
        step "build the fio engine for the guest tests that run fio"
        VFNVME_FIO_ENGINE=$(ffi/fio/build.sh | tail -n1)
        export VFNVME_FIO_ENGINE
    fi
done

# Guest test binaries that share one guest boot with the others of their scenario listed here
# (scripts/guest/run-batch.sh runs them one after the other): each leaves the scenario's devices
# as it found them. None removes, hot-unplugs, resets or formats a controller, rebinds it to
# another driver, changes namespace attachment, sanitizes, or kills a process mid-I/O; what
# they write they alone read back (the SMART test counts deltas), and each process gives its
# devices, hugepages and VFIO groups back when it exits, as between the tests of one binary
# (which share the controllers too, RUST_TEST_THREADS=1). Any other guest test boots its own
# guest. A boot is about 10 s of each guest test's time under TCG. A batch runs in this list's
# order. The one exception to the rules above is scenario noiommu (a guest without an IOMMU):
# its binaries are one story in order: cli binds the controllers with `setup --no-iommu`, io,
# fio use them, fioremoval takes one away with QMP device_del last (each binds what is unbound
# itself, so any one also runs alone).
shared_boot=(guest_data_identify guest_data_large guest_data_qpairs guest_data_bounds
    guest_data_shadow guest_data_smoke guest_data_admin guest_data_limits guest_data_zeroes
    guest_data4k_identify guest_data4k_large guest_ns256_identify guest_ns256_scan
    guest_multins_identify guest_multins_io guest_multins_perf guest_pair_concurrent
    guest_pair_perf guest_multipath_shared guest_multipath_cli guest_multipath_container
    guest_pi_io guest_pi_image guest_pi_errors guest_pi_fio guest_data_sgl guest_data_tcp
    guest_noiommu_cli guest_noiommu_io guest_noiommu_fio guest_noiommu_fioremoval)
shares_boot() {
    local s
    for s in "${shared_boot[@]}"; do
        [ "$s" = "$1" ] && return 0
    done
    return 1
}

logdir=target/test-all-logs
mkdir -p "$logdir"

# Runs `vfnvme vm --scenario SCENARIO -- COMMAND...` from FOLDER into LOG (and stdout); once
# more after status 125: QEMU ended without the guest reporting a status (QEMU itself crashed:
# QEMU 7.2 has died once under a hot unplug during I/O) or the guest setup failed. That is the
# harness, not the test. Sets status and rerun (the note for the summary).
run_in_guest() {
    local scenario=$1 folder=$2 log=$3
    shift 3
    set +e
    (cd "$folder" && "$vfnvme" vm --scenario "$scenario" -- "$@") 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    rerun=""
    if [ "$status" -eq 125 ]; then
        cp "$log" "$log.first"
        echo "==> QEMU or the guest setup failed (status 125); running it once more" >&2
        (cd "$folder" && "$vfnvme" vm --scenario "$scenario" -- "$@") 2>&1 | tee "$log"
        status=${PIPESTATUS[0]}
        rerun=" (second run: the first ended with status 125, log $log.first)"
    fi
    set -e
}

declare -A batch_done=()
for entry in "${guest_tests[@]}"; do
    IFS='|' read -r name exe dir <<< "$entry"
    scenario=$(scenario_of "$name")
    if [ -z "$scenario" ]; then
        echo "error: $name: no scenario matches its name (guest_<scenario>_*.rs; scenarios: ${scenarios[*]})" >&2
        summary+=("FAIL  $name: no such scenario")
        failed=1
        continue
    fi
    if shares_boot "$name"; then
        [ -z "${batch_done[$scenario]:-}" ] || continue
        batch_done[$scenario]=1
        # Every selected binary of this scenario that shares a boot, in one guest, in the
        # order of shared_boot.
        args=()
        names=()
        for want in "${shared_boot[@]}"; do
            [ "$(scenario_of "$want")" = "$scenario" ] || continue
            for other in "${guest_tests[@]}"; do
                IFS='|' read -r oname oexe odir <<< "$other"
                [ "$oname" = "$want" ] || continue
                args+=("$oname" "$oexe" "$odir")
                names+=("$oname")
            done
        done
        step "guest tests ${names[*]} (scenario $scenario, one guest)"
        log="$logdir/batch-$scenario.log"
        start=$SECONDS
        run_in_guest "$scenario" . "$log" "$PWD/scripts/guest/run-batch.sh" "${args[@]}"
        for oname in "${names[@]}"; do
            # Each binary's own part of the log, between run-batch's start and end lines.
            sed -n "/^run-batch: start $oname\$/,/^run-batch: end $oname /p" "$log" \
                > "$logdir/$oname.log"
            end=$(grep -E "^run-batch: end $oname status" "$log" | tail -n 1 || true)
            result=$(grep -E '^test result:' "$logdir/$oname.log" | tail -n 1 || true)
            if [[ "$end" =~ status\ 0,\ ([0-9]+)\ s$ ]]; then
                summary+=("ok    $oname [$scenario, shared boot] ${BASH_REMATCH[1]} s: ${result:-no test summary}$rerun")
            else
                summary+=("FAIL  $oname [$scenario, shared boot] ${end:-did not run (guest status $status)}: ${result:-no test summary} (log: $log)")
                failed=1
            fi
        done
        if [ "$status" -eq 0 ]; then
            summary+=("ok    shared boot [$scenario]: $((SECONDS - start)) s in all")
        else
            summary+=("FAIL  shared boot [$scenario]: status $status, $((SECONDS - start)) s in all")
            failed=1
        fi
        continue
    fi
    step "guest test $name (scenario $scenario)"
    log="$logdir/$name.log"
    start=$SECONDS
    run_in_guest "$scenario" "$dir" "$log" "$exe"
    result=$(grep -E '^test result:' "$log" | tail -n 1 || true)
    if [ "$status" -eq 0 ]; then
        summary+=("ok    $name [$scenario] $((SECONDS - start)) s: ${result:-no test summary}$rerun")
    else
        summary+=("FAIL  $name [$scenario] status $status, $((SECONDS - start)) s: ${result:-no test summary} (log: $log)")
        failed=1
    fi
done

if [ "${#filters[@]}" -eq 0 ]; then
    export VFNVME_VM=$vfnvme
    check "C ABI + fio engine in the guest (scenario pair)" scripts/ffi-guest-check.sh
    check "fio verify across a controller reset, retries on and off (scenario pair)" \
        scripts/fio-reset-check.sh
    if [ "$full" -eq 1 ]; then
        check "fio side by side, QD 1 and 32, 5 s per run, in the guest (scenario sidebyside, --full)" \
            env SBS_SECONDS="${SBS_SECONDS:-5}" scripts/fio-side-by-side.sh
    else
        # Every engine (the kernel's controller rebound for polled queues too) at queue depth
        # 32, 1 s each: checks that the comparison works. Figures to compare come from --full's
        # 5 s runs at both depths (or scripts/fio-side-by-side.sh): each run costs about 5 s of
        # fio's start and end in the guest besides its runtime.
        check "fio side by side, QD 32, 1 s per run, in the guest (scenario sidebyside)" \
            env SBS_SECONDS=1 SBS_QDS=32 scripts/fio-side-by-side.sh
    fi
fi

step "test summary"
if [ "${#summary[@]}" -eq 0 ]; then
    echo "no guest tests ran"
fi
for line in "${summary[@]}"; do
    echo "$line"
done
if [ "$failed" -ne 0 ]; then
    echo "guest tests FAILED" >&2
    exit 1
fi
echo "all tests passed"
