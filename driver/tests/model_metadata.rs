//! Namespaces formatted with metadata (extended LBAs, a separate metadata buffer, protection
//! information) on the model: reported as such, and every I/O to them refused before a command
//! reaches the controller. Without the refusal the model (like QEMU) moves `ms` bytes per block
//! more than the driver sized the transfer for, and fetches separate metadata from MPTR = 0:
//! DMA faults at address 0, and wrong data.

use std::sync::Arc;
use vfnvme::controller::{Controller, ControllerOptions};
use vfnvme::namespace::MetadataFormat;
use vfnvme::queue::Op;
use vfnvme::spec::command::DsmRange;
use vfnvme::{Error, QpairOptions, SubmitErrorKind};
use vfnvme_model::{Backing, ModelConfig, ModelMetadata, ModelNamespaceConfig, ModelPlatform};

const EXTENDED: ModelMetadata = ModelMetadata {
    ms: 8,
    extended: true,
    pi: 0,
};
const SEPARATE: ModelMetadata = ModelMetadata {
    ms: 16,
    extended: false,
    pi: 0,
};
const PI: ModelMetadata = ModelMetadata {
    ms: 8,
    extended: true,
    pi: 1,
};

fn ns(nsid: u32, lba_size: u32) -> ModelNamespaceConfig {
    ModelNamespaceConfig {
        nsid,
        blocks: 1 << 16,
        lba_size,
        backing: Backing::Ram,
    }
}

/// nsid 1: plain 512; 2: 512+8 extended; 3: 4096+16 separate; 4: 512+8 extended, PI type 1.
fn up() -> (Arc<ModelPlatform>, Controller<ModelPlatform>) {
    let cfg = ModelConfig {
        namespaces: vec![ns(1, 512), ns(2, 512), ns(3, 4096), ns(4, 512)],
        namespace_metadata: vec![(2, EXTENDED), (3, SEPARATE), (4, PI)],
        io_latency_ns: 0,
        admin_latency_ns: 0,
        ..ModelConfig::default()
    };
    let platform = ModelPlatform::new(cfg).expect("model config");
    let ctrl = Controller::new(platform.clone(), ControllerOptions::default()).expect("bring-up");
    (platform, ctrl)
}

fn io_commands(p: &ModelPlatform) -> u64 {
    p.stats().io_completed.values().sum()
}

fn assert_refused(kind: &SubmitErrorKind, nsid: u32, metadata: MetadataFormat) {
    match kind {
        SubmitErrorKind::MetadataUnsupported {
            nsid: n,
            metadata: m,
        } => {
            assert_eq!((*n, *m), (nsid, metadata));
            let msg = kind.to_string();
            assert!(
                msg.contains("reformat")
                    && msg.contains("vfnvme format")
                    && msg.contains("metadata"),
                "the message says why and what to do: {msg}"
            );
        }
        other => panic!("namespace {nsid}: expected MetadataUnsupported, got {other:?}"),
    }
}

#[test]
fn metadata_formats_are_reported() {
    let (_p, ctrl) = up();
    let id = |nsid| *ctrl.namespace(nsid).expect("active").identity();
    let plain = id(1);
    assert_eq!(plain.metadata_format(), MetadataFormat::default());
    assert!(plain.io_supported());
    let ext = id(2);
    assert_eq!(
        (
            ext.lba_shift,
            ext.metadata_size,
            ext.metadata_extended,
            ext.protection_type
        ),
        (9, 8, true, 0)
    );
    let sep = id(3);
    assert_eq!(
        (
            sep.lba_shift,
            sep.metadata_size,
            sep.metadata_extended,
            sep.protection_type
        ),
        (12, 16, false, 0)
    );
    let pi = id(4);
    assert_eq!((pi.metadata_size, pi.protection_type), (8, 1));
    for n in [2, 3, 4] {
        assert!(ctrl.namespace(n).unwrap().io_refused(), "namespace {n}");
    }
    assert!(!ctrl.namespace(1).unwrap().io_refused());
    assert_eq!(
        sep.metadata_format().to_string(),
        "16 B metadata per block (separate buffer)"
    );
    assert_eq!(
        pi.metadata_format().to_string(),
        "8 B metadata per block (extended LBA), protection information type 1"
    );
}

