//! The device matrix: the driver against model controllers shaped like real SSDs differ from
//! QEMU's defaults (doorbell stride, queue limits, page sizes, timeouts, NVMe versions and the
//! commands each lacks, MDTS, queue grants, admin queue size, nsid gaps, LBA formats, slow
//! CSTS.RDY), each with write / read / verify on several queue pairs with PRP lists and split
//! requests, or a clear refusal where the driver can't work. Every combination run is printed
//! (past libtest's capture) as `matrix: <name>: <outcome>`.

use std::io::Write;
use std::sync::Arc;
use vfnvme::controller::{Controller, ControllerOptions};
use vfnvme::error::OptionalCommand;
use vfnvme::spec::command::DsmRange;
use vfnvme::{Error, QpairOptions, SubmitErrorKind};
use vfnvme_model::{Backing, ModelConfig, ModelMetadata, ModelNamespaceConfig, ModelPlatform};

fn ns(nsid: u32, lba_size: u32) -> ModelNamespaceConfig {
    ModelNamespaceConfig {
        nsid,
        blocks: 1 << 14,
        lba_size,
        backing: Backing::Ram,
    }
}

fn base() -> ModelConfig {
    ModelConfig {
        namespaces: vec![ns(1, 512)],
        io_latency_ns: 5_000,
        admin_latency_ns: 10_000,
        max_io_queue_pairs: 4,
        ..ModelConfig::default()
    }
}

fn say(line: &str) {
    let _ = std::io::stderr().write_all(format!("matrix: {line}\n").as_bytes());
}

fn pattern(seed: u64, buf: &mut [u8]) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for b in buf {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
}

/// Write / read / verify on up to 3 queue pairs of every namespace that takes I/O: one block,
/// two pages (PRP2), 64 KiB (a PRP list) and, when the queue can hold it, a request split into
/// several commands by MDTS. Returns a summary.
fn exercise(platform: &ModelPlatform, ctrl: &Controller<ModelPlatform>) -> String {
    let info = ctrl.identify();
    let depth = info.max_queue_depth.min(64);
    let pairs = usize::from(info.io_queue_pairs).min(3);
    let mut qps: Vec<_> = (0..pairs)
        .map(|i| {
            ctrl.alloc_qpair(QpairOptions {
                depth,
                ..QpairOptions::default()
            })
            .unwrap_or_else(|e| panic!("queue pair {i} of {pairs}: {e}"))
        })
        .collect();
    let capacity = depth as usize - 1;
    let max_transfer = qps[0].max_transfer();
    let mut ios = 0;
    let mut splits = 0;
    for ns in ctrl.namespaces() {
        if ns.io_refused() {
            let mut buf = ctrl.dma().alloc(4096).unwrap();
            buf.as_mut_slice().fill(1);
            let e = qps[0].write(&ns, 0, 1, buf, 0).unwrap_err();
            assert!(
                matches!(e.kind, SubmitErrorKind::MetadataUnsupported { .. }),
                "{:?}",
                e.kind
            );
            continue;
        }
        let lba = ns.lba_size() as usize;
        let split = (3 * max_transfer).min(capacity * max_transfer).min(1 << 20);
        let mut sizes = vec![lba, 8192.max(lba), 64 << 10];
        if split > max_transfer {
            sizes.push(split);
        }
        for (q, qp) in qps.iter_mut().enumerate() {
            let mut lba_at = (q as u64) * 4096;
            for &size in &sizes {
                let blocks = (size / lba) as u32;
                let mut buf = ctrl.dma().alloc(size).unwrap();
                let seed = u64::from(ns.nsid()) << 32 | (q as u64) << 24 | size as u64;
                pattern(seed, buf.as_mut_slice());
                let expected = buf.as_slice().to_vec();
                let buf = qp
                    .write_sync(&ns, lba_at, blocks, buf)
                    .unwrap_or_else(|e| panic!("ns {} qp {q} write {size} B: {e}", ns.nsid()));
                let mut back = buf;
                back.as_mut_slice().fill(0xa5);
                let back = qp
                    .read_sync(&ns, lba_at, blocks, back)
                    .unwrap_or_else(|e| panic!("ns {} qp {q} read {size} B: {e}", ns.nsid()));
                assert!(
                    back.as_slice() == expected.as_slice(),
                    "ns {} qp {q}: {size} B at LBA {lba_at} read back differently",
                    ns.nsid()
                );
                ios += 2;
                if size > max_transfer {
                    splits += 1;
                }
                lba_at += blocks as u64 + 7;
            }
        }
    }
    assert_eq!(platform.iommu().fault_count(), 0, "no DMA fault");
    format!(
        "ok: {pairs} qpair(s) of depth {depth}, max transfer {max_transfer} B, {ios} I/Os verified ({splits} split), quirks {}",
        info.quirks
    )
}

