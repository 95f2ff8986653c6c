//! Host test (model): a queue id used again after its queue pair was dropped, with shadow
//! doorbells on. QEMU 7.2 hangs here unless the driver resets the queue's shadow doorbell and
//! EventIdx slots at creation (see `guest_data_limits`).

use vfnvme::{Controller, ControllerOptions, QpairOptions};
use vfnvme_model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform};

#[test]
fn reused_qid_with_shadow_doorbells_moves_data() {
    let platform = ModelPlatform::new(ModelConfig {
        namespaces: vec![ModelNamespaceConfig {
            nsid: 1,
            blocks: 1 << 16,
            lba_size: 512,
            backing: Backing::Ram,
        }],
        ..ModelConfig::default()
    })
    .expect("model");
    let ctrl = Controller::new(platform.clone(), ControllerOptions::default()).expect("bring-up");
    assert!(ctrl.identify().shadow_doorbells);
    let ns = ctrl.namespace(1).expect("ns 1");
    let opts = QpairOptions {
        depth: 4,
        ..QpairOptions::default()
    };
    let mut first_qid = None;
    for round in 0..3u8 {
        let mut qp = ctrl.alloc_qpair(opts).expect("queue pair");
        assert!(qp.uses_shadow_doorbells());
        assert_eq!(
            *first_qid.get_or_insert(qp.qid()),
            qp.qid(),
            "same qid again"
        );
        // Leave the rings (and the shadow slots) at an odd position: 5 commands on depth 4.
        for i in 0..5u64 {
            let before = platform.stats().sq_doorbell_writes;
            let mut buf = ctrl.dma().alloc(512).expect("buffer");
            buf.as_mut_slice()
                .fill(round.wrapping_mul(16).wrapping_add(i as u8));
            qp.write_sync(&ns, i, 1, buf).expect("write");
            if i == 0 {
                // QEMU only looks at a queue after an MMIO doorbell write; the model would
                // pick up the shadow value anyway, so count the MMIO writes instead.
                assert_eq!(
                    platform.stats().sq_doorbell_writes - before,
                    1,
                    "round {round}: the first command on a new queue rings the MMIO doorbell"
                );
            }
        }
        for i in 0..5u64 {
            let buf = ctrl.dma().alloc(512).expect("buffer");
            let buf = qp.read_sync(&ns, i, 1, buf).expect("read");
            let want = round.wrapping_mul(16).wrapping_add(i as u8);
            assert!(
                buf.as_slice().iter().all(|&b| b == want),
                "round {round} LBA {i}"
            );
        }
    }
    // Exactly the commands sent: a stale shadow tail would make the controller run
    // leftover (zeroed) ring slots as flushes (opcode 0).
    let stats = platform.stats();
    assert_eq!(
        (stats.io(1), stats.io(2), stats.io(0)),
        (15, 15, 0),
        "{stats:?}"
    );
}
