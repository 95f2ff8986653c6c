//! Scenario `data`: hot removal at the hardware edge (docs/hot-removal.md).
//!
//! - `echo 1 > /sys/bus/pci/devices/BDF/remove` while the device is open: the device request
//!   eventfd fires, the test drops the device (every fd, mapping and DMA buffer) and the kernel's
//!   removal then finishes within a second; the device is rescanned and given back to vfio-pci.
//! - A BAR access after vfio-pci revoked the mapping (memory decoding turned off, as during a
//!   reset or a removal) raises SIGBUS: the process survives, CSTS reads all ones and the BAR says
//!   it was removed.

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use vfnvme::hal::pci::bind::{bind_to_vfio, current_driver};
use vfnvme::hal::{DmaPool, PageSize, PciAddress, VfioDevice};
use vfnvme_tests::guest;

const CSTS: usize = 0x1c;
const PCI_COMMAND: u64 = 0x04;
const PCI_COMMAND_MEMORY: u16 = 1 << 1;

fn device_dir(bdf: &str) -> std::path::PathBuf {
    Path::new("/sys/bus/pci/devices").join(bdf)
}

/// The kernel log, if `dmesg` can be read here.
fn dmesg() -> Option<String> {
    let out = std::process::Command::new("dmesg").output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Rescans the bus and binds the device to vfio-pci again, for the next test of this guest.
fn bring_back(addr: &PciAddress) {
    let bdf = addr.to_string();
    std::fs::write("/sys/bus/pci/rescan", "1").expect("rescan the PCI bus");
    assert!(device_dir(&bdf).exists(), "{bdf} is back after the rescan");
    bind_to_vfio(addr).unwrap_or_else(|e| panic!("rebind {bdf} to vfio-pci: {e}"));
    assert_eq!(
        current_driver(addr).unwrap().as_deref(),
        Some("vfio-pci"),
        "{bdf} is on vfio-pci again"
    );
}

#[test]
fn sysfs_remove_is_heard_and_finishes_once_released() {
    if !guest::in_guest("guest_data_removal::sysfs_remove_is_heard_and_finishes_once_released") {
        return;
    }
    let bdf = guest::vfio_devices()[0].clone();
    let addr = PciAddress::parse(&bdf).unwrap();
    let dev = VfioDevice::open(addr).unwrap();
    dev.enable_bus_master().unwrap();
    let bar = dev.bar0().unwrap();
    let pool = DmaPool::new(dev.iommu(), PageSize::Huge2M);
    let buf = pool.alloc(8192).unwrap();
    let notice = dev
        .removal_notice()
        .expect("vfio-pci of 6.1 has the request interrupt");
    assert!(std::sync::Arc::ptr_eq(
        &notice,
        &dev.removal_notice().unwrap()
    ));
    assert!(!notice.requested(), "nothing asked for the device yet");
    let csts_before = bar.read32(CSTS);
    assert_ne!(csts_before, u32::MAX);

    // The removal blocks in the kernel until we let go, so it runs on its own thread.
    let (done_tx, done_rx) = mpsc::channel();
    let remove_path = device_dir(&bdf).join("remove");
    let remover = std::thread::spawn(move || {
        let r = std::fs::write(&remove_path, "1");
        done_tx.send(Instant::now()).unwrap();
        r
    });

    assert!(
        notice.wait(Duration::from_secs(60)),
        "the device request eventfd fired"
    );
    assert!(notice.requested(), "and stays set");
    assert!(
        done_rx.try_recv().is_err(),
        "the kernel waits for us before removing the device"
    );
    // The device is still ours until we let go: the BAR is still usable.
    let csts = bar.read32(CSTS);
    eprintln!("CSTS after the request: {csts:#x}");
    assert!(!bar.removed());

    let released = Instant::now();
    drop(buf);
    drop(pool);
    drop(bar);
    drop(notice);
    drop(dev);
    let finished = done_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the sysfs remove returned after the device was released");
    let took = finished.saturating_duration_since(released);
    eprintln!("removal finished {took:?} after the release");
    remover.join().unwrap().expect("the sysfs remove succeeded");
    assert!(
        took < Duration::from_secs(1),
        "the kernel's removal took {took:?} after the release"
    );
    assert!(!device_dir(&bdf).exists(), "{bdf} is gone from sysfs");
    if let Some(log) = dmesg() {
        assert!(
            !log.contains("No device request channel registered"),
            "the kernel saw our request channel"
        );
        assert!(log.contains("Relaying device request to user"), "{log}");
    } else {
        eprintln!("dmesg not readable here: kernel log not checked");
    }

    bring_back(&addr);
    // The device works again for whoever comes next.
    let dev = VfioDevice::open(addr).unwrap();
    dev.enable_bus_master().unwrap();
    assert_ne!(dev.bar0().unwrap().read32(CSTS), u32::MAX);
}

#[test]
fn a_bar_access_after_the_mapping_was_revoked_reads_all_ones() {
    if !guest::in_guest(
        "guest_data_removal::a_bar_access_after_the_mapping_was_revoked_reads_all_ones",
    ) {
        return;
    }
    let bdf = guest::vfio_devices()[0].clone();
    let addr = PciAddress::parse(&bdf).unwrap();
    let dev = VfioDevice::open(addr).unwrap();
    dev.enable_bus_master().unwrap();
    let bar = dev.bar0().unwrap();
    let cap = bar.read64(0);
    assert!(cap != 0 && cap != u64::MAX, "CAP {cap:#x}");
    assert!(!bar.removed());

    // Turning memory decoding off makes vfio-pci zap every mapping of the BARs; the next access
    // faults with SIGBUS, which would kill the process without the handler.
    let cmd = dev.config_read16(PCI_COMMAND).unwrap();
    dev.config_write16(PCI_COMMAND, cmd & !PCI_COMMAND_MEMORY)
        .unwrap();
    assert_eq!(bar.read32(CSTS), u32::MAX, "CSTS reads all ones");
    assert!(bar.removed(), "the handler marked the BAR removed");
    assert_eq!(bar.read64(0), u64::MAX);
    // Another thread's access to the same BAR is fine too.
    let other = std::thread::scope(|s| s.spawn(|| bar.read32(0x8)).join().unwrap());
    assert_eq!(other, u32::MAX);

    // The device itself is fine: a fresh mapping after decoding is back sees the registers.
    dev.config_write16(PCI_COMMAND, cmd).unwrap();
    drop(bar);
    let bar = dev.bar0().unwrap();
    assert_eq!(bar.read64(0), cap, "a new mapping reads CAP again");
    assert!(!bar.removed());
}
