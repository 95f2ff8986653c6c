//! Scenario `data`: several queue pairs driven at once, one per thread, on disjoint LBA
//! ranges: pipelined writes of seeded random data, then pipelined reads, every byte checked.

use vfnvme_tests::{guest, guest_io};

const THREADS: usize = 4;
const CHUNK: usize = 16 * 1024;
const CHUNKS: usize = 64; // 1 MiB per thread

#[test]
fn threads_with_one_qpair_each_write_and_verify() {
    if !guest::in_guest("guest_data_qpairs::threads_with_one_qpair_each_write_and_verify") {
        return;
    }
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    assert!(
        ctrl.identify().io_queue_pairs as usize >= THREADS,
        "QEMU grants 64 queue pairs by default, got {}",
        ctrl.identify().io_queue_pairs
    );
    let ns = guest_io::namespace(&ctrl, 1);
    let blocks_per_thread = (CHUNK * CHUNKS) as u64 / u64::from(ns.lba_size());
    // Depths differ so that rings wrap at different points.
    let qpairs: Vec<_> = (0..THREADS)
        .map(|t| guest_io::qpair(&ctrl, 8 << t))
        .collect();
    let mut qids: Vec<u16> = qpairs.iter().map(|q| q.qid()).collect();
    qids.sort_unstable();
    qids.dedup();
    assert_eq!(qids.len(), THREADS, "each queue pair has its own qid");
    std::thread::scope(|s| {
        for (t, mut qp) in qpairs.into_iter().enumerate() {
            let (ctrl, ns) = (&ctrl, &ns);
            s.spawn(move || {
                let first = 1000 + t as u64 * blocks_per_thread;
                let seed = 0x5eed_0000 + (t as u64) * 0x1_0000;
                guest_io::pipelined_write_read_verify(
                    ctrl, &mut qp, ns, first, CHUNK, CHUNKS, seed,
                );
                assert_eq!(qp.outstanding(), 0);
            });
        }
    });
    // Every thread's range holds its own data after all threads are done (no cross-talk).
    let mut qp = guest_io::qpair(&ctrl, 64);
    for t in 0..THREADS {
        let first = 1000 + t as u64 * blocks_per_thread;
        let seed = 0x5eed_0000 + (t as u64) * 0x1_0000;
        guest_io::verify_pipelined(&ctrl, &mut qp, &ns, first, CHUNK, CHUNKS, seed);
    }
}

#[test]
fn threads_create_and_delete_queue_pairs_concurrently() {
    if !guest::in_guest("guest_data_qpairs::threads_create_and_delete_queue_pairs_concurrently") {
        return;
    }
    let ctrl = guest_io::open(&guest::vfio_devices()[0]);
    let ns = guest_io::namespace(&ctrl, 1);
    // Each thread creates a queue pair, moves data, drops it, five times over: admin commands
    // from several threads interleave, and qids (with their shadow doorbell slots) are reused.
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (ctrl, ns) = (&ctrl, &ns);
            s.spawn(move || {
                for round in 0..5u64 {
                    let mut qp = guest_io::qpair(ctrl, 16);
                    let first = 100_000 + t as u64 * 1024;
                    let seed = 0xc4e0_0000 + t as u64 * 100 + round;
                    guest_io::pipelined_write_read_verify(ctrl, &mut qp, ns, first, 8192, 24, seed);
                }
            });
        }
    });
}
