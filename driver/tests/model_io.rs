//! The driver core against the in-memory controller model: bring-up, I/O, splits, limits,
//! many queue pairs, shadow doorbells, shutdown.

use std::sync::Arc;
use vfnvme::controller::{Controller, ControllerOptions};
use vfnvme::platform::{Platform, RegisterIo};
use vfnvme::spec::command::DsmRange;
use vfnvme::spec::registers::{Cc, Csts, CC, CSTS, SHN_NORMAL};
use vfnvme::{Error, IoCompletion, QpairOptions, SubmitErrorKind};
use vfnvme_model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform};

fn config(lba_size: u32) -> ModelConfig {
    ModelConfig {
        namespaces: vec![ModelNamespaceConfig {
            nsid: 1,
            blocks: 1 << 20,
            lba_size,
            backing: Backing::Ram,
        }],
        mdts: 5,
        max_io_queue_pairs: 8,
        max_queue_entries: 1024,
        io_latency_ns: 0,
        admin_latency_ns: 0,
        seed: 1,
        ..ModelConfig::default()
    }
}

fn up(cfg: ModelConfig) -> (Arc<ModelPlatform>, Controller<ModelPlatform>) {
    let platform = ModelPlatform::new(cfg).expect("model config");
    let ctrl = Controller::new(platform.clone(), ControllerOptions::default()).expect("bring-up");
    (platform, ctrl)
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn bring_up_reports_controller_and_namespaces() {
    let (platform, ctrl) = up(config(512));
    let info = ctrl.identify();
    assert_eq!(info.serial(), "MODEL0001");
    assert_eq!(info.model(), "vfnvme model");
    assert_eq!(info.max_transfer_bytes, 4096 << 5);
    assert_eq!(info.max_queue_depth, 1024);
    assert_eq!(info.io_queue_pairs, 8);
    let ns = ctrl.namespace(1).expect("namespace 1 is active");
    assert_eq!(ns.lba_size(), 512);
    assert_eq!(ns.blocks(), 1 << 20);
    assert!(ctrl.namespace(2).is_none());
    assert_eq!(ctrl.namespaces().len(), 1);
    assert!(Csts(platform.regs().read32(CSTS)).rdy());
    let s = platform.stats();
    assert_eq!(
        s.admin(0x06),
        4,
        "identify controller, active list, namespace 1 and its descriptors"
    );
    assert_eq!(
        s.admin(0x09),
        2,
        "number of queues, asynchronous event configuration"
    );
}

fn write_read_back(lba_size: u32) {
    let (_p, ctrl) = up(config(lba_size));
    let ns = ctrl.namespace(1).unwrap();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let blocks = 8u32;
    let len = (blocks * lba_size) as usize;
    let data = pattern(lba_size as u64, len);
    let mut buf = ctrl.dma().alloc(len).unwrap();
    buf.as_mut_slice().copy_from_slice(&data);
    let buf = qp.write_sync(&ns, 77, blocks, buf).unwrap();
    drop(buf);
    let rbuf = ctrl.dma().alloc(len).unwrap();
    let rbuf = qp.read_sync(&ns, 77, blocks, rbuf).unwrap();
    assert_eq!(rbuf.as_slice(), &data[..]);
    // A neighbouring block was not written.
    let other = qp
        .read_sync(&ns, 76, 1, ctrl.dma().alloc(lba_size as usize).unwrap())
        .unwrap();
    assert!(other.as_slice().iter().all(|&b| b == 0));
}

#[test]
fn write_then_read_back_512() {
    write_read_back(512);
}

#[test]
fn write_then_read_back_4096() {
    write_read_back(4096);
}

#[test]
fn mdts_split_is_transparent() {
    let mut cfg = config(512);
    cfg.mdts = 1; // 8 KiB per command
    let (platform, ctrl) = up(cfg);
    assert_eq!(ctrl.identify().max_transfer_bytes, 8192);
    let ns = ctrl.namespace(1).unwrap();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let len = 100 << 10; // 100 KiB = 12.5 commands -> 13
    let data = pattern(3, len);
    let mut buf = ctrl.dma().alloc(len).unwrap();
    buf.as_mut_slice().copy_from_slice(&data);
    let before = platform.stats();
    qp.write(&ns, 1000, (len / 512) as u32, buf, 42).unwrap();
    assert_eq!(qp.outstanding(), 13);
    let mut done = vec![];
    while done.is_empty() {
        qp.poll(16, |c| done.push(c));
    }
    assert_eq!(done.len(), 1, "the parent completes once");
    assert_eq!(done[0].tag, 42);
    assert!(done[0].is_ok(), "{}", done[0].status);
    assert_eq!(platform.stats().io(0x01) - before.io(0x01), 13);
    let r = qp
        .read_sync(
            &ns,
            1000,
            (len / 512) as u32,
            ctrl.dma().alloc(len).unwrap(),
        )
        .unwrap();
    assert_eq!(r.as_slice(), &data[..]);
}

#[test]
fn a_full_queue_refuses_and_recovers() {
    let (_p, ctrl) = up(config(512));
    let ns = ctrl.namespace(1).unwrap();
    let mut qp = ctrl
        .alloc_qpair(QpairOptions {
            depth: 8,
            ..Default::default()
        })
        .unwrap();
    for t in 0..7 {
        qp.read(&ns, t, 1, ctrl.dma().alloc(512).unwrap(), t)
            .unwrap();
    }
    let e = qp
        .read(&ns, 0, 1, ctrl.dma().alloc(512).unwrap(), 99)
        .unwrap_err();
    assert_eq!(e.kind, SubmitErrorKind::QueueFull { free: 0, needed: 1 });
    let back = e.buffer.expect("the buffer comes back");
    let mut tags = vec![];
    while tags.len() < 7 {
        qp.poll(64, |c| {
            assert!(c.is_ok());
            tags.push(c.tag)
        });
    }
    tags.sort();
    assert_eq!(tags, (0..7).collect::<Vec<_>>());
    qp.read(&ns, 0, 1, back, 99).unwrap();
    let mut n = 0;
    while n == 0 {
        n = qp.poll(8, |_| ());
    }
}

#[test]
fn batch_rings_one_doorbell_and_completes_out_of_order() {
    let mut cfg = config(512);
    cfg.reorder_completions = true;
    cfg.io_latency_ns = 5_000;
    cfg.shadow_doorbells = false;
    let (platform, ctrl) = up(cfg);
    let ns = ctrl.namespace(1).unwrap();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    for t in 0..32u64 {
        let mut b = ctrl.dma().alloc(512).unwrap();
        b.as_mut_slice().fill(t as u8);
        qp.write(&ns, t, 1, b, t).unwrap();
    }
    let before = platform.stats().sq_doorbell_writes;
    qp.commit();
    assert_eq!(platform.stats().sq_doorbell_writes - before, 1);
    let mut seen = vec![];
    while seen.len() < 32 {
        qp.poll(64, |c: IoCompletion| {
            assert!(c.is_ok());
            seen.push(c.tag)
        });
    }
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(sorted, (0..32).collect::<Vec<_>>());
    for t in [0u64, 17, 31] {
        let r = qp
            .read_sync(&ns, t, 1, ctrl.dma().alloc(512).unwrap())
            .unwrap();
        assert!(r.as_slice().iter().all(|&b| b == t as u8));
    }
}

#[test]
fn shadow_doorbells_save_mmio_writes_and_can_be_turned_off() {
    let run = |shadow: bool| {
        let platform = ModelPlatform::new(ModelConfig {
            io_latency_ns: 1_000,
            ..config(512)
        })
        .unwrap();
        let ctrl = Controller::new(
            platform.clone(),
            ControllerOptions {
                shadow_doorbells: shadow,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(ctrl.identify().shadow_doorbells, shadow);
        let ns = ctrl.namespace(1).unwrap();
        let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
        assert_eq!(qp.uses_shadow_doorbells(), shadow);
        let before = platform.stats();
        let mut bufs: Vec<_> = (0..16).map(|_| ctrl.dma().alloc(512).unwrap()).collect();
        let mut done = 0;
        let mut submitted = 0u64;
        while done < 400 {
            while submitted < 400 && qp.free_slots() > 0 {
                let Some(b) = bufs.pop() else { break };
                qp.read(&ns, submitted % 1000, 1, b, submitted).unwrap();
                submitted += 1;
            }
            qp.poll(16, |c| {
                assert!(c.is_ok());
                bufs.push(c.buffer.unwrap());
                done += 1;
            });
        }
        let after = platform.stats();
        (
            (after.sq_doorbell_writes - before.sq_doorbell_writes)
                + (after.cq_doorbell_writes - before.cq_doorbell_writes),
            after.shadow_doorbell_reads - before.shadow_doorbell_reads,
        )
    };
    let (mmio, mmio_shadow_reads) = run(false);
    let (shadow, shadow_reads) = run(true);
    assert!(mmio > 0);
    assert_eq!(mmio_shadow_reads, 0, "no shadow buffers when turned off");
    assert!(shadow_reads > 0, "the controller read the shadow doorbells");
    // The model sets EventIdx to what it consumed, so an idle controller still needs an MMIO
    // write per batch; never more than without shadow doorbells.
    assert!(shadow <= mmio, "{shadow} vs {mmio}");
}

#[test]
fn many_qpairs_on_threads() {
    let (_p, ctrl) = up(config(4096));
    let ctrl = Arc::new(ctrl);
    let ns = ctrl.namespace(1).unwrap();
    let qps: Vec<_> = (0..4)
        .map(|_| {
            ctrl.alloc_qpair(QpairOptions {
                depth: 32,
                ..Default::default()
            })
            .unwrap()
        })
        .collect();
    let handles: Vec<_> = (0..4u64)
        .zip(qps)
        .map(|(t, qp)| {
            let ctrl = ctrl.clone();
            let ns = ns.clone();
            std::thread::spawn(move || {
                let mut qp = qp;
                for i in 0..20u64 {
                    let lba = t * 1000 + i;
                    let data = pattern(lba, 4096);
                    let mut b = ctrl.dma().alloc(4096).unwrap();
                    b.as_mut_slice().copy_from_slice(&data);
                    qp.write_sync(&ns, lba, 1, b).unwrap();
                }
                for i in 0..20u64 {
                    let lba = t * 1000 + i;
                    let r = qp
                        .read_sync(&ns, lba, 1, ctrl.dma().alloc(4096).unwrap())
                        .unwrap();
                    assert_eq!(r.as_slice(), &pattern(lba, 4096)[..]);
                }
                qp.qid()
            })
        })
        .collect();
    let mut qids: Vec<u16> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    qids.sort();
    qids.dedup();
    assert_eq!(qids.len(), 4, "each queue pair has its own qid");
}

#[test]
fn depth_above_mqes_is_a_typed_error() {
    let mut cfg = config(512);
    cfg.max_queue_entries = 64;
    let (_p, ctrl) = up(cfg);
    let e = ctrl
        .alloc_qpair(QpairOptions {
            depth: 65,
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::QueueDepthTooLarge {
                requested: 65,
                max: 64
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("at most 64"));
    assert!(ctrl
        .alloc_qpair(QpairOptions {
            depth: 64,
            ..Default::default()
        })
        .is_ok());
    assert!(matches!(
        ctrl.alloc_qpair(QpairOptions {
            depth: 1,
            ..Default::default()
        }),
        Err(Error::QueueDepthTooSmall { .. })
    ));
}

#[test]
fn controller_never_ready_times_out_with_csts() {
    let mut cfg = config(512);
    cfg.never_ready = true;
    let platform = ModelPlatform::new(cfg).unwrap();
    let e = Controller::new(platform.clone(), ControllerOptions::default()).unwrap_err();
    match e {
        Error::NotReady { waited_ms, csts } => {
            assert!(waited_ms >= 500, "waited the whole CAP.TO: {waited_ms} ms");
            assert_eq!(csts & 1, 0);
        }
        other => panic!("expected NotReady, got {other}"),
    }
}

#[test]
fn queue_ids_are_limited_and_reused() {
    let mut cfg = config(512);
    cfg.max_io_queue_pairs = 2;
    let (platform, ctrl) = up(cfg);
    assert_eq!(ctrl.identify().io_queue_pairs, 2);
    let a = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let b = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    assert!(matches!(
        ctrl.alloc_qpair(QpairOptions::default()),
        Err(Error::NoFreeQueue { granted: 2 })
    ));
    let qid = a.qid();
    drop(a);
    let s = platform.stats();
    assert_eq!((s.admin(0x00), s.admin(0x04)), (1, 1), "SQ then CQ deleted");
    let c = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    assert_eq!(c.qid(), qid);
    drop((b, c));
}

#[test]
fn drop_deletes_queues_and_shuts_down() {
    let (platform, ctrl) = up(config(512));
    let qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    drop(ctrl);
    let s = platform.stats();
    assert_eq!((s.admin(0x00), s.admin(0x04)), (1, 1));
    // Shut down (CC.SHN = normal), then disabled (CC.EN = 0, CSTS.RDY = 0) so that nothing the
    // controller was given is freed while it could still use it.
    let cc = Cc(platform.regs().read32(CC));
    assert_eq!(
        (cc.shn(), cc.en()),
        (SHN_NORMAL, false),
        "shut down, then disabled"
    );
    assert!(!Csts(platform.regs().read32(CSTS)).rdy());
    // The queue pair outlives the controller; dropping it deletes nothing more.
    drop(qp);
    assert_eq!(platform.stats().admin(0x00), 1);
}

#[test]
fn errors_write_zeroes_deallocate_flush() {
    let (_p, ctrl) = up(config(512));
    let ns = ctrl.namespace(1).unwrap();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let e = qp
        .read(&ns, (1 << 20) - 1, 2, ctrl.dma().alloc(1024).unwrap(), 0)
        .unwrap_err();
    assert!(matches!(e.kind, SubmitErrorKind::LbaOutOfRange { .. }));
    assert!(e.to_string().contains("past the end"));
    let mut b = ctrl.dma().alloc(4096).unwrap();
    b.as_mut_slice().fill(0xaa);
    qp.write_sync(&ns, 10, 8, b).unwrap();
    qp.write_zeroes(&ns, 10, 4, 1).unwrap();
    qp.deallocate(
        &ns,
        &[DsmRange {
            attributes: 0,
            blocks: 2,
            slba: 100,
        }],
        2,
    )
    .unwrap();
    let mut got = vec![];
    while got.len() < 2 {
        qp.poll(8, |c| {
            assert!(c.is_ok(), "{}", c.status);
            got.push(c.tag)
        });
    }
    qp.flush_sync(&ns).unwrap();
    let r = qp
        .read_sync(&ns, 10, 8, ctrl.dma().alloc(4096).unwrap())
        .unwrap();
    assert!(r.as_slice()[..2048].iter().all(|&x| x == 0));
    assert!(r.as_slice()[2048..].iter().all(|&x| x == 0xaa));
    // Sync helpers refuse to run while async I/O is outstanding.
    qp.flush(&ns, 5).unwrap();
    assert!(matches!(
        qp.flush_sync(&ns),
        Err(Error::QueueBusy { outstanding: 1 })
    ));
}

#[test]
fn raw_buffer_io_for_the_c_abi() {
    use vfnvme::queue::Op;
    let (_p, ctrl) = up(config(512));
    let ns = ctrl.namespace(1).unwrap();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let mut mem = ctrl.dma().alloc(8192).unwrap();
    mem.as_mut_slice().fill(0x5a);
    // SAFETY: `mem` is pool memory, kept alive and untouched until the completion below.
    unsafe {
        vfnvme::queue::Request::borrowed(Op::Write, &ns, 5, 16, mem.span(), 1)
            .and_then(|r| qp.submit(r))
            .unwrap()
    };
    let mut got = None;
    while got.is_none() {
        qp.poll(1, |c| got = Some(c));
    }
    let c = got.unwrap();
    assert!(c.is_ok() && c.buffer.is_none());
    let r = qp
        .read_sync(&ns, 5, 16, ctrl.dma().alloc(8192).unwrap())
        .unwrap();
    assert!(r.as_slice().iter().all(|&b| b == 0x5a));
    let short = ctrl.dma().span(mem.as_ptr(), 4096).unwrap();
    // SAFETY: as above; the call fails before touching memory.
    let e = unsafe {
        vfnvme::queue::Request::borrowed(Op::Read, &ns, 5, 16, short, 2).and_then(|r| qp.submit(r))
    };
    assert!(matches!(
        e.unwrap_err().kind,
        SubmitErrorKind::BufferTooSmall {
            needed: 8192,
            len: 4096
        }
    ));
}
