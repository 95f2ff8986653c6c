//! Scenario `multipath`: the type1 container of several IOMMU groups on the real kernel.
//! A group joins a container that mapped nothing yet (the IOVA ranges are read again), and its
//! device is then reached through that container; a group that comes after the container
//! mapped DMA memory is refused with `ContainerInUse`; `open_shared` refuses an address given
//! twice; a buffer of the shared pool is DMA'd by both controllers at the same IOVA (a write
//! through one, a read through the other).

use vfnvme::hal::iommu::Iommu;
use vfnvme::hal::pci::sysfs::iommu_group;
use vfnvme::hal::vfio::Group;
use vfnvme::hal::{DmaPool, HalError, PageSize, PciAddress, SysPaths, VfioDevice};
use vfnvme::platform::Platform;
use vfnvme::vfio_platform::{VfioOptions, VfioPlatform};
use vfnvme_tests::{guest, guest_io};

fn group_of(addr: &PciAddress) -> Group {
    let paths = SysPaths::default();
    let no = iommu_group(&paths, addr).expect("IOMMU group");
    let g = Group::open(&paths, no).expect("open the group");
    g.check_viable(&paths).expect("viable");
    g
}

#[test]
fn groups_join_before_mapping_and_are_refused_after() {
    if !guest::in_guest(
        "guest_multipath_container::groups_join_before_mapping_and_are_refused_after",
    ) {
        return;
    }
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let devices = guest::vfio_devices();
    let a = PciAddress::parse(&devices[0]).unwrap();
    let b = PciAddress::parse(&devices[1]).unwrap();

    // Refused once the container handed out an IOVA.
    let dev_a = VfioDevice::open(a).expect("open A");
    let pool = DmaPool::new(dev_a.iommu(), PageSize::Huge2M);
    let buf = pool.alloc(4096).expect("a DMA buffer");
    let g_b = group_of(&b);
    let no_b = g_b.number();
    let err = dev_a
        .type1()
        .expect("a type1 container")
        .attach_group(g_b)
        .unwrap_err();
    assert!(
        matches!(err, HalError::ContainerInUse { group } if group == no_b),
        "{err}"
    );
    assert!(err.to_string().contains("open_shared"), "{err}");
    assert_eq!(
        dev_a
            .type1()
            .expect("a type1 container")
            .group_numbers()
            .len(),
        1
    );
    drop((buf, pool, dev_a));

    // Accepted before: the second group's device is then reached through the same container.
    let dev_a = VfioDevice::open(a).expect("open A again");
    let ranges_alone = dev_a.type1().expect("a type1 container").iova_ranges();
    let g_b = group_of(&b);
    dev_a
        .type1()
        .expect("a type1 container")
        .attach_group(g_b)
        .expect("group B joins");
    assert_eq!(
        dev_a.type1().expect("a type1 container").group_numbers(),
        [iommu_group(&SysPaths::default(), &a).unwrap(), no_b]
    );
    let ranges_both = dev_a.type1().expect("a type1 container").iova_ranges();
    eprintln!("IOVA ranges: A alone {ranges_alone:x?}, A and B {ranges_both:x?}");
    for r in &ranges_both {
        assert!(
            ranges_alone
                .iter()
                .any(|x| x.start <= r.start && r.end <= x.end),
            "the ranges of both lie inside A's: {r:x?}"
        );
    }
    let file = dev_a
        .type1()
        .expect("a type1 container")
        .device_file(no_b, &b)
        .expect("B's device fd through the container");
    drop(file);
    drop(dev_a);

    // open_shared: an address twice is refused, in any spelling.
    let short = devices[0].trim_start_matches("0000:").to_string();
    let err =
        VfioPlatform::open_shared(&[&devices[0], &short], VfioOptions::default()).unwrap_err();
    assert!(matches!(err, HalError::DuplicateDevice { .. }), "{err}");
}

#[test]
fn one_pool_serves_both_controllers_at_the_same_iova() {
    if !guest::in_guest(
        "guest_multipath_container::one_pool_serves_both_controllers_at_the_same_iova",
    ) {
        return;
    }
    // Serialised with the other test of this binary: both open the same groups.
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let devices = guest::vfio_devices();
    let addrs: Vec<&str> = devices.iter().map(String::as_str).collect();
    let platforms = VfioPlatform::open_shared(&addrs, VfioOptions::default()).expect("open_shared");
    assert!(platforms[0].dma().same_pool(platforms[1].dma()));
    let ctrls: Vec<guest_io::Ctrl> = platforms
        .into_iter()
        .map(|p| {
            vfnvme::Controller::new(p, vfnvme::ControllerOptions::default()).expect("bring-up")
        })
        .collect();
    let (mut qa, mut qb) = (guest_io::qpair(&ctrls[0], 8), guest_io::qpair(&ctrls[1], 8));
    let (na, nb) = (
        guest_io::namespace(&ctrls[0], 2),
        guest_io::namespace(&ctrls[1], 2),
    );
    let data = guest_io::random_bytes(8 * na.lba_size() as usize, 0x5a4e_d001);
    // One buffer: written by A from it, then B reads into a buffer of the same pool.
    let mut buf = ctrls[0].dma().alloc(data.len()).expect("buffer");
    buf.as_mut_slice().copy_from_slice(&data);
    let iova = buf.iova();
    let buf = qa.write_sync(&na, 40, 8, buf).expect("write through A");
    assert_eq!(buf.iova(), iova);
    let mut back = buf;
    back.as_mut_slice().fill(0xa5);
    let back = qb
        .read_sync(&nb, 40, 8, back)
        .expect("read through B into the same buffer");
    guest_io::assert_same(&data, back.as_slice(), nb.lba_size(), "A's write read by B");
}

/// The tests of this binary open the same VFIO groups: one at a time.
static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
