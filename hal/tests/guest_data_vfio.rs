//! The real VFIO flow against a device, run inside the QEMU guest of the `data` scenario
//! (`scripts/test-all.sh`), on the first controller the harness bound to vfio-pci, or on
//! `VFNVME_GUEST_BDF` when set. Skipped, with a visible message, elsewhere.

use vfnvme_hal::pci::bind::{bind_to_driver, bind_to_vfio, current_driver, list_nvme_devices};
use vfnvme_hal::{DmaPool, PageSize, PciAddress, VfioDevice};

fn guest_device() -> Option<PciAddress> {
    use std::io::Write;
    let from_harness = std::env::var("VFNVME_VFIO_DEVICES")
        .ok()
        .filter(|_| std::env::var_os("VFNVME_GUEST").is_some())
        .and_then(|list| list.split(',').next().map(str::to_string));
    match std::env::var("VFNVME_GUEST_BDF").ok().or(from_harness) {
        Some(s) => Some(PciAddress::parse(&s).expect("the guest device is a PCI address")),
        None => {
            // Written to stderr directly so that libtest's capture does not hide it.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED (host): guest_data_vfio needs a QEMU guest; run it with scripts/test-all.sh"
            );
            None
        }
    }
}

#[test]
fn guest_vfio_flow() {
    let Some(addr) = guest_device() else { return };
    let listed = list_nvme_devices().unwrap();
    assert!(listed.iter().any(|d| d.address == addr), "{listed:?}");

    bind_to_vfio(&addr).unwrap();
    assert_eq!(current_driver(&addr).unwrap().as_deref(), Some("vfio-pci"));

    let dev = VfioDevice::open(addr).unwrap();
    let vendor = dev.config_read16(0).unwrap();
    let class = dev.config_read32(8).unwrap() >> 8;
    eprintln!("vendor {vendor:#06x} class {class:#08x}");
    assert_ne!(vendor, 0xffff);
    assert_eq!(class, 0x010802);

    dev.enable_bus_master().unwrap();
    assert_eq!(dev.config_read16(4).unwrap() & 0b110, 0b110);

    let bar = dev.bar0().unwrap();
    let cap = bar.read64(0);
    let vs = bar.read32(8);
    eprintln!("BAR0 {:#x} bytes, CAP {cap:#x}, VS {vs:#x}", bar.len());
    assert!(bar.len() >= 0x1000);
    assert!(cap != 0 && cap != u64::MAX);
    assert!(vs >= 0x0001_0000, "NVMe 1.0 or later: {vs:#x}");
    assert_eq!(
        bar.read32(bar.len()),
        u32::MAX,
        "out of range reads all ones"
    );

    let ranges = dev.iommu().iova_ranges();
    eprintln!("IOVA ranges {ranges:x?}");
    assert!(!ranges.is_empty());

    let pool = DmaPool::new(dev.iommu(), PageSize::Huge2M);
    let mut buf = pool.alloc(8192).unwrap();
    buf.as_mut_slice()[0] = 0x5a;
    assert_eq!(pool.translate(buf.as_ptr()), Some(buf.iova()));
    assert!(ranges
        .iter()
        .any(|r| buf.iova() >= r.start && buf.iova() + 8191 <= r.end));
    eprintln!(
        "mapped {} bytes, page size {:?}",
        dev.type1().expect("a type1 container").mapped_bytes(),
        pool.page_size()
    );
    assert!(dev.type1().expect("a type1 container").mapped_bytes() >= 8192);
    drop(buf);
    drop(pool);
    assert_eq!(
        dev.type1().expect("a type1 container").mapped_bytes(),
        0,
        "pool drop unmapped"
    );

    // No 1 GiB pages are reserved in the guest: the pool falls back to 2 MiB pages.
    let pool = DmaPool::new(dev.iommu(), PageSize::Huge1G);
    let big = pool.alloc(4 << 20).unwrap();
    assert_eq!(pool.page_size(), PageSize::Huge2M);
    eprintln!(
        "1 GiB request fell back to {:?}, IOVA {:#x}",
        pool.page_size(),
        big.iova()
    );
    assert!(big.iova().is_multiple_of(2 << 20), "page aligned");
    drop(big);
    drop(pool);
    assert_eq!(dev.type1().expect("a type1 container").mapped_bytes(), 0);

    identify_through_dma(&bar, &DmaPool::new(dev.iommu(), PageSize::Huge2M));
    assert_eq!(dev.type1().expect("a type1 container").mapped_bytes(), 0);

    let did = dev.reset().unwrap();
    eprintln!("reset: {did}");
    drop(bar);
    drop(dev);

    if std::env::var_os("VFNVME_GUEST_REBIND").is_some() {
        bind_to_driver(&addr, "nvme").unwrap();
        assert_eq!(current_driver(&addr).unwrap().as_deref(), Some("nvme"));
        bind_to_vfio(&addr).unwrap();
    }
}

