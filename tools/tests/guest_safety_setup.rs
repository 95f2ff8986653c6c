//! Scenario `safety`: `vfnvme setup` must not hurt the machine. Runs the real binary in the
//! guest against an e1000 network card (not NVMe), a kernel-driven controller whose block
//! device a process holds open (and one used as swap), a vfio-pci controller that a vfnvme
//! process holds, and a hugepage count far beyond the guest's memory. Each is refused with
//! the reason named, and nothing changes.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long the guest may take to show a device's state (driver, namespace, open file).
const DEADLINE: Duration = Duration::from_secs(120);

fn in_guest(test: &str) -> bool {
    if std::env::var_os("VFNVME_GUEST").is_none() {
        println!("SKIPPED (host): {test} runs in the guest (scripts/test-all.sh safety)");
        return false;
    }
    true
}

fn device_list(key: &str) -> Vec<String> {
    std::env::var(key)
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn vfnvme(args: &[&str]) -> Output {
    let o = Command::new(env!("CARGO_BIN_EXE_vfnvme"))
        .args(args)
        .output()
        .expect("run vfnvme");
    println!(
        "$ vfnvme {}\n{}{}(status {:?})",
        args.join(" "),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
        o.status.code()
    );
    o
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `args`, expects exit status `status` and each of `needles` in the output.
fn expect(args: &[&str], status: i32, needles: &[&str]) -> String {
    let o = vfnvme(args);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(status), "vfnvme {args:?}: {t}");
    for n in needles {
        assert!(t.contains(n), "vfnvme {args:?}: no {n:?} in: {t}");
    }
    assert!(!t.contains("panicked"), "{t}");
    t
}

fn driver(bdf: &str) -> Option<String> {
    fs::read_link(Path::new("/sys/bus/pci/devices").join(bdf).join("driver"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
}

fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < DEADLINE,
            "{what}: not within {DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The block device of namespace 1 of the kernel-driven controller `bdf`.
fn block_device(bdf: &str) -> PathBuf {
    let mut found = None;
    wait_until(
        &format!("a namespace of {bdf} on the kernel driver"),
        || {
            let dir = Path::new("/sys/bus/pci/devices").join(bdf).join("nvme");
            found = fs::read_dir(dir).ok().and_then(|d| {
                d.flatten().find_map(|c| {
                    let cname = c.file_name().to_string_lossy().into_owned();
                    let ns = format!("{cname}n1");
                    c.path()
                        .join(&ns)
                        .join("dev")
                        .exists()
                        .then(|| Path::new("/dev").join(ns))
                        .filter(|p| p.exists())
                })
            });
            found.is_some()
        },
    );
    found.unwrap()
}

/// Kills and reaps a helper process when dropped, whatever happened.
struct Reap(Option<Child>);

impl Reap {
    fn pid(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    /// Waits for the process to end by itself and returns its output.
    fn output(mut self) -> Output {
        self.0
            .take()
            .expect("a process")
            .wait_with_output()
            .expect("wait for the process")
    }
}

impl Drop for Reap {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn holds(pid: u32, path: &str) -> bool {
    fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|d| {
        d.flatten()
            .any(|f| fs::read_link(f.path()).is_ok_and(|t| t == Path::new(path)))
    })
}

#[test]
fn a_device_that_is_not_nvme_is_refused_and_left_alone() {
    if !in_guest("guest_safety_setup::a_device_that_is_not_nvme_is_refused_and_left_alone") {
        return;
    }
    let nic = &device_list("VFNVME_OTHER_DEVICES")[0];
    let _ = Command::new("modprobe").arg("e1000").status();
    wait_until("the e1000 driver takes the card", || {
        driver(nic).as_deref() == Some("e1000")
    });
    let what = [
        "not an NVMe controller",
        "an Ethernet controller",
        "class 0x020000",
        "8086:100e",
        "driver e1000",
    ];
    expect(&["setup", "--dry-run", nic], 1, &what);
    expect(&["setup", nic], 1, &what);
    expect(&["setup", "--reset", nic], 1, &what);
    assert_eq!(
        driver(nic).as_deref(),
        Some("e1000"),
        "setup touched the card"
    );
    let over = fs::read_to_string(format!("/sys/bus/pci/devices/{nic}/driver_override"))
        .unwrap_or_default();
    assert_eq!(over.trim(), "(null)", "setup wrote driver_override");
    for args in [
        vec!["identify", nic.as_str()],
        vec!["perf", "--device", nic.as_str(), "--time", "1"],
    ] {
        let t = expect(
            &args,
            1,
            &["not an NVMe controller", "an Ethernet controller"],
        );
        assert!(!t.contains("vfnvme setup"), "advises setup on a NIC: {t}");
    }
    // The library (and so the C ABI, which opens through it) says the same.
    let err = vfnvme::vfio_platform::VfioPlatform::open(nic, Default::default())
        .expect_err("opened a network card as an NVMe controller");
    assert!(
        matches!(
            err,
            vfnvme::hal::HalError::NotNvme {
                class: 0x020000,
                ..
            }
        ),
        "{err}"
    );
    // `list` shows NVMe controllers only.
    let t = expect(&["list"], 0, &[]);
    assert!(!t.contains(nic.as_str()), "{t}");
}

#[test]
fn a_block_device_open_in_a_process_or_used_as_swap_is_refused() {
    if !in_guest("guest_safety_setup::a_block_device_open_in_a_process_or_used_as_swap_is_refused")
    {
        return;
    }
    let bdf = &device_list("VFNVME_KERNEL_DEVICES")[0];
    let dev = block_device(bdf);
    let dev_s = dev.display().to_string();
    // A process keeps the namespace open (as a database or `dd` would), not mounted.
    let holder = Reap(Some(
        Command::new("sleep")
            .arg("600")
            .stdin(Stdio::from(
                File::open(&dev).expect("open the block device"),
            ))
            .spawn()
            .expect("run sleep"),
    ));
    let pid = holder.pid();
    wait_until("sleep holds the block device", || holds(pid, &dev_s));
    let who = format!("pid {pid} (sleep) has {dev_s} open");
    expect(&["setup", bdf], 1, &[&who, "refused"]);
    // Without names it skips the controller and says why.
    expect(&["setup", "--dry-run"], 0, &["NOT binding", &who]);
    assert_eq!(
        driver(bdf).as_deref(),
        Some("nvme"),
        "setup took a held controller"
    );
    drop(holder);

    // The namespace as swap.
    let mkswap = Command::new("mkswap")
        .arg(&dev)
        .output()
        .expect("run mkswap");
    assert!(mkswap.status.success(), "{}", text(&mkswap));
    let on = Command::new("swapon")
        .arg(&dev)
        .output()
        .expect("run swapon");
    assert!(on.status.success(), "{}", text(&on));
    let t = vfnvme(&["setup", bdf]);
    let off = Command::new("swapoff")
        .arg(&dev)
        .output()
        .expect("run swapoff");
    assert!(off.status.success(), "{}", text(&off));
    assert_eq!(t.status.code(), Some(1), "{}", text(&t));
    assert!(
        text(&t).contains(&format!("{dev_s} is a swap area")),
        "{}",
        text(&t)
    );
    assert_eq!(driver(bdf).as_deref(), Some("nvme"));
}

#[test]
fn reset_of_a_controller_a_process_holds_is_refused_and_never_blocks() {
    if !in_guest(
        "guest_safety_setup::reset_of_a_controller_a_process_holds_is_refused_and_never_blocks",
    ) {
        return;
    }
    let bdf = &device_list("VFNVME_VFIO_DEVICES")[0];
    let group = fs::read_link(format!("/sys/bus/pci/devices/{bdf}/iommu_group"))
        .expect("iommu group")
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let node = format!("/dev/vfio/{group}");
    // vfnvme itself holds it: a long perf run.
    let perf = Reap(Some(
        Command::new(env!("CARGO_BIN_EXE_vfnvme"))
            .args(["perf", "--device", bdf, "--qd", "1", "--time", "600"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run vfnvme perf"),
    ));
    let pid = perf.pid();
    wait_until("perf opens the VFIO group", || holds(pid, &node));
    let who = format!("pid {pid} (vfnvme) has {node} open");
    expect(
        &["setup", "--reset", bdf],
        1,
        &["NOT giving it back", &who, "--force"],
    );
    assert_eq!(driver(bdf).as_deref(), Some("vfio-pci"));

    // --force: the kernel waits for perf to let go; setup must come back anyway.
    let start = Instant::now();
    let t = expect(&["setup", "--force", "--reset", bdf], 0, &[]);
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "setup --reset --force blocked for {:?}",
        start.elapsed()
    );
    assert!(
        t.contains("waiting for the process using it to let go") || t.contains("giving it back"),
        "{t}"
    );
    // Ctrl-C on perf (unless it already let go on its own, see below): it prints what it
    // measured and lets go; the rebind completes.
    let kill = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(kill.success());
    let out = perf.output();
    let perf_text = text(&out);
    println!("perf after Ctrl-C:\n{perf_text}");
    wait_until("the controller is back on nvme", || {
        driver(bdf).as_deref() == Some("nvme")
    });
    // The unbind asks for the device back through the request eventfd the driver registers:
    // perf usually notices first (its I/O ends with "controller lost" and it exits, printing
    // what it measured); if the Ctrl-C comes first, it stops as interrupted. Either way it
    // prints its partial results and lets go.
    let interrupted = out.status.success() && perf_text.contains("interrupted (Ctrl-C)");
    let noticed_removal = perf_text.contains("controller lost");
    assert!(
        perf_text.contains("IOPS") && (interrupted || noticed_removal),
        "perf did not print its partial results: {perf_text}"
    );
    // And back to vfio-pci for the other tests.
    expect(&["setup", bdf], 0, &["binding to vfio-pci"]);
    assert_eq!(driver(bdf).as_deref(), Some("vfio-pci"));
}

#[test]
fn a_hugepage_count_beyond_memory_is_refused_and_the_count_stays() {
    if !in_guest(
        "guest_safety_setup::a_hugepage_count_beyond_memory_is_refused_and_the_count_stays",
    ) {
        return;
    }
    let nr = "/proc/sys/vm/nr_hugepages";
    let before = fs::read_to_string(nr).unwrap();
    for args in [
        &["setup", "--dry-run", "--hugepages", "99999999999"][..],
        &["setup", "--hugepages", "99999999999"][..],
    ] {
        expect(
            args,
            1,
            &[
                "would leave less than",
                "MiB of memory available",
                "use --hugepages",
            ],
        );
        assert_eq!(
            fs::read_to_string(nr).unwrap(),
            before,
            "{args:?} changed the count"
        );
    }
    // --persist (dry run: /etc is read-only in the guest) names the sysctl.d file.
    expect(
        &["setup", "--dry-run", "--persist"],
        0,
        &["/etc/sysctl.d/60-vfnvme-hugepages.conf", "hugepagesz=1G"],
    );
    assert_eq!(fs::read_to_string(nr).unwrap(), before);
}

#[test]
fn list_groups_by_subsystem_and_names_who_drives_each_namespace() {
    if !in_guest("guest_safety_setup::list_groups_by_subsystem_and_names_who_drives_each_namespace")
    {
        return;
    }
    let t = expect(
        &["list"],
        0,
        &[
            "subsystem nqn.2019-08.org.qemu:VFNVME-SAFE-VFIO",
            "subsystem nqn.2019-08.org.qemu:VFNVME-SAFE-KERNEL",
            "LBA 512 B + 0 B metadata",
            "vfnvme (vfio-pci)",
            "kernel nvme: /dev/nvme",
        ],
    );
    assert_eq!(t.matches("16.00 MiB").count(), 2, "{t}");
    let o = vfnvme(&["list", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("list JSON");
    let ctrls = v["Controllers"].as_array().expect("an array");
    let devices = v["Devices"].as_array().expect("Devices");
    assert_eq!(devices.len(), 2, "{v}");
    for d in devices {
        assert_eq!(d["PhysicalSize"], 16u64 << 20, "{d}");
        assert_eq!(d["SectorSize"], 512, "{d}");
        assert!(
            !d["Firmware"].as_str().unwrap_or_default().is_empty(),
            "{d}"
        );
    }
    // The kernel's namespace by its block device, vfnvme's by address.
    assert!(
        devices.iter().any(|d| d["DevicePath"]
            .as_str()
            .unwrap_or_default()
            .starts_with("/dev/nvme")),
        "{v}"
    );
    assert_eq!(ctrls.len(), 2, "{v}");
    for c in ctrls {
        assert_eq!(c["namespaces"][0]["nsid"], 1, "{c}");
        assert_eq!(c["namespaces"][0]["size_bytes"], 16u64 << 20, "{c}");
        assert_eq!(c["namespaces"][0]["lba_size"], 512, "{c}");
    }

    // setup.sh's words and environment: status shows both controllers with their drivers
    // and the kernel's block device, and the hugepages per node; PCI_BLOCKED keeps a
    // controller out of a dry run; cleanup finds nothing held.
    let vfio = ctrls
        .iter()
        .find(|c| c["driver"] == "vfio-pci")
        .and_then(|c| c["address"].as_str())
        .expect("a controller on vfio-pci")
        .to_string();
    let s = expect(
        &["setup", "status"],
        0,
        &["NVMe controllers", "vfio-pci", "nvme", "Hugepages (2 MiB)"],
    );
    assert!(
        s.lines()
            .any(|l| l.starts_with(&vfio) && l.contains("vfio-pci")),
        "{s}"
    );
    assert!(
        s.lines().any(|l| l.contains(" nvme ") && l.contains("n1")),
        "{s}"
    );
    let o = Command::new(env!("CARGO_BIN_EXE_vfnvme"))
        .args(["setup", "--dry-run", &vfio])
        .env("PCI_BLOCKED", &vfio)
        .output()
        .expect("run vfnvme");
    let t = text(&o);
    assert!(
        t.contains(&format!("{vfio}: skipped (PCI_ALLOWED / PCI_BLOCKED)")),
        "{t}"
    );
    expect(
        &["setup", "cleanup"],
        0,
        &[&format!("{vfio}: on vfio-pci, no process holds it")],
    );
}

#[test]
fn a_user_given_the_controller_runs_vfnvme_without_root() {
    if !in_guest("guest_safety_setup::a_user_given_the_controller_runs_vfnvme_without_root") {
        return;
    }
    let vfio = device_list("VFNVME_VFIO_DEVICES")
        .into_iter()
        .next()
        .expect("a controller on vfio-pci");
    let group = fs::read_link(
        Path::new("/sys/bus/pci/devices")
            .join(&vfio)
            .join("iommu_group"),
    )
    .expect("its IOMMU group");
    let node = Path::new("/dev/vfio").join(group.file_name().expect("a group number"));
    // TARGET_USER as setup.sh reads it (a uid: the guest has no user database of its own).
    let o = Command::new(env!("CARGO_BIN_EXE_vfnvme"))
        .args(["setup", &vfio])
        .env("TARGET_USER", "4242")
        .output()
        .expect("run vfnvme");
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("now belongs to 4242"), "{t}");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(fs::metadata(&node).expect("the group file").uid(), 4242);
    // As uid 4242, with the memlock limit the limits.d entry would give at login.
    let as_user = |args: &[&str]| {
        let o = Command::new("prlimit")
            .args([
                "--memlock=unlimited:unlimited",
                "setpriv",
                "--reuid=4242",
                "--regid=4242",
                "--clear-groups",
            ])
            .arg(env!("CARGO_BIN_EXE_vfnvme"))
            .args(args)
            .output()
            .expect("run prlimit/setpriv (util-linux)");
        let t = text(&o);
        println!("as uid 4242: vfnvme {args:?}\n{t}");
        (o.status.success(), t)
    };
    let (ok, t) = as_user(&["identify", &vfio]);
    // Give the group back to root before asserting, so a failure leaves nothing behind.
    let (perf_ok, perf) = as_user(&["perf", "--device", &vfio, "--qd", "4", "--ios", "2000"]);
    nix_chown_root(&node);
    assert!(ok, "identify as uid 4242: {t}");
    assert!(
        perf_ok && perf.contains("Total"),
        "perf as uid 4242: {perf}"
    );
}

fn nix_chown_root(node: &Path) {
    let s = Command::new("chown")
        .arg("0:0")
        .arg(node)
        .status()
        .expect("chown");
    assert!(s.success());
}
