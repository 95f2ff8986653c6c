//! Scenario `multins`: one queue pair with requests to all four namespaces (512 B and 4 KiB
//! LBAs mixed) in flight at once; each namespace keeps its own data.

use vfnvme_tests::{guest, guest_io};

#[test]
fn mixed_namespaces_in_one_batch() {
    if !guest::in_guest("guest_multins_io::mixed_namespaces_in_one_batch") {
        return;
    }
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    let nss = ctrl.namespaces();
    assert_eq!(nss.len(), 4);
    let mut qp = guest_io::qpair(&ctrl, 64);
    const LEN: usize = 64 * 1024;
    const PER_NS: u64 = 8;
    // One batch: PER_NS writes to each namespace, interleaved, then one doorbell.
    let mut submitted = 0;
    for i in 0..PER_NS {
        for ns in &nss {
            let mut buf = ctrl.dma().alloc(LEN).expect("DMA buffer");
            let tag = u64::from(ns.nsid()) * 100 + i;
            guest_io::Prng::new(tag).fill(buf.as_mut_slice());
            let blocks = (LEN / ns.lba_size() as usize) as u32;
            qp.write(ns, i * u64::from(blocks), blocks, buf, tag)
                .unwrap_or_else(|e| panic!("ns {} write {i}: {}", ns.nsid(), e.kind));
            submitted += 1;
        }
    }
    assert_eq!(qp.outstanding(), submitted);
    for c in guest_io::wait_completions(&mut qp, submitted) {
        assert!(c.is_ok(), "write {}: {:?}", c.tag, c.status);
    }
    // Read everything back in one batch as well.
    for i in 0..PER_NS {
        for ns in &nss {
            let buf = ctrl.dma().alloc(LEN).expect("DMA buffer");
            let blocks = (LEN / ns.lba_size() as usize) as u32;
            let tag = u64::from(ns.nsid()) * 100 + i;
            qp.read(ns, i * u64::from(blocks), blocks, buf, tag)
                .unwrap_or_else(|e| panic!("ns {} read {i}: {}", ns.nsid(), e.kind));
        }
    }
    for c in guest_io::wait_completions(&mut qp, submitted) {
        assert!(c.is_ok(), "read {}: {:?}", c.tag, c.status);
        let buf = c.buffer.expect("buffer back");
        let nsid = (c.tag / 100) as u32;
        let lba_size = guest_io::namespace(&ctrl, nsid).lba_size();
        guest_io::assert_same(
            &guest_io::random_bytes(LEN, c.tag),
            buf.as_slice(),
            lba_size,
            &format!("ns {nsid}, chunk {}", c.tag % 100),
        );
    }
}
