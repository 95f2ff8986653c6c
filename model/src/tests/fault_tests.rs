//! Seeded fault injection (`FaultPlan`): each fault, forced with a rate of 1000 per mille.

use super::*;
use crate::{Fault, FaultPlan, ModelError};

fn rw(op: u8, cid: u16, lba: u64, buf: &DmaBuffer) -> [u8; 64] {
    sqe(op, cid, 1, buf.iova(), 0, [lba as u32, 0, 0, 0, 0, 0])
}

fn stored(p: &ModelPlatform, lba: u64) -> Vec<u8> {
    let mut out = vec![0u8; 512];
    p.read_stored(1, lba * 512, &mut out).unwrap();
    out
}

fn faults(p: &ModelPlatform, plan: FaultPlan) {
    p.set_faults(plan).unwrap();
}

#[test]
fn error_statuses_leave_the_data_as_it_was() {
    let mut b = Bench::new(config());
    let mut q = b.qpair(1, 16);
    let mut w = b.p.dma().alloc(512).unwrap();
    w.as_mut_slice().fill(0xa5);
    faults(
        &b.p,
        FaultPlan {
            media_error: 1000,
            ..FaultPlan::default()
        },
    );
    let c = q.run(&b.p, rw(0x01, 1, 7, &w));
    assert_eq!((c.cid, c.status, c.dnr), (1, 0x280, true), "Write Fault");
    let c = q.run(&b.p, rw(0x02, 2, 7, &w));
    assert_eq!((c.status, c.dnr), (0x281, true), "Unrecovered Read Error");
    assert_eq!(
        stored(&b.p, 7),
        vec![0; 512],
        "the failed write wrote nothing"
    );
    faults(
        &b.p,
        FaultPlan {
            retryable: 1000,
            ..FaultPlan::default()
        },
    );
    let c = q.run(&b.p, rw(0x01, 3, 7, &w));
    assert_eq!(
        (c.status, c.dnr),
        (0x82, false),
        "Namespace Not Ready, retryable"
    );
    assert_eq!(stored(&b.p, 7), vec![0; 512]);
    faults(&b.p, FaultPlan::default());
    let c = q.run(&b.p, rw(0x01, 4, 7, &w));
    assert_eq!(c.status, 0);
    assert_eq!(stored(&b.p, 7), vec![0xa5; 512]);
    let counts = b.p.fault_counts();
    assert_eq!(
        (counts.of(Fault::MediaError), counts.of(Fault::Retryable)),
        (2, 1)
    );
}

#[test]
fn duplicate_and_unknown_identifier_completions() {
    let mut b = Bench::new(config());
    let mut q = b.qpair(1, 16);
    let buf = b.p.dma().alloc(512).unwrap();
    faults(
        &b.p,
        FaultPlan {
            duplicate: 1000,
            ..FaultPlan::default()
        },
    );
    let c = q.run(&b.p, rw(0x02, 5, 0, &buf));
    assert_eq!((c.cid, c.status), (5, 0));
    assert_eq!(q.wait(&b.p).cid, 5, "the same completion again");
    faults(
        &b.p,
        FaultPlan {
            unknown_cid: 1000,
            ..FaultPlan::default()
        },
    );
    // Two commands in flight: the extra entries name neither.
    q.put(rw(0x02, 8, 0, &buf));
    q.put(rw(0x02, 9, 1, &buf));
    q.ring(&b.p);
    let cids: Vec<u16> = (0..4).map(|_| q.wait(&b.p).cid).collect();
    assert_eq!(cids.iter().filter(|&&c| c == 8).count(), 1, "{cids:?}");
    assert_eq!(cids.iter().filter(|&&c| c == 9).count(), 1, "{cids:?}");
    assert_eq!(b.p.fault_counts().of(Fault::UnknownCid), 2);
}

#[test]
fn a_lost_completion_never_comes_and_a_late_one_comes_late() {
    let mut b = Bench::new(config());
    let mut q = b.qpair(1, 16);
    let mut w = b.p.dma().alloc(512).unwrap();
    w.as_mut_slice().fill(0x3c);
    faults(
        &b.p,
        FaultPlan {
            lost: 1000,
            ..FaultPlan::default()
        },
    );
    q.submit(&b.p, rw(0x01, 1, 2, &w));
    for _ in 0..1000 {
        assert!(q.reap(&b.p).is_none());
        b.p.relax();
    }
    assert_eq!(stored(&b.p, 2), vec![0x3c; 512], "it executed");
    faults(
        &b.p,
        FaultPlan {
            late: 1000,
            late_ns: 50_000_000,
            ..FaultPlan::default()
        },
    );
    let start = b.p.now_ns();
    let c = q.run(&b.p, rw(0x02, 2, 2, &w));
    assert_eq!((c.cid, c.status), (2, 0));
    assert!(b.p.now_ns() - start >= 50_000_000);
}

