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

/// One request of `bytes` at `lba`, submitted as a whole: checks that the driver split it into
/// `ceil(bytes / max_transfer)` commands, that it completes once with success, and returns the
/// buffer.
fn split_request(
    ctrl: &Ctrl,
    qp: &mut guest_io::Qpair,
    ns: &vfnvme::Namespace,
    lba: u64,
    data: Option<&[u8]>,
    bytes: usize,
) -> Vec<u8> {
    let max = qp.max_transfer();
    let blocks = (bytes / ns.lba_size() as usize) as u32;
    let mut buf = ctrl.dma().alloc(bytes).expect("DMA buffer");
    let r = match data {
        Some(d) => {
            buf.as_mut_slice().copy_from_slice(d);
            qp.write(ns, lba, blocks, buf, 7)
        }
        None => {
            buf.as_mut_slice().fill(0xa5);
            qp.read(ns, lba, blocks, buf, 7)
        }
    };
    r.unwrap_or_else(|e| panic!("submitting {bytes} bytes at LBA {lba}: {}", e.kind));
    assert_eq!(
        qp.outstanding(),
        bytes.div_ceil(max),
        "{bytes} bytes with a {max}-byte limit per command"
    );
    let done = guest_io::wait_completions(qp, 1);
    let c = done.into_iter().next().expect("one completion");
    assert!(c.is_ok(), "{bytes} bytes at LBA {lba}: {:?}", c.status);
    assert_eq!(c.tag, 7);
    assert_eq!(qp.outstanding(), 0, "all pieces of the request completed");
    let buf = c.buffer.expect("the buffer comes back");
    buf.as_slice().to_vec()
}

/// I/O that needs PRP lists and MDTS splits on namespace `nsid`: 1 MiB, 3 MiB and odd sizes
/// (one block over a page, over a split boundary, ...), each written as one request, read back
/// as one request and again in 64 KiB pieces (so that a split that misplaces its pieces the same
/// way in both directions still fails), every byte compared.
pub fn check_large_io(ctrl: &Ctrl, nsid: u32, seed: u64) {
    let mut qp = guest_io::qpair(ctrl, 32);
    let ns = guest_io::namespace(ctrl, nsid);
    let lba = ns.lba_size() as usize;
    let max = qp.max_transfer();
    assert_eq!(
        max as u64,
        ctrl.identify()
            .mdts_bytes()
            .expect("QEMU reports MDTS")
            .min(2 << 20),
        "per-command limit follows MDTS"
    );
    let sizes = [
        1 << 20,
        3 << 20,
        (3 << 20) + 3 * lba,
        max + lba,
        max - lba,
        4096 + lba,
        8192 + lba,
        2 * 4096,
        lba,
    ];
    let mut next_lba = 4096u64;
    for (i, &bytes) in sizes.iter().enumerate() {
        if bytes % lba != 0 || bytes == 0 {
            continue;
        }
        let data = guest_io::random_bytes(bytes, seed + i as u64);
        split_request(ctrl, &mut qp, &ns, next_lba, Some(&data), bytes);
        let back = split_request(ctrl, &mut qp, &ns, next_lba, None, bytes);
        guest_io::assert_same(
            &data,
            &back,
            ns.lba_size(),
            &format!("{bytes} bytes at LBA {next_lba}, read as one request"),
        );
        let piece = (64 * 1024).max(lba);
        for (j, want) in data.chunks(piece).enumerate() {
            let at = next_lba + (j * piece / lba) as u64;
            let got = guest_io::read(ctrl, &mut qp, &ns, at, want.len());
            guest_io::assert_same(
                want,
                &got,
                ns.lba_size(),
                &format!("{bytes} bytes at LBA {next_lba}, piece {j}"),
            );
        }
        next_lba += (bytes / lba) as u64 + 8;
    }
}
