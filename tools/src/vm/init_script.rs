//! The guest's `/init` (busybox sh) and the kernel command line that feeds it.
//!
//! `/init` is the same for every run (so the initramfs is cached): it mounts the host's root
//! read-only over 9p, mounts the writable output share at its host path, chroots into the host
//! and runs the per-run script named on the kernel command line (see `run_script.rs`). It then
//! prints the exit marker and powers the guest off.

/// Text printed before the exit status on the guest console.
pub const MARKER: &str = "VFNVME-GUEST-EXIT";

/// 9p mount tag of the host's root (read-only).
pub const HOST_TAG: &str = "host";

/// 9p mount tag of the writable output folder.
pub const OUT_TAG: &str = "out";

/// Folders of the host's root that `/init` covers with an empty tmpfs in the guest (the shared
/// root is read-only, and programs need these writable). Host files under them are not seen there.
pub const GUEST_TMPFS: [&str; 3] = ["/tmp", "/var/tmp", "/run"];

/// The `/init` script. Modules are listed in `/modules/order`, in load order.
pub const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# The first line on the console: the host tells a hung boot (no line at all) from a slow run.
echo "vfnvme-init: up"

nonce=none
run=
out=
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        vfnvme.nonce=*) nonce="${arg#vfnvme.nonce=}" ;;
        vfnvme.run=*) run="${arg#vfnvme.run=}" ;;
        vfnvme.out=*) out="${arg#vfnvme.out=}" ;;
    esac
done

finish() {
    echo
    echo "@MARKER@ nonce=$nonce status=$1"
    sync
    poweroff -f
    echo o > /proc/sysrq-trigger
    sleep 10
}

fail() {
    echo "vfnvme-init: $*"
    finish 125
}

[ -n "$run" ] || fail "no vfnvme.run= on the kernel command line"
[ -n "$out" ] || fail "no vfnvme.out= on the kernel command line"

while read -r module; do
    insmod "/modules/$module.ko" || fail "insmod $module failed"
done < /modules/order

mkdir -p /dev/shm /dev/hugepages /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t hugetlbfs hugetlbfs /dev/hugepages
mount -t devpts devpts /dev/pts

mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 @HOST_TAG@ /host \
    || fail "mounting the host's root over 9p failed"
mount -t tmpfs -o mode=1777 tmpfs /host/tmp || fail "tmpfs on /host/tmp failed"
mount -t tmpfs -o mode=1777 tmpfs /host/var/tmp || fail "tmpfs on /host/var/tmp failed"
mount -t tmpfs -o mode=755 tmpfs /host/run || fail "tmpfs on /host/run failed"
mount -o rbind /dev /host/dev || fail "bind /dev failed"
mount -o bind /proc /host/proc || fail "bind /proc failed"
mount -o bind /sys /host/sys || fail "bind /sys failed"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 @OUT_TAG@ "/host$out" \
    || fail "mounting the output share at $out failed"

chroot /host /bin/sh "$run"
finish $?
"#;

/// The `/init` script with its placeholders filled in.
pub fn init_script() -> String {
    INIT.replace("@MARKER@", MARKER)
        .replace("@HOST_TAG@", HOST_TAG)
        .replace("@OUT_TAG@", OUT_TAG)
}

/// The guest kernel command line.
///
/// `no_timer_check`: under TCG on a busy host the kernel's boot-time check of the timer
/// interrupt through the remapped IO-APIC can miss and panic the guest.
///
/// `clocksource=tsc tsc=reliable`: without them the guest kernel picks the emulated HPET, whose
/// every read is an MMIO exit, so each `clock_gettime` in the guest (fio, perf's timestamps)
/// costs one. The TSC is read without an exit.
///
/// Without `tsc_clock` the guest keeps its default clocksource (the plain-QEMU setup).
///
/// `iommu`: `intel_iommu=on` for a guest with the emulated IOMMU, else `intel_iommu=off` (the
/// scenarios without one: the kernel then has no IOMMU groups and no VFIO type1 domain).
///
/// `run` is the per-run script and `out` the output folder, both host paths (no whitespace).
pub fn kernel_cmdline(
    nonce: &str,
    run: &str,
    out: &str,
    verbose: bool,
    tsc_clock: bool,
    iommu: bool,
) -> String {
    let quiet = if verbose { "" } else { " quiet" };
    let iommu = if iommu { "on" } else { "off" };
    let clock = if tsc_clock {
        " clocksource=tsc tsc=reliable"
    } else {
        ""
    };
    format!(
        "console=ttyS0 intel_iommu={iommu} panic=-1 no_timer_check{clock}{quiet} vfnvme.nonce={nonce} vfnvme.run={run} vfnvme.out={out}"
    )
}

/// The exit status in a console line holding this run's marker, if it is one.
pub fn parse_marker(line: &str, nonce: &str) -> Option<u8> {
    let prefix = format!("{MARKER} nonce={nonce} status=");
    let rest = &line[line.find(&prefix)? + prefix.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse::<u8>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_has_no_placeholders_left() {
        let s = init_script();
        assert!(!s.contains('@'), "{s}");
        assert!(s.contains("VFNVME-GUEST-EXIT nonce=$nonce status=$1"));
    }

    #[test]
    fn init_covers_exactly_the_listed_folders_with_tmpfs() {
        let s = init_script();
        let covered: Vec<&str> = s
            .lines()
            .filter_map(|l| l.strip_prefix("mount -t tmpfs "))
            .filter_map(|l| l.split_whitespace().nth(3))
            .filter_map(|dir| dir.strip_prefix("/host"))
            .collect();
        assert_eq!(covered, GUEST_TMPFS, "{s}");
    }

    #[test]
    fn marker_parsing() {
        assert_eq!(
            parse_marker("VFNVME-GUEST-EXIT nonce=ab12 status=3", "ab12"),
            Some(3)
        );
        assert_eq!(
            parse_marker("[  1.0] x VFNVME-GUEST-EXIT nonce=ab12 status=0\r", "ab12"),
            Some(0)
        );
        assert_eq!(
            parse_marker("VFNVME-GUEST-EXIT nonce=other status=0", "ab12"),
            None
        );
        assert_eq!(parse_marker("hello", "ab12"), None);
    }

    #[test]
    fn cmdline_quiet_unless_verbose() {
        assert!(kernel_cmdline("n", "/r", "/o", false, true, true).contains(" quiet "));
        assert!(!kernel_cmdline("n", "/r", "/o", true, true, true).contains("quiet"));
    }

    #[test]
    fn cmdline_tsc_clock_only_when_asked() {
        let tsc = kernel_cmdline("n", "/r", "/o", false, true, true);
        assert!(tsc.contains(" clocksource=tsc tsc=reliable "), "{tsc}");
        let plain = kernel_cmdline("n", "/r", "/o", false, false, true);
        assert!(
            !plain.contains("clocksource") && !plain.contains("tsc="),
            "{plain}"
        );
        assert!(plain.contains(" vfnvme.run=/r "), "{plain}");
    }

    #[test]
    fn cmdline_iommu_on_or_off() {
        assert!(kernel_cmdline("n", "/r", "/o", false, true, true).contains(" intel_iommu=on "));
        let off = kernel_cmdline("n", "/r", "/o", false, true, false);
        assert!(
            off.contains(" intel_iommu=off ") && !off.contains("=on"),
            "{off}"
        );
    }
}
