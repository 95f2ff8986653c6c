//! The per-run script the guest runs inside the chroot (with the host's own `/bin/sh`).
//!
//! It reserves hugepages, loads vfio-pci, binds the scenario's vfio controllers one at a time
//! (`driver_override` + `drivers_probe`, before nvme loads), loads nvme for the rest, waits for
//! their namespaces, then runs the command in the host's working folder with a clean
//! environment. Setup failures exit 125.

use std::fmt::Write as _;

/// Exit status of the run script when the guest could not be set up.
pub const SETUP_FAILED: u8 = 125;

/// What one run does in the guest.
pub struct RunPlan<'a> {
    /// Host folder for this run's outputs (writable in the guest at the same path).
    pub out_dir: &'a str,
    /// Controllers to bind to vfio-pci, in order.
    pub vfio: &'a [String],
    /// Controllers left on nvme, with the number of namespaces to wait for on each.
    pub kernel: &'a [(String, usize)],
    /// Working folder of the command (the host's current folder).
    pub cwd: &'a str,
    /// The command's whole environment.
    pub env: &'a [(String, String)],
    /// The command and its arguments.
    pub command: &'a [String],
}

const PRELUDE: &str = r#"set -u
note() { echo "vfnvme-guest: $*"; }
save_dmesg() { dmesg > "$out/dmesg.txt" 2>&1 || true; }
setup_failed() {
    note "setup failed: $*"
    save_dmesg
    dmesg | tail -n 30
    exit @SETUP_FAILED@
}
bind_vfio() {
    dev=/sys/bus/pci/devices/$1
    [ -e "$dev" ] || setup_failed "no PCI device $1 in the guest (check the scenario's addr= or --qemu-arg)"
    echo vfio-pci > "$dev/driver_override" || setup_failed "driver_override of $1"
    echo "$1" > /sys/bus/pci/drivers_probe || setup_failed "drivers_probe of $1"
    drv=$(readlink "$dev/driver" || true)
    [ "${drv##*/}" = vfio-pci ] || setup_failed "$1 is bound to '${drv##*/}', not vfio-pci"
    group=$(readlink "$dev/iommu_group" || true)
    [ -e "/dev/vfio/${group##*/}" ] || setup_failed "$1: no /dev/vfio/${group##*/} (is the IOMMU on?)"
}
wait_nvme() {
    dev=/sys/bus/pci/devices/$1
    [ -e "$dev" ] || setup_failed "no PCI device $1 in the guest"
    tries=0
    while :; do
        count=$(ls -d "$dev"/nvme/nvme*/nvme*n* 2>/dev/null | wc -l)
        [ "$count" -ge "$2" ] && break
        tries=$((tries + 1))
        [ "$tries" -le 600 ] || setup_failed "$1: the nvme driver showed $count of $2 namespaces in 60 s"
        sleep 0.1
    done
}
echo 256 > /proc/sys/vm/nr_hugepages || note "could not reserve hugepages"
modprobe vfio-pci || setup_failed "modprobe vfio-pci"
"#;

/// The script text for `plan`.
pub fn run_script(plan: &RunPlan<'_>) -> String {
    let mut s = String::from("# Written by `vfnvme vm` for one guest run.\n");
    let _ = writeln!(s, "out={}", quote(plan.out_dir));
    s.push_str(&PRELUDE.replace("@SETUP_FAILED@", &SETUP_FAILED.to_string()));
    for bdf in plan.vfio {
        let _ = writeln!(s, "bind_vfio {}", quote(bdf));
    }
    s.push_str("modprobe nvme || setup_failed \"modprobe nvme\"\n");
    for (bdf, namespaces) in plan.kernel {
        let _ = writeln!(s, "wait_nvme {} {namespaces}", quote(bdf));
    }
    let _ = writeln!(
        s,
        "cd {} || setup_failed \"cd into the working folder\"",
        quote(plan.cwd)
    );
    s.push_str("env -i --");
    for (key, value) in plan.env {
        let _ = write!(s, " {}", quote(&format!("{key}={value}")));
    }
    for arg in plan.command {
        let _ = write!(s, " {}", quote(arg));
    }
    // The console gets no input: a command reading stdin would wait forever.
    s.push_str(" < /dev/null\nstatus=$?\nsave_dmesg\nexit $status\n");
    s
}

/// Quotes a word for sh: single quotes, with `'` written as `'\''`.
pub fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn quoting_survives_the_shell() {
        let tricky = "it's $HOME \"x\" `y` \\ ;";
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("printf %s {}", quote(tricky)))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), tricky);
    }

    #[test]
    fn binds_vfio_before_nvme_and_runs_command_last() {
        let vfio = vec!["0000:00:10.0".to_string()];
        let kernel = vec![("0000:00:11.0".to_string(), 1)];
        let env = vec![("VFNVME_GUEST".to_string(), "1".to_string())];
        let command = vec!["/bin/echo".to_string(), "a b".to_string()];
        let s = run_script(&RunPlan {
            out_dir: "/t/out",
            vfio: &vfio,
            kernel: &kernel,
            cwd: "/w",
            env: &env,
            command: &command,
        });
        let bind = s.find("bind_vfio '0000:00:10.0'").unwrap();
        let nvme = s.find("modprobe nvme ||").unwrap();
        let wait = s.find("wait_nvme '0000:00:11.0' 1").unwrap();
        let run = s
            .find("env -i -- 'VFNVME_GUEST=1' '/bin/echo' 'a b'")
            .unwrap();
        assert!(bind < nvme && nvme < wait && wait < run);
        let syntax = Command::new("sh")
            .arg("-n")
            .arg("-c")
            .arg(&s)
            .status()
            .unwrap();
        assert!(syntax.success());
    }
}
