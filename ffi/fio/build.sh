#!/usr/bin/env bash
# Builds the vfnvme fio ioengine: target/fio/vfnvme_fio.so (and its test helpers
# target/fio/getevents_check and target/fio/clock_count.so).
#
# The engine is compiled against a fio source tree that matches the fio binary it is loaded into
# (fio refuses an engine whose FIO_IOOPS_VERSION differs). By default that is Debian's fio 3.33
# source, fetched once with `apt-get source fio` into target/fio-src/ and reused afterwards.
# Use another tree with: FIO_SRC=/path/to/configured-or-not/fio ./ffi/fio/build.sh
#
# The library is built with the in-memory model (cargo feature `model`, -DVFNVME_MODEL) so that
# the engine also takes trtype=model, as the tests use it; ffi/install.sh builds the product
# library without it.
#
# Environment: FIO_SRC (fio tree), PROFILE (cargo profile for libvfnvme: release (default), debug
# or ci, as ffi/build-lib.sh takes it),
# CC (compiler, default gcc).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
profile=${PROFILE:-release}
cc=${CC:-gcc}

fetch_debian_fio() {
    local dest=$target/fio-src
    local tree
    tree=$(find "$dest" -maxdepth 1 -type d -name 'fio-*' 2>/dev/null | sort | tail -n1)
    if [[ -n "$tree" && -f "$tree/ioengines.h" ]]; then
        echo "$tree"
        return
    fi
    local list=/etc/apt/sources.list.d/vfnvme-deb-src.sources
    if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
        # Same URI and keyring as the configured bookworm binary source.
        local src=/etc/apt/sources.list.d/debian.sources
        local uri key
        uri=$(awk '/^URIs:/{u=$2} /^Suites:.*bookworm( |$)/{print u; exit}' "$src" 2>/dev/null || true)
        key=$(awk '/^Signed-By:/{print $2; exit}' "$src" 2>/dev/null || true)
        uri=${uri:-http://deb.debian.org/debian}
        key=${key:-/usr/share/keyrings/debian-archive-keyring.gpg}
        echo "build.sh: adding deb-src for bookworm ($uri) in $list" >&2
        printf 'Types: deb-src\nURIs: %s\nSuites: bookworm\nComponents: main\nSigned-By: %s\n' "$uri" "$key" >"$list"
        apt-get update -qq >&2
    fi
    command -v dpkg-source >/dev/null || apt-get install -y -qq dpkg-dev >&2
    mkdir -p "$dest"
    (cd "$dest" && apt-get source -qq fio >&2)
    tree=$(find "$dest" -maxdepth 1 -type d -name 'fio-*' | sort | tail -n1)
    [[ -n "$tree" ]] || { echo "build.sh: apt-get source fio produced no tree in $dest" >&2; exit 1; }
    echo "$tree"
}

fio_src=${FIO_SRC:-$(fetch_debian_fio)}
fio_src=$(cd "$fio_src" && pwd)
[[ -f "$fio_src/ioengines.h" ]] || { echo "build.sh: $fio_src is not a fio source tree (no ioengines.h); set FIO_SRC" >&2; exit 1; }
if [[ ! -f "$fio_src/config-host.h" ]]; then
    echo "build.sh: configuring $fio_src" >&2
    (cd "$fio_src" && ./configure >/dev/null)
fi

# libvfnvme.so
libdir=$("$root/ffi/build-lib.sh" "$profile" --features model)

mkdir -p "$target/fio"
"$cc" -O2 -g -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare -Wno-missing-field-initializers \
    -shared -fPIC -D_GNU_SOURCE -include config-host.h \
    -I"$fio_src" -DVFNVME_MODEL -I"$root/ffi/include" \
    -o "$target/fio/vfnvme_fio.so" "$root/ffi/fio/vfnvme_fio.c" "$root/ffi/fio/vfnvme_fio_mp.c" \
    "$root/ffi/fio/vfnvme_fio_md.c" \
    -L"$libdir" -lvfnvme -Wl,-rpath,"$libdir"
# The test driver of the engine's getevents() (scripts/fio-host-check.sh runs it).
"$cc" -O2 -g -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare -Wno-missing-field-initializers \
    -D_GNU_SOURCE -include config-host.h -I"$fio_src" -rdynamic \
    -o "$target/fio/getevents_check" "$root/ffi/fio/getevents_check.c" -ldl
# The clock read counter that scripts/fio-host-check.sh preloads into fio.
"$cc" -O2 -g -Wall -Wextra -shared -fPIC -D_GNU_SOURCE \
    -o "$target/fio/clock_count.so" "$root/ffi/fio/clock_count.c" -ldl -lpthread
echo "$target/fio/vfnvme_fio.so"
