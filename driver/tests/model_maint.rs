//! Controller reset, the safe I/O passthrough, and the model's maintenance commands (Format
//! NVM, Sanitize, Firmware Image Download / Commit) through the safe admin API.

use vfnvme::controller::{Controller, ControllerOptions};
use vfnvme::spec::{AdminCommand, Command};
use vfnvme::{Error, QpairOptions};
use vfnvme_model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform};

fn up() -> Controller<ModelPlatform> {
    let platform = ModelPlatform::new(ModelConfig {
        namespaces: vec![ModelNamespaceConfig {
            nsid: 1,
            blocks: 1 << 12,
            lba_size: 512,
            backing: Backing::Ram,
        }],
        ..ModelConfig::default()
    })
    .unwrap();
    Controller::new(platform, ControllerOptions::default()).unwrap()
}

fn write_pattern(ctrl: &Controller<ModelPlatform>) {
    let ns = ctrl.namespace(1).unwrap();
    let mut q = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let mut buf = ctrl.dma().alloc(4096).unwrap();
    buf.as_mut_slice().fill(0xa5);
    q.write_sync(&ns, 0, 8, buf).unwrap();
}

fn first_byte(ctrl: &Controller<ModelPlatform>) -> u8 {
    let ns = ctrl.namespace(1).unwrap();
    let mut q = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let buf = ctrl.dma().alloc(ns.lba_size() as usize).unwrap();
    q.read_sync(&ns, 0, 1, buf).unwrap().as_slice()[0]
}

#[test]
fn reset_brings_the_controller_back_with_its_data() {
    let ctrl = up();
    // An open queue pair no longer blocks a reset (model_recovery.rs tests what it sees).
    let q = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    ctrl.reset().unwrap();
    drop(q);
    write_pattern(&ctrl);
    ctrl.reset().unwrap();
    ctrl.reset().unwrap();
    // Admin and I/O work again on the fresh queues; the data survived (a reset is no erase).
    assert_eq!(
        ctrl.identify_controller().unwrap().sn,
        ctrl.identify().identify.sn
    );
    assert_eq!(first_byte(&ctrl), 0xa5);
}

#[test]
fn io_passthru_moves_data_through_the_buffer_and_refuses_pointers() {
    let ctrl = up();
    let ns = ctrl.namespace(1).unwrap();
    let mut q = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let mut buf = ctrl.dma().alloc(1024).unwrap();
    buf.as_mut_slice().fill(0x3c);
    let (st, _) = q
        .passthru_sync(&ns, Command::write(0, 4, 2), Some(buf))
        .unwrap();
    assert!(st.is_success(), "{st}");
    let (st, back) = q
        .passthru_sync(
            &ns,
            Command::read(0, 4, 2),
            Some(ctrl.dma().alloc(1024).unwrap()),
        )
        .unwrap();
    assert!(st.is_success());
    assert!(back.unwrap().as_slice().iter().all(|&b| b == 0x3c));
    // Three blocks into a two-block buffer, a pointer, an opcode of unknown length: refused.
    let small = ctrl.dma().alloc(1024).unwrap();
    let e = q.passthru_sync(&ns, Command::read(0, 4, 3), Some(small));
    assert!(
        matches!(e, Err(Error::IoPassthru { opcode: 2, .. })),
        "{e:?}"
    );
    let mut c = Command::read(0, 4, 1);
    c.prp1 = 0x1000;
    assert!(matches!(
        q.passthru_sync(&ns, c, None),
        Err(Error::IoPassthru { .. })
    ));
    let e = q.passthru_sync(&ns, Command::new(0x81), None);
    assert!(
        matches!(e, Err(Error::IoPassthru { opcode: 0x81, .. })),
        "{e:?}"
    );
}

#[test]
fn format_changes_the_lba_format_and_erases() {
    let ctrl = up();
    write_pattern(&ctrl);
    assert!(matches!(
        ctrl.format_nvm(1, 2, 0),
        Err(Error::AdminCommand(_))
    ));
    assert!(matches!(
        ctrl.format_nvm(7, 0, 0),
        Err(Error::NoSuchNamespace { nsid: 7 })
    ));
    ctrl.format_nvm(1, 1, 1).unwrap();
    let id = ctrl.identify_namespace(1).unwrap();
    assert_eq!((id.flbas & 0xf, id.nsze), (1, (1 << 12) / 8));
    ctrl.rescan().unwrap();
    assert_eq!(ctrl.namespace(1).unwrap().lba_size(), 4096);
    assert_eq!(first_byte(&ctrl), 0);
}

