//! Smoke test of the guest harness (scenario `data`): the scenario's controller sits on
//! vfio-pci behind the IOMMU, hugepages are reserved, and the promised facts are readable.

use std::fs;
use std::path::Path;

use vfnvme_tests::guest;

fn link_name(path: &Path) -> String {
    let target = fs::read_link(path).unwrap_or_else(|e| panic!("readlink {}: {e}", path.display()));
    target
        .file_name()
        .unwrap_or_else(|| panic!("{} points nowhere", path.display()))
        .to_string_lossy()
        .into_owned()
}

#[test]
fn vfio_controller_is_bound_and_its_group_exists() {
    if !guest::in_guest("guest_data_smoke::vfio_controller_is_bound_and_its_group_exists") {
        return;
    }
    let devices = guest::vfio_devices();
    assert_eq!(
        devices,
        ["0000:00:10.0"],
        "the data scenario has one vfio controller"
    );
    for bdf in &devices {
        let dev = Path::new("/sys/bus/pci/devices").join(bdf);
        assert!(dev.exists(), "{bdf} is not in the guest");
        let vendor = fs::read_to_string(dev.join("vendor")).unwrap();
        let device = fs::read_to_string(dev.join("device")).unwrap();
        assert_eq!(
            (vendor.trim(), device.trim()),
            ("0x1b36", "0x0010"),
            "{bdf}: not QEMU NVMe"
        );
        assert_eq!(
            link_name(&dev.join("driver")),
            "vfio-pci",
            "{bdf}: wrong driver"
        );
        let group = link_name(&dev.join("iommu_group"));
        let node = Path::new("/dev/vfio").join(&group);
        assert!(node.exists(), "{bdf}: {} is missing", node.display());
    }
    assert!(
        Path::new("/dev/vfio/vfio").exists(),
        "no VFIO container device"
    );
}

#[test]
fn hugepages_are_reserved() {
    if !guest::in_guest("guest_data_smoke::hugepages_are_reserved") {
        return;
    }
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap();
    let total: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Total:"))
        .map(|v| v.trim().parse().unwrap())
        .expect("no HugePages_Total in /proc/meminfo");
    assert!(total >= 256, "only {total} hugepages reserved");
}

#[test]
fn scenario_facts_are_exported() {
    if !guest::in_guest("guest_data_smoke::scenario_facts_are_exported") {
        return;
    }
    assert_eq!(guest::expect_var("VFNVME_SCENARIO"), "data");
    assert_eq!(guest::expect_var("VFNVME_EXPECT_SERIAL"), "VFNVME-DATA");
    assert_eq!(guest::expect_var("VFNVME_EXPECT_MODEL"), "QEMU NVMe Ctrl");
    let ns = guest::expected_namespaces(None);
    assert_eq!(ns.len(), 1);
    assert_eq!(ns[0].nsid, 1);
    assert_eq!(ns[0].blocks * u64::from(ns[0].lba_size), 64 * 1024 * 1024);
    assert!(guest::kernel_devices().is_empty());
}
