//! Scenario `data`: the limits of QEMU's controller as vfnvme meets them: the deepest queue the
//! controller allows, filled to its last command slot (depth - 1, at most
//! `queue::MAX_IN_FLIGHT`) and wrapped; every queue pair it grants; and
//! errors the device (not the driver) reports, coming back as completion status.

use std::sync::Arc;

use vfnvme::spec::status::generic;
use vfnvme::{Error, Namespace, SubmitErrorKind};
use vfnvme_tests::{guest, guest_io};

#[test]
fn deepest_queue_fills_to_the_last_slot_and_wraps() {
    if !guest::in_guest("guest_data_limits::deepest_queue_fills_to_the_last_slot_and_wraps") {
        return;
    }
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    let depth = ctrl.identify().max_queue_depth.min(4096);
    assert!(depth >= 64, "QEMU's MQES allows deep queues, got {depth}");
    let ns = guest_io::namespace(&ctrl, 1);
    let lba = ns.lba_size() as usize;
    let mut qp = guest_io::qpair(&ctrl, depth);
    // Commands in flight: depth - 1, and at most MAX_IN_FLIGHT (identifiers keep a generation).
    assert_eq!(
        qp.free_slots(),
        (depth as usize - 1).min(vfnvme::queue::MAX_IN_FLIGHT)
    );
    // Fill every slot in one batch: one doorbell for depth - 1 commands.
    let capacity = qp.free_slots();
    for i in 0..capacity {
        let mut buf = ctrl.dma().alloc(lba).expect("DMA buffer");
        guest_io::Prng::new(0xdee9 + i as u64).fill(buf.as_mut_slice());
        qp.write(&ns, i as u64, 1, buf, i as u64)
            .unwrap_or_else(|e| panic!("write {i} of {capacity}: {}", e.kind));
    }
    let extra = ctrl.dma().alloc(lba).expect("DMA buffer");
    let err = qp
        .write(&ns, 0, 1, extra, 0)
        .expect_err("no slot is left in a full queue");
    assert!(
        matches!(err.kind, SubmitErrorKind::QueueFull { .. }),
        "{:?}",
        err.kind
    );
    assert!(err.buffer.is_some(), "the refused buffer comes back");
    let done = guest_io::wait_completions(&mut qp, capacity);
    let mut tags: Vec<u64> = done
        .iter()
        .map(|c| {
            assert!(c.is_ok(), "write {}: {:?}", c.tag, c.status);
            c.tag
        })
        .collect();
    tags.sort_unstable();
    assert!(tags.iter().copied().eq(0..capacity as u64), "each tag once");
    // Two more rounds through the same rings (they wrap), reading back what was written.
    guest_io::verify_pipelined(&ctrl, &mut qp, &ns, 0, lba, capacity, 0xdee9);
    guest_io::pipelined_write_read_verify(&ctrl, &mut qp, &ns, 0, lba, capacity + 17, 0xdeea);
}

#[test]
fn every_granted_queue_pair_works_and_qids_are_reused() {
    if !guest::in_guest("guest_data_limits::every_granted_queue_pair_works_and_qids_are_reused") {
        return;
    }
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    let granted = ctrl.identify().io_queue_pairs as usize;
    assert!(granted >= 2, "granted {granted}");
    let ns = guest_io::namespace(&ctrl, 1);
    let lba = ns.lba_size() as usize;
    let mut qps: Vec<_> = (0..granted).map(|_| guest_io::qpair(&ctrl, 4)).collect();
    for (i, qp) in qps.iter_mut().enumerate() {
        let data = guest_io::random_bytes(lba, 0x9a + i as u64);
        guest_io::write_read_verify(&ctrl, qp, &ns, 100 + i as u64, &data);
    }
    match ctrl.alloc_qpair(vfnvme::QpairOptions::default()) {
        Err(Error::NoFreeQueue { granted: g }) => assert_eq!(g as usize, granted),
        other => panic!("queue pair {} of {granted}: {other:?}", granted + 1),
    }
    let freed = qps.swap_remove(granted / 2).qid();
    let mut again = guest_io::qpair(&ctrl, 8);
    assert_eq!(again.qid(), freed, "the deleted queue's id is used again");
    let data = guest_io::random_bytes(4 * lba, 0x9b);
    guest_io::write_read_verify(&ctrl, &mut again, &ns, 100, &data);
}

#[test]
fn device_errors_come_back_as_status_and_the_queue_goes_on() {
    if !guest::in_guest(
        "guest_data_limits::device_errors_come_back_as_status_and_the_queue_goes_on",
    ) {
        return;
    }
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    let ns = guest_io::namespace(&ctrl, 1);
    let lba = ns.lba_size() as usize;
    let mut qp = guest_io::qpair(&ctrl, 8);
    // Namespaces the driver believes in but the device does not: an inactive nsid (QEMU
    // answers Invalid Field, as the spec asks for an inactive nsid within NN), an nsid above
    // NN (Invalid Namespace), and ns 1 with twice its real size (so that the driver's range
    // check lets the command through).
    let inactive = Arc::new(Namespace::new(7, *ns.identity(), ns.blocks()));
    let nn = ctrl.identify().nn();
    let invalid = Arc::new(Namespace::new(nn + 1, *ns.identity(), ns.blocks()));
    let bigger = Arc::new(Namespace::new(1, *ns.identity(), ns.blocks() * 2));
    let cases = [
        (&inactive, 0, generic::INVALID_FIELD),
        (&invalid, 0, generic::INVALID_NAMESPACE),
        (&bigger, ns.blocks() + 10, generic::LBA_OUT_OF_RANGE),
    ];
    for (fake, at, sc) in cases {
        let buf = ctrl.dma().alloc(lba).expect("DMA buffer");
        qp.read(fake, at, 1, buf, 1)
            .expect("the driver lets it through");
        let c = guest_io::wait_completions(&mut qp, 1)
            .pop()
            .expect("one completion");
        assert!(!c.is_ok(), "nsid {} LBA {at}: should fail", fake.nsid());
        assert_eq!((c.status.sct(), c.status.sc()), (0, sc), "{:?}", c.status);
        assert!(c.buffer.is_some(), "a failed read gives its buffer back");
        let err = qp
            .read_sync(fake, at, 1, ctrl.dma().alloc(lba).expect("DMA buffer"))
            .expect_err("read_sync reports the status");
        assert!(matches!(err, Error::IoFailed { .. }), "{err}");
        // The queue pair goes on.
        let data = guest_io::random_bytes(lba, sc as u64);
        guest_io::write_read_verify(&ctrl, &mut qp, &ns, 5, &data);
    }
    // A split request with one failing piece reports the failure once, with its buffer.
    let max = qp.max_transfer();
    let blocks = (2 * max / lba) as u32;
    let buf = ctrl.dma().alloc(2 * max).expect("DMA buffer");
    let at = ns.blocks() - (max / lba) as u64; // first half in range, second half past the end
    qp.read(&bigger, at, blocks, buf, 9).expect("submit");
    assert_eq!(qp.outstanding(), 2);
    let c = guest_io::wait_completions(&mut qp, 1)
        .pop()
        .expect("one completion");
    assert_eq!(
        (c.tag, c.status.sc()),
        (9, generic::LBA_OUT_OF_RANGE),
        "{:?}",
        c.status
    );
    assert!(c.buffer.is_some());
    assert_eq!(qp.outstanding(), 0);
}