/// Waits (really: this is a device) until `done`, for at most `ms` milliseconds.
fn wait_for(ms: u64, mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..ms {
        if done() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    done()
}

/// Disables the controller when dropped: declared after the DMA buffers it was given, it runs
/// before they are freed, on the panic path too.
struct DisableOnDrop<'a> {
    bar: &'a vfnvme_hal::Bar,
    timeout_ms: u64,
}

impl Drop for DisableOnDrop<'_> {
    fn drop(&mut self) {
        // SAFETY: CC = 0 clears CC.EN: it stops the controller and names no memory.
        unsafe { self.bar.write32(0x14, 0) };
        wait_for(self.timeout_ms, || self.bar.read32(0x1c) & 1 == 0);
    }
}

/// A minimal NVMe bring-up and Identify Controller by raw registers: proves the device reaches
/// our memory through the IOVAs the type1 IOMMU mapped (both directions).
fn identify_through_dma(bar: &vfnvme_hal::Bar, pool: &DmaPool) {
    use std::sync::atomic::{fence, Ordering};
    let cap = bar.read64(0);
    let timeout_ms = ((cap >> 24) & 0xff).max(1) * 500;
    let dstrd = (cap >> 32) & 0xf;
    // Disable, then wait for CSTS.RDY = 0.
    // SAFETY: CC = 0 clears CC.EN: it stops the controller and names no memory.
    unsafe { bar.write32(0x14, 0) };
    assert!(
        wait_for(timeout_ms, || bar.read32(0x1c) & 1 == 0),
        "disable"
    );
    let mut sq = pool.alloc(4096).unwrap();
    let cq = pool.alloc(4096).unwrap();
    let id = pool.alloc(4096).unwrap();
    // Dropped before the three buffers (declared after them): the controller is disabled
    // before they go back to the pool, whether this function returns or panics.
    let enabled = DisableOnDrop { bar, timeout_ms };
    // SAFETY: the controller is disabled (checked above), so these registers start no DMA by
    // themselves; ASQ and ACQ name `sq` and `cq`, 4 KiB buffers of this pool (mapped in the
    // device's IOMMU domain) that outlive the controller's use of them (`enabled`). Two
    // entries of 64 and 16 bytes fit in them.
    unsafe {
        bar.write32(0x24, (1 << 16) | 1); // 2-entry admin queues
        bar.write64(0x28, sq.iova());
        bar.write64(0x30, cq.iova());
    }
    assert_eq!(bar.read64(0x28), sq.iova());
    // IOCQES 4, IOSQES 6, MPS 4 KiB, NVM command set, enable.
    // SAFETY: the controller now uses the admin rings programmed above, which live until
    // `enabled` has disabled it again.
    unsafe { bar.write32(0x14, (4 << 20) | (6 << 16) | 1) };
    assert!(
        wait_for(timeout_ms, || bar.read32(0x1c) & 1 == 1),
        "enable: CSTS {:#x}",
        bar.read32(0x1c)
    );
    // Identify Controller: opcode 6, CID 0x42, PRP1 = the buffer, CNS 1.
    let sqe = &mut sq.as_mut_slice()[..64];
    sqe[0..4].copy_from_slice(&(0x06u32 | (0x42 << 16)).to_le_bytes());
    sqe[24..32].copy_from_slice(&id.iova().to_le_bytes());
    sqe[40..44].copy_from_slice(&1u32.to_le_bytes());
    fence(Ordering::SeqCst);
    // SAFETY: tail 1 exposes only entry 0, written just above: Identify with PRP1 = `id`, a
    // 4096-byte buffer of this pool (the 4096 bytes CNS 1 returns) that outlives `enabled`.
    unsafe { bar.write32(0x1000, 1) }; // SQ0 tail
    let dw3 = || {
        // SAFETY: the CQ buffer is 4096 bytes; the device writes it, so read volatile.
        unsafe { cq.as_ptr().add(12).cast::<u32>().read_volatile() }
    };
    assert!(
        wait_for(timeout_ms, || dw3() & (1 << 16) != 0),
        "no completion"
    );
    fence(Ordering::SeqCst);
    let d = dw3();
    assert_eq!(d & 0xffff, 0x42, "CID");
    assert_eq!(d >> 17, 0, "status {:#x}", d >> 17);
    // CQ0 head.
    // SAFETY: head 1 gives back CQ slot 0 of `cq`, which outlives `enabled`.
    unsafe { bar.write32(0x1000 + (4 << dstrd) as usize, 1) };
    // SAFETY: the device finished writing the buffer (completion seen).
    let data = unsafe { std::slice::from_raw_parts(id.as_ptr(), 4096) };
    let vid = u16::from_le_bytes([data[0], data[1]]);
    let serial = String::from_utf8_lossy(&data[4..24]).trim().to_string();
    eprintln!("Identify through DMA: VID {vid:#06x}, serial {serial:?}");
    assert_eq!(vid, 0x1b36);
    let want = std::env::var("VFNVME_EXPECT_SERIAL").unwrap_or_else(|_| "S0".into());
    assert_eq!(serial, want);
    drop(enabled);
    assert!(bar.read32(0x1c) & 1 == 0, "disable");
}
