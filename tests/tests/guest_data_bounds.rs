//! Scenario `data`: the raw submission path (what the C ABI uses) lets QEMU's controller touch
//! only one live allocation, up to the length it was allocated with. The C ABI itself
//! is checked the same way by `ffi/examples/bounds.c` in `scripts/ffi-guest-check.sh`.

use vfnvme::queue::Op;
use vfnvme::SubmitErrorKind;
use vfnvme_tests::{guest, guest_io};

#[test]
fn raw_reads_stay_inside_one_live_allocation() {
    if !guest::in_guest("guest_data_bounds::raw_reads_stay_inside_one_live_allocation") {
        return;
    }
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    let ns = guest_io::namespace(&ctrl, 1);
    let lba = ns.lba_size() as usize;
    assert!(lba <= 4096, "LBA size {lba}");
    let per_4k = (4096 / lba) as u32;
    let mut qp = guest_io::qpair(&ctrl, 8);
    let data = guest_io::random_bytes(64 << 10, 0xb0d5);
    guest_io::write(&ctrl, &mut qp, &ns, 0, &data);

    let a = ctrl.dma().alloc(4096).expect("DMA buffer");
    let mut b = ctrl.dma().alloc(4096).expect("DMA buffer");
    b.as_mut_slice().fill(0xb5);
    let pool = ctrl.dma();
    // One block more than the buffer holds, or 64 KiB, has no span: nothing to submit.
    assert!(pool.span(a.as_ptr(), 4096 + lba).is_none());
    assert!(pool.span(a.as_ptr(), 64 << 10).is_none());
    // SAFETY: 512 is inside `a`.
    let inside = unsafe { a.as_ptr().add(512) };
    assert!(pool.span(inside, 4096 - 512).is_some());
    assert!(pool.span(inside, 4096).is_none(), "runs past the end");

    // A span shorter than the transfer is refused by the queue.
    let short = pool.span(a.as_ptr(), 4096).expect("the whole buffer");
    // SAFETY: `a` is this controller's memory, alive and untouched until the read completes
    // (it fails before reaching the device here).
    let err = unsafe {
        vfnvme::queue::Request::borrowed(Op::Read, &ns, 0, per_4k + 1, short, 1)
            .and_then(|r| qp.submit(r))
    }
    .expect_err("a read longer than its span");
    assert!(
        matches!(err.kind, SubmitErrorKind::BufferTooSmall { .. }),
        "{:?}",
        err.kind
    );
    assert_eq!(qp.outstanding(), 0);

    // The exact fit reads from the device into `a`, and not a byte into its neighbour.
    // SAFETY: as above; the read completes before `a` is touched or dropped.
    unsafe {
        vfnvme::queue::Request::borrowed(Op::Read, &ns, 0, per_4k, short, 2)
            .and_then(|r| qp.submit(r))
    }
    .unwrap_or_else(|e| panic!("read into the whole buffer: {}", e.kind));
    let done = guest_io::wait_completions(&mut qp, 1);
    assert!(done[0].is_ok(), "{:?}", done[0].status);
    assert_eq!(a.as_slice(), &data[..4096]);
    assert!(
        b.as_slice().iter().all(|&x| x == 0xb5),
        "neighbour untouched"
    );

    // A freed buffer has no span, from the pool or from a cached region.
    let region = pool.region_of(a.as_ptr()).expect("pool memory");
    let a_ptr = a.as_ptr();
    drop(a);
    assert!(pool.span(a_ptr, 1).is_none());
    assert!(region.span(a_ptr, lba).is_none());
    assert!(pool.allocation_of(a_ptr).is_none());
    assert!(
        region.span(b.as_ptr(), 4096).is_some(),
        "the neighbour is live"
    );
}
