//! Test bodies shared by several guest scenarios (`data`, `data4k`, `multins`, ...): each
//! scenario's test binary calls them after [`crate::guest::in_guest`].

use crate::guest::{self, ExpectedNamespace};
use crate::guest_io::{self, Ctrl};

/// The controller in `slot`'s expected serial (`VFNVME_EXPECT_SERIAL[_<SLOT>]`).
pub fn expected_serial(slot: Option<u8>) -> String {
    match slot {
        Some(s) => guest::expect_var(&format!("VFNVME_EXPECT_SERIAL_{s:02X}")),
        None => guest::expect_var("VFNVME_EXPECT_SERIAL"),
    }
}

/// Checks what bring-up learned against what QEMU was told: serial, model, MDTS, namespace
/// count, and each namespace's size and LBA size.
pub fn check_identify(ctrl: &Ctrl, slot: Option<u8>) {
    let info = ctrl.identify();
    assert_eq!(info.serial().trim(), expected_serial(slot), "serial");
    assert_eq!(
        info.model().trim(),
        guest::expect_var("VFNVME_EXPECT_MODEL"),
        "model"
    );
    let mdts: u32 = guest::expect_var("VFNVME_EXPECT_MDTS")
        .parse()
        .expect("VFNVME_EXPECT_MDTS is a number");
    assert_eq!(u32::from(info.identify.mdts), mdts, "MDTS");
    assert_eq!(info.mdts_bytes(), Some(4096u64 << mdts), "MDTS in bytes");
    assert_eq!(
        info.max_transfer_bytes as u64,
        (4096u64 << mdts).min(2 << 20),
        "the driver's per-command transfer limit"
    );
    assert!(info.io_queue_pairs >= 1, "no I/O queue pairs granted");
    assert!(
        info.version.0 >= 0x0001_0400,
        "VS {:#x}: QEMU 7.2 reports NVMe 1.4",
        info.version.0
    );

    let expected = guest::expected_namespaces(slot);
    let largest = expected.iter().map(|n| n.nsid).max().unwrap_or(0);
    assert!(
        info.nn() >= largest,
        "NN {} is below the largest expected nsid {largest}",
        info.nn()
    );
    let found: Vec<ExpectedNamespace> = ctrl
        .namespaces()
        .iter()
        .map(|n| ExpectedNamespace {
            nsid: n.nsid(),
            blocks: n.blocks(),
            lba_size: n.lba_size(),
        })
        .collect();
    assert_eq!(found, expected, "namespaces (nsid, blocks, LBA size)");
}

/// On every expected namespace: writes random data to the first and last block (and a short
/// run ending at the last block), reads back and compares; then checks that a read past the
/// end is refused before reaching the device.
pub fn check_namespace_edges(ctrl: &Ctrl, seed: u64) {
    let mut qp = guest_io::qpair(ctrl, 32);
    for (i, exp) in guest::expected_namespaces(None).iter().enumerate() {
        let ns = guest_io::namespace(ctrl, exp.nsid);
        let lba = exp.lba_size as usize;
        let seed = seed + i as u64 * 1000;
        guest_io::write_read_verify(ctrl, &mut qp, &ns, 0, &guest_io::random_bytes(lba, seed));
        guest_io::write_read_verify(
            ctrl,
            &mut qp,
            &ns,
            exp.blocks - 1,
            &guest_io::random_bytes(lba, seed + 1),
        );
        guest_io::write_read_verify(
            ctrl,
            &mut qp,
            &ns,
            exp.blocks - 8,
            &guest_io::random_bytes(8 * lba, seed + 2),
        );
        let buf = ctrl.dma().alloc(2 * lba).expect("DMA buffer");
        let err = qp
            .read(&ns, exp.blocks - 1, 2, buf, 0)
            .expect_err("a read past the end must be refused");
        assert!(err.buffer.is_some(), "the buffer comes back with the error");
    }
}
