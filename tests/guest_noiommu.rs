//! Helpers of the guest tests without an IOMMU (scenario `noiommu`, `guest_noiommu_*.rs`): the
//! scenario's controllers, binding them with `vfnvme setup --no-iommu` (uio_pci_generic),
//! opening them in the no-IOMMU mode through the driver, and the shared namespaces' image files.
//!
//! The scenario's two controllers start on the kernel's nvme driver. The tests of the shared
//! boot run in order (scripts/test-all.sh): `cli` proves the refusals and binds them, the later
//! ones find them bound; each of them binds what is not bound yet ([`ensure_bound`]), so any one
//! also runs alone.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vfnvme::vfio_platform::{VfioOptions, VfioPlatform};
use vfnvme::{Controller, ControllerOptions};

use crate::guest;
use crate::guest_io::Ctrl;
use crate::vfnvme_cli;

/// The driver the no-IOMMU mode binds on Debian's kernels.
pub const UIO: &str = "uio_pci_generic";

/// Words of the refusal's opt-in line ([`vfnvme::hal::pci::noiommu::OPT_IN`]).
pub const OPT_IN: &str = "opt in with --no-iommu";

/// Words of the risk the opt-in line names.
pub const RISK: &str = "write anywhere in memory";

/// The scenario's controllers, in scenario order: `0000:01:00.0` (behind the root port, QEMU id
/// `c0`) and `0000:00:11.0`.
pub fn devices() -> Vec<String> {
    guest::kernel_devices()
}

/// The controller the hot-removal test takes away (behind the root port).
pub fn removable() -> String {
    let r = guest::device_list("VFNVME_REMOVABLE_DEVICES");
    assert_eq!(
        r.len(),
        1,
        "the scenario has one controller behind a root port"
    );
    r[0].clone()
}

/// The controller that stays (on the root bus).
pub fn staying() -> String {
    let gone = removable();
    devices()
        .into_iter()
        .find(|b| *b != gone)
        .expect("a second controller")
}

/// The driver `bdf` is bound to, if any.
pub fn driver_of(bdf: &str) -> Option<String> {
    let link = Path::new("/sys/bus/pci/devices").join(bdf).join("driver");
    std::fs::read_link(link)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
}

/// Fails unless the guest has no IOMMU: no IOMMU groups, no VFIO group nodes.
pub fn assert_no_iommu() {
    let groups = std::fs::read_dir("/sys/kernel/iommu_groups")
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(groups, 0, "the noiommu guest has IOMMU groups");
    let vfio_groups = std::fs::read_dir("/dev/vfio")
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name() != "vfio")
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    assert!(vfio_groups.is_empty(), "VFIO groups: {vfio_groups:?}");
}

/// Binds every controller of the scenario not yet on uio_pci_generic with
/// `vfnvme setup --no-iommu BDF` and checks the binding.
pub fn ensure_bound() {
    for bdf in devices() {
        if driver_of(&bdf).as_deref() == Some(UIO) {
            continue;
        }
        vfnvme_cli::ok(&["setup", "--no-iommu", &bdf]);
        assert_eq!(driver_of(&bdf).as_deref(), Some(UIO), "{bdf} after setup");
    }
}

/// The platform options of the no-IOMMU mode.
pub fn options() -> VfioOptions {
    VfioOptions {
        no_iommu: true,
        ..VfioOptions::default()
    }
}

/// Opens `bdf` (bound to uio_pci_generic) in the no-IOMMU mode and brings the controller up.
pub fn open(bdf: &str) -> Ctrl {
    let platform = VfioPlatform::open(bdf, options())
        .unwrap_or_else(|e| panic!("{bdf}: opening in the no-IOMMU mode failed: {e}"));
    assert!(platform.no_iommu() && platform.device().is_none());
    Controller::new(platform, ControllerOptions::default())
        .unwrap_or_else(|e| panic!("{bdf}: controller bring-up failed: {e}"))
}

/// Opens `bdfs` in the no-IOMMU mode sharing one physical DMA pool (for a multipath subsystem).
pub fn open_shared(bdfs: &[&str]) -> Vec<Arc<VfioPlatform>> {
    VfioPlatform::open_shared(bdfs, options())
        .unwrap_or_else(|e| panic!("{bdfs:?}: opening in the no-IOMMU mode failed: {e}"))
}

/// The image file QEMU keeps the shared namespace `nsid` in (`ssn<nsid>.img`).
pub fn image_path(nsid: u32) -> PathBuf {
    PathBuf::from(guest::expect_var("VFNVME_IMAGE_DIR")).join(format!("ssn{nsid}.img"))
}

/// `len` bytes of the shared namespace `nsid`'s image at byte `offset`.
pub fn read_image(nsid: u32, offset: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let path = image_path(nsid);
    let f =
        std::fs::File::open(&path).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    let mut out = vec![0u8; len];
    f.read_exact_at(&mut out, offset)
        .unwrap_or_else(|e| panic!("reading {len} bytes at {offset} of {}: {e}", path.display()));
    out
}

/// Waits (polling, at most `limit`) until `done` holds; false if it never did.
pub fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}
