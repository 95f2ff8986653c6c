//! The quirks table on the model: the model takes the PCI ID of a device listed in
//! `vfnvme::quirks::QUIRK_TABLE`, and the driver must change exactly the behaviour the entry
//! names (and nothing for an unlisted ID).

use std::sync::Arc;
use vfnvme::controller::{Controller, ControllerOptions};
use vfnvme::error::OptionalCommand;
use vfnvme::quirks::{Quirks, CHK_RDY_DELAY_NS};
use vfnvme::{Error, QpairOptions, SubmitErrorKind};
use vfnvme_model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform};

fn config(vendor: u16, device: u16) -> ModelConfig {
    let ns = |nsid| ModelNamespaceConfig {
        nsid,
        blocks: 4096,
        lba_size: 512,
        backing: Backing::Ram,
    };
    ModelConfig {
        namespaces: vec![ns(1), ns(3)],
        pci_vendor_id: vendor,
        pci_device_id: device,
        io_latency_ns: 0,
        admin_latency_ns: 0,
        ..ModelConfig::default()
    }
}

fn up(cfg: ModelConfig) -> Result<(Arc<ModelPlatform>, Controller<ModelPlatform>), Error> {
    let platform = ModelPlatform::new(cfg).expect("model config");
    let ctrl = Controller::new(platform.clone(), ControllerOptions::default())?;
    Ok((platform, ctrl))
}

#[test]
fn unlisted_id_has_no_quirks_and_uses_every_identify_cns() {
    let (p, ctrl) = up(config(0x1b36, 0x0010)).unwrap();
    assert_eq!(ctrl.identify().quirks, Quirks::NONE);
    let s = p.stats();
    assert!(
        s.identify(2) > 0 && s.identify(3) > 0,
        "{:?}",
        s.identify_cns
    );
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let ns = ctrl.namespace(1).unwrap();
    qp.write_zeroes(&ns, 0, 8, 1)
        .expect("Write Zeroes is supported");
}

/// HGST adapter 1c58:0003 (Linux): CSTS.RDY must not be read right after CC.EN changes. The
/// model sets CSTS.CFS when read within 2 s of the change.
#[test]
fn delay_before_checking_ready() {
    let slow = |vendor, device| ModelConfig {
        early_csts_read_fatal_ns: 2_000_000_000,
        ..config(vendor, device)
    };
    match up(slow(0x1b36, 0x0010)) {
        Err(Error::ControllerFatal { .. }) => {}
        other => panic!(
            "without the quirk the early CSTS read must break the controller: {:?}",
            other.map(|_| ())
        ),
    }
    let (p, ctrl) = up(slow(0x1c58, 0x0003)).expect("the quirk delays the first CSTS read");
    assert_eq!(ctrl.identify().quirks, Quirks::DELAY_BEFORE_CHK_RDY);
    assert!(p.now_ns() >= CHK_RDY_DELAY_NS, "{} ns", p.now_ns());
    let ns = ctrl.namespace(3).unwrap();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let buf = ctrl.dma().alloc(4096).unwrap();
    qp.write_sync(&ns, 0, 8, buf).unwrap();
}

/// QEMU's older controller 8086:5845 (Linux): Identify only with CNS 00h/01h, no Write Zeroes.
#[test]
fn identify_cns_and_write_zeroes_quirks() {
    let (p, ctrl) = up(config(0x8086, 0x5845)).unwrap();
    let q = ctrl.identify().quirks;
    assert!(q.contains(Quirks::IDENTIFY_CNS) && q.contains(Quirks::DISABLE_WRITE_ZEROES));
    let report = ctrl.rescan().unwrap();
    assert!(report.used_fallback, "nsids probed one by one: {report:?}");
    let s = p.stats();
    assert_eq!(
        (s.identify(2), s.identify(3)),
        (0, 0),
        "{:?}",
        s.identify_cns
    );
    let nsids: Vec<u32> = ctrl.namespaces().iter().map(|n| n.nsid()).collect();
    assert_eq!(nsids, [1, 3], "the gap at nsid 2 is found by probing");
    let ns = ctrl.namespace(1).unwrap();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let e = qp.write_zeroes(&ns, 0, 8, 1).unwrap_err();
    match &e.kind {
        SubmitErrorKind::CommandUnsupported { command, quirk } => {
            assert_eq!((*command, *quirk), (OptionalCommand::WriteZeroes, true));
            let msg = e.kind.to_string();
            assert!(msg.contains("disable-write-zeroes"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        p.stats().io_completed.is_empty(),
        "nothing reached the model"
    );
}

/// Silicon Motion SM2263 126f:2263 (Linux): no Namespace Identification Descriptor list.
#[test]
fn no_namespace_descriptor_list_quirk() {
    let (p, ctrl) = up(config(0x126f, 0x2263)).unwrap();
    assert_eq!(ctrl.identify().quirks, Quirks::NO_NS_DESC_LIST);
    let s = p.stats();
    assert!(s.identify(2) > 0, "the active list is still read");
    assert_eq!(s.identify(3), 0, "{:?}", s.identify_cns);
    let ns = ctrl.namespace(1).unwrap();
    assert_ne!(
        ns.identity().eui64,
        [0; 8],
        "EUI-64 still comes from CNS 00h"
    );
}
