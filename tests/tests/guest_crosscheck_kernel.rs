//! Scenario `crosscheck`: the kernel's nvme driver checks vfnvme's data and vice versa.
//!
//! 1. vfnvme writes seeded random data, flushes, and lets go of the controller;
//! 2. the controller is rebound to the kernel nvme driver; the test waits (bounded) for the
//!    block device whose sysfs path leads to the controller, checks its size, reads the data
//!    with O_DIRECT and compares; then writes other data through the kernel with O_DIRECT;
//! 3. the controller goes back to vfio-pci (also when the test fails, so the guest ends clean)
//!    and vfnvme reads the kernel's data back.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use vfnvme::hal::pci::bind as pci_bind;
use vfnvme::hal::PciAddress;
use vfnvme_tests::{guest, guest_io};

/// Where and how much each side writes (bytes; whole 4 KiB pages for O_DIRECT).
const VFNVME_AT: u64 = 1 << 20;
const KERNEL_AT: u64 = 8 << 20;
const LEN: usize = 1 << 20;
/// How long the kernel may take to probe the controller and show its namespace.
const KERNEL_DEADLINE: Duration = Duration::from_secs(60);

/// Puts the controller back on vfio-pci when dropped, whatever happened.
struct BackToVfio(PciAddress);

impl Drop for BackToVfio {
    fn drop(&mut self) {
        if let Err(e) = pci_bind::bind_to_vfio(&self.0) {
            eprintln!("could not rebind {} to vfio-pci: {e}", self.0);
        }
    }
}

fn path_mentions(path: &Path, bdf: &str) -> bool {
    fs::canonicalize(path)
        .map(|p| p.components().any(|c| c.as_os_str() == bdf))
        .unwrap_or(false)
}

/// The block device of namespace 1 of the kernel-driven controller at `bdf`, if it is there
/// yet: `/sys/block/nvme*` whose sysfs path (or, for a native-multipath head, a path of its
/// `multipath/` folder) leads through the PCI device.
fn find_block_device(bdf: &str) -> Option<String> {
    let mut found = None;
    for entry in fs::read_dir("/sys/block").ok()?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("nvme") || !name.ends_with("n1") {
            continue;
        }
        let sys = entry.path();
        let direct = path_mentions(&sys, bdf);
        let via_path = fs::read_dir(sys.join("multipath"))
            .map(|d| d.flatten().any(|p| path_mentions(&p.path(), bdf)))
            .unwrap_or(false);
        if direct || via_path {
            found = Some(name);
        }
    }
    found
}

/// Polls (bounded by [`KERNEL_DEADLINE`]) until the block device exists with its device node.
fn wait_for_block_device(bdf: &str) -> (String, PathBuf) {
    let start = Instant::now();
    loop {
        if let Some(name) = find_block_device(bdf) {
            let dev = Path::new("/dev").join(&name);
            let size = fs::read_to_string(format!("/sys/block/{name}/size")).unwrap_or_default();
            if dev.exists() && size.trim().parse::<u64>().is_ok_and(|s| s > 0) {
                return (name, dev);
            }
        }
        assert!(
            start.elapsed() < KERNEL_DEADLINE,
            "no block device for {bdf} within {KERNEL_DEADLINE:?} after binding it to nvme (see dmesg)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A 4 KiB-aligned window of `len` bytes inside `backing` (as O_DIRECT wants), without unsafe.
fn aligned(backing: &mut Vec<u8>, len: usize) -> &mut [u8] {
    backing.resize(len + 4096, 0);
    let off = backing.as_ptr().align_offset(4096);
    &mut backing[off..off + len]
}

fn open_direct(dev: &Path, write: bool) -> File {
    OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_DIRECT)
        .open(dev)
        .unwrap_or_else(|e| panic!("open {} with O_DIRECT: {e}", dev.display()))
}

#[test]
fn kernel_reads_what_vfnvme_wrote_and_back() {
    if !guest::in_guest("guest_crosscheck_kernel::kernel_reads_what_vfnvme_wrote_and_back") {
        return;
    }
    let bdf = guest::vfio_devices()[0].clone();
    let addr = PciAddress::parse(&bdf).expect("a PCI address");
    let expected = guest::expected_namespaces(None)[0];
    let vfnvme_data = guest_io::random_bytes(LEN, 0xc0c0);
    let kernel_data = guest_io::random_bytes(LEN, 0xcafe);

    // 1. vfnvme writes.
    {
        let ctrl = guest_io::open(&bdf);
        let ns = guest_io::namespace(&ctrl, 1);
        let mut qp = guest_io::qpair(&ctrl, 32);
        let lba = u64::from(ns.lba_size());
        guest_io::write_read_verify(&ctrl, &mut qp, &ns, VFNVME_AT / lba, &vfnvme_data);
        qp.flush_sync(&ns).expect("flush before handing over");
    } // queue pair, controller (shutdown) and VFIO device all closed here

    // 2. The kernel reads and writes.
    let _guard = BackToVfio(addr);
    pci_bind::bind_to_driver(&addr, "nvme")
        .unwrap_or_else(|e| panic!("binding {bdf} to nvme: {e}"));
    let (name, dev) = wait_for_block_device(&bdf);
    let sectors: u64 = fs::read_to_string(format!("/sys/block/{name}/size"))
        .expect("size")
        .trim()
        .parse()
        .expect("size is a number");
    assert_eq!(
        sectors * 512,
        expected.blocks * u64::from(expected.lba_size),
        "{name}: size as the kernel sees it"
    );
    {
        let file = open_direct(&dev, true);
        let mut backing = Vec::new();
        let buf = aligned(&mut backing, LEN);
        file.read_exact_at(buf, VFNVME_AT)
            .unwrap_or_else(|e| panic!("O_DIRECT read of {}: {e}", dev.display()));
        guest_io::assert_same(
            &vfnvme_data,
            buf,
            expected.lba_size,
            &format!("{name} read by the kernel"),
        );
        buf.copy_from_slice(&kernel_data);
        file.write_all_at(buf, KERNEL_AT)
            .unwrap_or_else(|e| panic!("O_DIRECT write of {}: {e}", dev.display()));
        file.sync_all().expect("fsync the block device");
    }

    // 3. Back to vfio-pci; vfnvme reads the kernel's data.
    pci_bind::bind_to_vfio(&addr).unwrap_or_else(|e| panic!("binding {bdf} back to vfio-pci: {e}"));
    let ctrl = guest_io::open(&bdf);
    let ns = guest_io::namespace(&ctrl, 1);
    let mut qp = guest_io::qpair(&ctrl, 32);
    let lba = u64::from(ns.lba_size());
    let got = guest_io::read(&ctrl, &mut qp, &ns, KERNEL_AT / lba, LEN);
    guest_io::assert_same(
        &kernel_data,
        &got,
        ns.lba_size(),
        "kernel's data read by vfnvme",
    );
    let got = guest_io::read(&ctrl, &mut qp, &ns, VFNVME_AT / lba, LEN);
    guest_io::assert_same(
        &vfnvme_data,
        &got,
        ns.lba_size(),
        "vfnvme's data after the round trip",
    );
}