#[test]
fn sanitize_erases_and_reports_in_its_log() {
    let ctrl = up();
    write_pattern(&ctrl);
    let log = ctrl.get_log_page(0x81, u32::MAX, 512, false).unwrap();
    assert_eq!(log.as_slice()[2] & 7, 0, "never sanitized");
    ctrl.admin(AdminCommand::sanitize(2, false, 0)).unwrap();
    assert_eq!(first_byte(&ctrl), 0);
    let log = ctrl.get_log_page(0x81, u32::MAX, 512, false).unwrap();
    assert_eq!(log.as_slice()[2] & 7, 1, "completed successfully");
    let bad = ctrl.admin(AdminCommand::sanitize(5, false, 0));
    assert!(matches!(bad, Err(Error::AdminFailed { .. })));
}

#[test]
fn firmware_download_commit_and_activate() {
    let ctrl = up();
    let oacs = ctrl.identify_controller().unwrap().oacs;
    assert_eq!(
        oacs & 0b110,
        0b110,
        "format and firmware commands advertised"
    );
    let mut image = b"NEWFW123".to_vec();
    image.resize(8192, 0xee);
    for (i, part) in image.chunks(4096).enumerate() {
        let cmd = AdminCommand::firmware_image_download(i as u32 * 4096, 4096);
        ctrl.admin_write(cmd, part).unwrap();
    }
    // Slot 1 is read-only.
    let ro = ctrl.admin(AdminCommand::firmware_commit(1, 1));
    assert!(
        matches!(ro, Err(Error::AdminFailed { status, .. }) if status.sct() == 1 && status.sc() == 6)
    );
    ctrl.admin(AdminCommand::firmware_commit(2, 1)).unwrap();
    let log = ctrl.get_log_page(0x03, u32::MAX, 512, false).unwrap();
    assert_eq!(&log.as_slice()[16..24], b"NEWFW123");
    assert_eq!(log.as_slice()[0], 1 | 2 << 4, "slot 1 runs, slot 2 next");
    assert_ne!(ctrl.identify_controller().unwrap().fr, "NEWFW123");
    ctrl.reset().unwrap();
    assert_eq!(ctrl.identify_controller().unwrap().fr, "NEWFW123");
    // Nothing downloaded since: replacing fails; slot 1 runs again after the next reset.
    let none = ctrl.admin(AdminCommand::firmware_commit(2, 0));
    assert!(matches!(none, Err(Error::AdminFailed { status, .. }) if status.sc() == 7));
    ctrl.admin(AdminCommand::firmware_commit(1, 2)).unwrap();
    ctrl.reset().unwrap();
    assert_eq!(
        ctrl.identify_controller().unwrap().fr,
        ctrl.identify().identify.fr
    );
}

/// Format NVM to the formats with metadata a namespace offers (2: 512 B, 3: 4 KiB, with MSET and
/// PI), and back: the driver reports them and refuses I/O until a format without metadata.
#[test]
fn format_to_and_from_metadata_formats() {
    use vfnvme_model::ModelMetadata;
    let platform = ModelPlatform::new(ModelConfig {
        namespaces: vec![ModelNamespaceConfig {
            nsid: 1,
            blocks: 1 << 12,
            lba_size: 512,
            backing: Backing::Ram,
        }],
        namespace_metadata: vec![(
            1,
            ModelMetadata {
                ms: 8,
                extended: true,
                pi: 0,
            },
        )],
        ..ModelConfig::default()
    })
    .unwrap();
    let ctrl = Controller::new(platform, ControllerOptions::default()).unwrap();
    assert!(ctrl.namespace(1).unwrap().io_refused());
    let fmt = |lbaf: u8, mset: bool, pi: u32| {
        let mut c = AdminCommand::format_nvm(1, lbaf, 0);
        c.cdw10 |= u32::from(mset) << 4 | pi << 5;
        ctrl.admin(c)
    };
    // 4 KiB + 8 B separate, PI type 1: reported as such, I/O refused.
    fmt(3, false, 1).unwrap();
    ctrl.rescan().unwrap();
    let ns = ctrl.namespace(1).unwrap();
    let md = ns.identity().metadata_format();
    assert_eq!(
        (ns.lba_size(), md.size, md.extended, md.protection_type),
        (4096, 8, false, 1)
    );
    assert_eq!(ns.blocks(), (1 << 12) / 8, "the size in data bytes is kept");
    assert!(ns.io_refused());
    // PI 4 and PI on a format without metadata don't exist.
    assert!(matches!(fmt(2, true, 4), Err(Error::AdminFailed { .. })));
    assert!(matches!(fmt(0, false, 1), Err(Error::AdminFailed { .. })));
    // Back to 512 B without metadata: usable.
    fmt(0, false, 0).unwrap();
    ctrl.rescan().unwrap();
    let ns = ctrl.namespace(1).unwrap();
    assert!(!ns.io_refused() && ns.lba_size() == 512);
    assert_eq!(first_byte(&ctrl), 0);
}