/// Brings the model up and runs [`exercise`]; panics with the combination's name on failure.
fn works(
    name: &str,
    cfg: ModelConfig,
    opts: ControllerOptions,
) -> (Arc<ModelPlatform>, Controller<ModelPlatform>) {
    let platform = ModelPlatform::new(cfg).unwrap_or_else(|e| panic!("{name}: model: {e}"));
    let ctrl = Controller::new(platform.clone(), opts)
        .unwrap_or_else(|e| panic!("{name}: bring-up failed: {e}"));
    let summary = exercise(&platform, &ctrl);
    say(&format!("{name}: {summary}"));
    (platform, ctrl)
}

fn refused(name: &str, cfg: ModelConfig, check: impl Fn(&Error) -> bool) {
    let platform = ModelPlatform::new(cfg).unwrap_or_else(|e| panic!("{name}: model: {e}"));
    match Controller::new(platform, ControllerOptions::default()) {
        Ok(_) => panic!("{name}: the driver must refuse this controller"),
        Err(e) => {
            assert!(check(&e), "{name}: unexpected error {e:?}");
            say(&format!("{name}: refused: {e}"));
        }
    }
}

#[test]
fn doorbell_strides() {
    for dstrd in 0..=4u8 {
        for shadow in [true, false] {
            let cfg = ModelConfig {
                doorbell_stride: dstrd,
                shadow_doorbells: shadow,
                ..base()
            };
            let opts = ControllerOptions {
                shadow_doorbells: shadow,
                ..ControllerOptions::default()
            };
            let (p, ctrl) = works(
                &format!("CAP.DSTRD {dstrd}, shadow doorbells {shadow}"),
                cfg,
                opts,
            );
            assert_eq!(ctrl.identify().cap.dstrd(), dstrd);
            assert_eq!(ctrl.identify().shadow_doorbells, shadow);
            assert_eq!(p.stats().invalid_doorbell_writes, 0);
        }
    }
}

#[test]
fn queue_sizes_and_page_sizes() {
    for (entries, cqr) in [
        (2u32, true),
        (16, false),
        (64, true),
        (256, false),
        (65536, true),
    ] {
        let cfg = ModelConfig {
            max_queue_entries: entries,
            contiguous_queues_required: cqr,
            ..base()
        };
        let (_p, ctrl) = works(
            &format!("CAP.MQES {} (CQR {cqr})", entries - 1),
            cfg,
            ControllerOptions::default(),
        );
        assert_eq!(ctrl.identify().max_queue_depth, entries);
    }
    for mpsmax in [0u8, 15] {
        let cfg = ModelConfig { mpsmax, ..base() };
        works(
            &format!("CAP.MPSMIN 0, MPSMAX {mpsmax}"),
            cfg,
            ControllerOptions::default(),
        );
    }
    // Larger minimum pages than the host's 4 KiB: refused, saying why.
    refused(
        "CAP.MPSMIN 1 (8 KiB pages)",
        ModelConfig {
            mpsmin: 1,
            ..base()
        },
        |e| matches!(e, Error::Unsupported { what } if what.contains("MPSMIN")),
    );
}

#[test]
fn timeouts_and_slow_ready_transitions() {
    let cfg = ModelConfig {
        timeout_units: 1,
        ready_delay_ns: 400_000_000,
        ..base()
    };
    works(
        "CAP.TO 500 ms, CSTS.RDY after 400 ms",
        cfg,
        ControllerOptions::default(),
    );
    // A controller that never sets CSTS.RDY: the driver gives up after CAP.TO, not earlier
    // and not much later, from the shortest to the longest CAP.TO.
    for (units, ms) in [(1u8, 500u64), (255, 127_500)] {
        refused(
            &format!("CAP.TO {ms} ms, CSTS.RDY never set"),
            ModelConfig {
                timeout_units: units,
                never_ready: true,
                ..base()
            },
            |e| matches!(e, Error::NotReady { waited_ms, .. } if *waited_ms >= ms && *waited_ms < ms + 100),
        );
    }
    let cfg = ModelConfig {
        timeout_units: 255,
        ready_delay_ns: 100_000_000_000,
        disable_delay_ns: 90_000_000_000,
        ..base()
    };
    let (p, ctrl) = works(
        "CAP.TO 127.5 s (max), CSTS.RDY 100 s after CC.EN=1, 90 s to clear after CC.EN=0",
        cfg,
        ControllerOptions::default(),
    );
    assert!(p.now_ns() >= 100_000_000_000);
    // Dropping the controller shuts it down and disables it (the slow CSTS.RDY clear); a second
    // bring-up on the same controller then goes through the slow enable again.
    let before = p.now_ns();
    drop(ctrl);
    let again = Controller::new(p.clone(), ControllerOptions::default())
        .expect("re-enable after the slow disable");
    assert!(
        p.now_ns() - before >= 190_000_000_000,
        "waited {} ns for CSTS.RDY to clear and set again",
        p.now_ns() - before
    );
    say(&format!(
        "slow CSTS.RDY, second bring-up: {}",
        exercise(&p, &again)
    ));
}