#[test]
fn fatal_status_stops_the_controller_until_it_is_disabled() {
    let mut b = Bench::new(config());
    let mut q = b.qpair(1, 16);
    let buf = b.p.dma().alloc(512).unwrap();
    faults(
        &b.p,
        FaultPlan {
            fatal: 1000,
            ..FaultPlan::default()
        },
    );
    q.submit(&b.p, rw(0x02, 1, 0, &buf));
    assert_eq!(b.p.regs().read32(0x1C) & 0b11, 0b11, "RDY and CFS");
    for _ in 0..100 {
        assert!(q.reap(&b.p).is_none());
        b.p.relax();
    }
    poke32(b.p.regs(), 0x14, 0);
    assert_eq!(
        b.p.regs().read32(0x1C) & 0b10,
        0,
        "CFS cleared by the disable"
    );
}

#[test]
fn a_vanished_device_reads_all_ones() {
    let mut b = Bench::new(config());
    let mut q = b.qpair(1, 16);
    let buf = b.p.dma().alloc(512).unwrap();
    faults(
        &b.p,
        FaultPlan {
            gone: 1000,
            ..FaultPlan::default()
        },
    );
    q.submit(&b.p, rw(0x02, 1, 0, &buf));
    assert!(b.p.is_gone());
    assert_eq!(b.p.regs().read32(0x1C), u32::MAX);
    assert_eq!(b.p.regs().read64(0), u64::MAX);
    poke32(b.p.regs(), 0x14, 0);
    assert_eq!(b.p.regs().read32(0x1C), u32::MAX, "for good");
    assert!(q.reap(&b.p).is_none());
}

#[test]
fn no_ready_after_a_reset() {
    let b = Bench::new(ModelConfig {
        faults: FaultPlan {
            no_ready: 1000,
            ..FaultPlan::default()
        },
        ..config()
    });
    // The first enable (in `Bench::new`) is not a reset; the next one is.
    poke32(b.p.regs(), 0x14, 0);
    poke32(b.p.regs(), 0x14, CC_READY_BITS);
    for _ in 0..1000 {
        b.p.relax();
    }
    assert_eq!(b.p.regs().read32(0x1C) & 1, 0, "never ready");
    assert_eq!(b.p.fault_counts().of(Fault::NoReady), 1);
}

#[test]
fn rates_are_per_mille() {
    let plan = FaultPlan {
        lost: 600,
        late: 500,
        ..FaultPlan::default()
    };
    assert!(matches!(
        ModelPlatform::new(ModelConfig {
            faults: plan,
            ..config()
        }),
        Err(ModelError::BadLimit { .. })
    ));
    let p = ModelPlatform::new(config()).unwrap();
    assert!(p.set_faults(plan).is_err());
}

/// `held_data` lists the memory of late commands until they execute: a one-page read (PRP1),
/// and an eight-block write across three pages with a PRP list (PRP1, the list entries read,
/// each data page), and nothing once both have executed.
#[test]
fn held_data_lists_the_memory_of_late_commands_until_they_execute() {
    let mut b = Bench::new(config());
    let mut q = b.qpair(1, 16);
    assert!(b.p.held_data().is_empty());
    let r = b.p.dma().alloc(4096).unwrap();
    let w = b.p.dma().alloc(3 * 4096).unwrap();
    let mut list = b.p.dma().alloc(4096).unwrap();
    // 8 blocks of 512 bytes from 3 KiB into the first page: 1 KiB there, 3 KiB in the next.
    let start = w.iova() + 3072;
    let pages = [w.iova() + 4096, w.iova() + 8192];
    list.as_mut_slice()[..8].copy_from_slice(&pages[0].to_le_bytes());
    list.as_mut_slice()[8..16].copy_from_slice(&pages[1].to_le_bytes());
    faults(
        &b.p,
        FaultPlan {
            late: 1000,
            late_ns: 50_000_000,
            ..FaultPlan::default()
        },
    );
    q.submit(&b.p, sqe(0x02, 1, 1, r.iova() + 512, 0, [3, 0, 0, 0, 0, 0]));
    assert_eq!(b.p.held_data(), vec![(r.iova() + 512, 512)], "PRP1 only");
    // 4 KiB from 3 KiB into a page spans two pages: PRP2 is a data pointer, not a list.
    q.submit(&b.p, sqe(0x01, 2, 1, start, pages[0], [0, 0, 7, 0, 0, 0]));
    let held = b.p.held_data();
    assert_eq!(held[1..], [(start, 1024), (pages[0], 3072)], "{held:x?}");
    // 9 KiB from 3 KiB into a page: PRP1, then a list of two entries.
    q.submit(
        &b.p,
        sqe(0x01, 3, 1, start, list.iova(), [0, 0, 17, 0, 0, 0]),
    );
    let held = b.p.held_data();
    assert_eq!(
        held[3..],
        [
            (list.iova(), 16),
            (start, 1024),
            (pages[0], 4096),
            (pages[1], 4096)
        ],
        "{held:x?}"
    );
    for _ in 0..3 {
        assert_eq!(q.wait(&b.p).status, 0);
    }
    assert!(b.p.held_data().is_empty(), "all three executed");
    assert!(b.p.dma_violations().is_empty());
}