#[test]
fn io_to_metadata_namespaces_is_refused_before_the_device_sees_it() {
    let (p, ctrl) = up();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let faults_before = p.iommu().fault_count();
    for nsid in [2u32, 3, 4] {
        let ns = ctrl.namespace(nsid).unwrap();
        let md = ns.identity().metadata_format();
        let before = io_commands(&p);
        // 64 KiB: several pages (a PRP list), the case where the device ran past the PRPs.
        let buf = ctrl.dma().alloc(64 << 10).unwrap();
        let blocks = (64 << 10) >> ns.lba_shift();
        let e = qp.write(&ns, 0, blocks, buf, 1).unwrap_err();
        assert_refused(&e.kind, nsid, md);
        let buf = e.buffer.expect("the buffer comes back");
        let e = qp.read(&ns, 0, blocks, buf, 2).unwrap_err();
        assert_refused(&e.kind, nsid, md);
        let buf = e.buffer.expect("the buffer comes back");
        // The raw path of the C ABI.
        // SAFETY: `buf` is DMA memory of this controller, kept alive past the call; the call is
        // refused, so the device never sees it.
        let e = unsafe {
            vfnvme::queue::Request::borrowed(Op::Read, &ns, 0, blocks, buf.span(), 3)
                .and_then(|r| qp.submit(r))
        }
        .unwrap_err();
        assert_refused(&e.kind, nsid, md);
        assert_refused(&qp.flush(&ns, 4).unwrap_err().kind, nsid, md);
        assert_refused(&qp.write_zeroes(&ns, 0, 8, 5).unwrap_err().kind, nsid, md);
        let range = DsmRange {
            slba: 0,
            blocks: 8,
            ..DsmRange::default()
        };
        assert_refused(&qp.deallocate(&ns, &[range], 6).unwrap_err().kind, nsid, md);
        match qp.read_sync(&ns, 0, 1, buf) {
            Err(Error::Submit(k)) => assert_refused(&k, nsid, md),
            other => panic!("read_sync on namespace {nsid}: {other:?}"),
        }
        qp.commit();
        assert_eq!(qp.poll(usize::MAX, |_| {}), 0);
        assert_eq!(qp.outstanding(), 0);
        assert_eq!(io_commands(&p), before, "no command reached the model");
    }
    assert_eq!(p.iommu().fault_count(), faults_before, "no DMA fault");
    // The plain namespace on the same controller works.
    let ns = ctrl.namespace(1).unwrap();
    let mut buf = ctrl.dma().alloc(64 << 10).unwrap();
    buf.as_mut_slice().fill(0x5a);
    let buf = qp.write_sync(&ns, 0, 128, buf).unwrap();
    let back = qp.read_sync(&ns, 0, 128, buf).unwrap();
    assert!(back.as_slice().iter().all(|&b| b == 0x5a));
    assert_eq!(p.iommu().fault_count(), 0);
}

#[test]
fn a_rescan_that_finds_a_metadata_format_refuses_io_and_a_reformat_allows_it_again() {
    let (p, ctrl) = up();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let buf = ctrl.dma().alloc(8 << 10).unwrap();
    let ns = ctrl.namespace(1).unwrap();
    let buf = qp.write_sync(&ns, 0, 16, buf).unwrap();

    // Namespace 1 is reformatted behind the driver's back (another host, nvme-cli, ...).
    p.format_namespace(1, 4096, Some(SEPARATE)).unwrap();
    let report = ctrl.process_admin_completions().unwrap();
    let scan = report
        .scan
        .expect("the namespace change event triggers a rescan");
    assert!(
        scan.added.contains(&1) && scan.removed.contains(&1),
        "{scan:?}"
    );
    let before = io_commands(&p);
    // The old handle is gone (removed), the new one is refused.
    let old = qp.read(&ns, 0, 1, buf, 1).unwrap_err();
    assert!(
        matches!(
            old.kind,
            SubmitErrorKind::NamespaceNotActive { nsid: 1, .. }
        ),
        "{:?}",
        old.kind
    );
    let new = ctrl.namespace(1).unwrap();
    assert_eq!(new.lba_size(), 4096);
    let e = qp.read(&new, 0, 1, old.buffer.unwrap(), 2).unwrap_err();
    assert_refused(&e.kind, 1, new.identity().metadata_format());
    assert_eq!(io_commands(&p), before);

    // Reformatted without metadata: usable again.
    p.format_namespace(1, 512, None).unwrap();
    ctrl.process_admin_completions().unwrap();
    let again = ctrl.namespace(1).unwrap();
    assert!(!again.io_refused());
    let buf = qp.read_sync(&again, 0, 16, e.buffer.unwrap()).unwrap();
    assert!(
        buf.as_slice()[..8192].iter().all(|&b| b == 0),
        "a format erases the data"
    );
    assert_eq!(p.iommu().fault_count(), 0);
}

/// What the refusal prevents, shown on the model: a driver that believes namespaces 2 and 3 have
/// no metadata (the view vfnvme had before it read FLBAS/LBAF.MS) makes the controller DMA past
/// the PRPs of an extended-LBA write and fetch separate metadata from MPTR = 0.
#[test]
fn without_the_refusal_the_controller_faults_at_address_0() {
    use vfnvme::namespace::{Namespace, NamespaceIdentity};
    let (p, ctrl) = up();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    for nsid in [2u32, 3] {
        let real = ctrl.namespace(nsid).unwrap();
        let blind = Namespace::new(
            nsid,
            NamespaceIdentity {
                lba_shift: real.lba_shift(),
                ..NamespaceIdentity::default()
            },
            real.blocks(),
        );
        let faults = p.iommu().fault_count();
        let buf = ctrl.dma().alloc(64 << 10).unwrap();
        let blocks = (64 << 10) >> real.lba_shift();
        let r = qp.write_sync(&blind, 0, blocks, buf);
        assert!(
            p.iommu().fault_count() > faults,
            "namespace {nsid}: the model saw no DMA fault ({r:?})"
        );
        if nsid == 3 {
            assert_eq!(
                p.iommu().last_fault_iova(),
                0,
                "metadata fetched from MPTR = 0"
            );
        }
        assert!(r.is_err(), "namespace {nsid}: the transfer fails");
    }
}