#[test]
fn nvme_versions_and_optional_commands() {
    for (ver, name) in [
        (0x0001_0000u32, "1.0"),
        (0x0001_0100, "1.1"),
        (0x0001_0200, "1.2"),
        (0x0001_0300, "1.3"),
        (0x0001_0400, "1.4"),
        (0x0002_0000, "2.0"),
    ] {
        let cfg = ModelConfig {
            version: ver,
            namespaces: vec![ns(1, 512), ns(4, 4096)],
            ..base()
        };
        let (p, ctrl) = works(&format!("NVMe {name}"), cfg, ControllerOptions::default());
        let info = ctrl.identify();
        assert_eq!(info.version.0, ver, "VS");
        assert_eq!(
            info.shadow_doorbells,
            ver >= 0x0001_0300,
            "Doorbell Buffer Config from 1.3"
        );
        let report = ctrl.rescan().unwrap();
        assert_eq!(report.used_fallback, ver < 0x0001_0100, "CNS 02h from 1.1");
        assert_eq!(report.added.len() + ctrl.namespaces().len(), 2);
        let _ = p;
    }
    // No Write Zeroes, no Dataset Management, a volatile write cache: refused with a reason
    // before anything reaches the controller; Flush works.
    let cfg = ModelConfig {
        oncs: 0,
        volatile_write_cache: true,
        ..base()
    };
    let (p, ctrl) = works(
        "ONCS 0 (no Write Zeroes, no DSM), VWC present",
        cfg,
        ControllerOptions::default(),
    );
    let ns = ctrl.namespace(1).unwrap();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let before = p.stats().io_completed.values().sum::<u64>();
    let e = qp.write_zeroes(&ns, 0, 8, 1).unwrap_err();
    assert!(matches!(
        e.kind,
        SubmitErrorKind::CommandUnsupported {
            command: OptionalCommand::WriteZeroes,
            quirk: false
        }
    ));
    let r = DsmRange {
        slba: 0,
        blocks: 8,
        ..DsmRange::default()
    };
    let e = qp.deallocate(&ns, &[r], 2).unwrap_err();
    assert!(e.kind.to_string().contains("ONCS bit 2"), "{}", e.kind);
    assert_eq!(p.stats().io_completed.values().sum::<u64>(), before);
    qp.flush_sync(&ns).expect("Flush is mandatory");
}

#[test]
fn transfer_limits_queue_grants_and_admin_depth() {
    for mdts in [0u8, 1, 7] {
        let cfg = ModelConfig { mdts, ..base() };
        let (_p, ctrl) = works(&format!("MDTS {mdts}"), cfg, ControllerOptions::default());
        let expect = if mdts == 0 { 2 << 20 } else { 4096 << mdts };
        assert_eq!(ctrl.identify().max_transfer_bytes, expect.min(2 << 20));
    }
    let cfg = ModelConfig {
        max_io_queue_pairs: 1,
        ..base()
    };
    let (_p, ctrl) = works(
        "1 I/O queue pair granted of 64 asked",
        cfg,
        ControllerOptions::default(),
    );
    assert_eq!(ctrl.identify().io_queue_pairs, 1);
    let _held = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    match ctrl.alloc_qpair(QpairOptions::default()) {
        Err(e @ Error::NoFreeQueue { granted: 1 }) => say(&format!("second queue pair: {e}")),
        other => panic!("{:?}", other.map(|_| ())),
    }
    let opts = ControllerOptions {
        admin_depth: 2,
        ..ControllerOptions::default()
    };
    works("admin queue of 2 entries", base(), opts);
}

#[test]
fn namespace_ids_and_formats() {
    let md = ModelMetadata {
        ms: 8,
        extended: true,
        pi: 0,
    };
    let cfg = ModelConfig {
        nn: 0xFFFF_FFFE,
        namespaces: vec![
            ns(1, 512),
            ns(77, 4096),
            ns(1000, 512),
            ns(0xFFFF_FFFE, 4096),
        ],
        namespace_metadata: vec![(1000, md)],
        ..base()
    };
    let (_p, ctrl) = works(
        "nsids 1, 77 (4096 B), 1000 (512+8 metadata: refused), 0xFFFFFFFE (4096 B), NN 0xFFFFFFFE",
        cfg,
        ControllerOptions::default(),
    );
    let nsids: Vec<u32> = ctrl.namespaces().iter().map(|n| n.nsid()).collect();
    assert_eq!(nsids, [1, 77, 1000, 0xFFFF_FFFE]);
    assert!(ctrl.namespace(1000).unwrap().io_refused());
}
