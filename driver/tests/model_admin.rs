//! Admin path against the model: discovery of many namespaces, pipelined admin batches,
//! admin errors, and the safe admin API (data pointers built by the driver).

use vfnvme::controller::{Controller, ControllerOptions};
use vfnvme::spec::admin_command::{opcode, AdminCommandError, UNKNOWN_TRANSFER_MAX};
use vfnvme::spec::command::admin_opcode;
use vfnvme::spec::identify::IdentifyNamespace;
use vfnvme::spec::{AdminCommand, Command};
use vfnvme::Error;
use vfnvme_model::{
    Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform, VENDOR_FILL_OPCODE,
    VENDOR_HOLD_OPCODE, VENDOR_PATTERN_LOG, VENDOR_PATTERN_LOG_BYTES,
};

fn many_namespaces(n: u32) -> ModelConfig {
    ModelConfig {
        namespaces: (1..=n)
            .map(|nsid| ModelNamespaceConfig {
                nsid,
                blocks: 1000 + nsid as u64,
                lba_size: if nsid % 2 == 0 { 4096 } else { 512 },
                backing: Backing::Null,
            })
            .collect(),
        io_latency_ns: 0,
        admin_latency_ns: 1_000,
        ..ModelConfig::default()
    }
}

#[test]
fn discovery_finds_every_namespace_with_its_format() {
    let platform = ModelPlatform::new(many_namespaces(40)).unwrap();
    let ctrl = Controller::new(platform, ControllerOptions::default()).unwrap();
    let all = ctrl.namespaces();
    assert_eq!(all.len(), 40);
    for ns in all {
        assert_eq!(ns.blocks(), 1000 + ns.nsid() as u64);
        let want = if ns.nsid() % 2 == 0 { 4096 } else { 512 };
        assert_eq!(ns.lba_size(), want, "nsid {}", ns.nsid());
    }
}

#[test]
fn admin_batch_pipelines_past_the_queue_depth() {
    let platform = ModelPlatform::new(many_namespaces(20)).unwrap();
    let ctrl = Controller::new(
        platform.clone(),
        ControllerOptions {
            admin_depth: 4,
            ..Default::default()
        },
    )
    .unwrap();
    let bufs: Vec<_> = (0..20).map(|_| ctrl.dma().alloc(4096).unwrap()).collect();
    let cmds: Vec<Command> = bufs
        .iter()
        .enumerate()
        .map(|(i, b)| Command::identify_namespace(i as u32 + 1, b.iova()))
        .collect();
    let t0 = platform.now_ns();
    let mut seen = [false; 20];
    // SAFETY: each command moves 4 KiB into its own buffer of `bufs`, which outlives the
    // batch; the model completes every command (a timeout fails the test before `bufs` drops,
    // and the model stops with the controller).
    unsafe {
        ctrl.admin_batch(&cmds, |i, r| {
            assert!(r.is_ok(), "{i}: {:?}", r.err());
            seen[i] = true;
        })
    };
    assert!(seen.iter().all(|&s| s));
    // Three in flight at a time (depth 4): well under 20 serial latencies.
    let elapsed = platform.now_ns() - t0;
    assert!(elapsed < 20 * 1_000, "pipelined: {elapsed} ns");
    for (i, b) in bufs.iter().enumerate() {
        let id = IdentifyNamespace::parse(b.as_slice()).unwrap();
        assert_eq!(id.nsze, 1000 + i as u64 + 1);
    }
}

#[test]
fn admin_errors_are_typed() {
    let platform = ModelPlatform::new(many_namespaces(1)).unwrap();
    let ctrl = Controller::new(platform, ControllerOptions::default()).unwrap();
    let e = ctrl.admin(AdminCommand::new(0xbf)).unwrap_err();
    match &e {
        Error::AdminFailed {
            opcode: 0xbf,
            status,
        } => {
            assert_eq!((status.sct(), status.sc()), (0, 0x01));
        }
        other => panic!("expected AdminFailed, got {other}"),
    }
    assert!(e.to_string().contains("Invalid Command Opcode"), "{e}");
}

fn up(platform: &std::sync::Arc<ModelPlatform>) -> Controller<ModelPlatform> {
    Controller::new(platform.clone(), ControllerOptions::default()).unwrap()
}

/// Dword `k` of the model's pattern log.
fn pattern(offset: usize, len: usize) -> Vec<u8> {
    (offset / 4..(offset + len) / 4)
        .flat_map(|k| (k as u32 ^ 0xC0C0_0000).to_le_bytes())
        .collect()
}

#[test]
fn a_16k_log_page_read_goes_through_a_prp_list() {
    let platform = ModelPlatform::new(many_namespaces(1)).unwrap();
    let ctrl = up(&platform);
    let log = ctrl
        .get_log_page(VENDOR_PATTERN_LOG, u32::MAX, 16 << 10, false)
        .unwrap();
    assert_eq!(log.len(), 16 << 10);
    assert_eq!(log.as_slice(), pattern(0, 16 << 10).as_slice());

    // A larger buffer than the command's length: the device moves exactly NUMD dwords, from
    // the log page offset, and the tail of the buffer is left alone.
    let mut buf = ctrl.dma().alloc(20 << 10).unwrap();
    buf.as_mut_slice().fill(0xee);
    let offset = 3 * 4096 + 8;
    let cmd = AdminCommand::get_log_page(VENDOR_PATTERN_LOG, u32::MAX, 16 << 10, offset, false);
    let (_, buf) = ctrl.admin_with_data(cmd, buf).unwrap();
    assert_eq!(
        &buf.as_slice()[..16 << 10],
        pattern(offset as usize, 16 << 10).as_slice()
    );
    assert!(buf.as_slice()[16 << 10..].iter().all(|&b| b == 0xee));
}

#[test]
fn a_log_page_longer_than_the_transfer_limit_is_read_in_pieces() {
    let platform = ModelPlatform::new(many_namespaces(1)).unwrap();
    let ctrl = up(&platform);
    let limit = ctrl.identify().max_transfer_bytes;
    assert!(limit < VENDOR_PATTERN_LOG_BYTES, "limit {limit}");
    let before = platform.stats().admin(admin_opcode::GET_LOG_PAGE);
    let log = ctrl
        .get_log_page(
            VENDOR_PATTERN_LOG,
            u32::MAX,
            VENDOR_PATTERN_LOG_BYTES,
            false,
        )
        .unwrap();
    assert_eq!(
        log.as_slice(),
        pattern(0, VENDOR_PATTERN_LOG_BYTES).as_slice()
    );
    let sent = platform.stats().admin(admin_opcode::GET_LOG_PAGE) - before;
    assert_eq!(sent, VENDOR_PATTERN_LOG_BYTES.div_ceil(limit) as u64);
}

#[test]
fn commands_the_safe_api_must_not_send_are_refused_before_the_device_sees_them() {
    let platform = ModelPlatform::new(many_namespaces(1)).unwrap();
    let ctrl = up(&platform);
    // A raw command with a data pointer does not become an AdminCommand.
    let raw = Command::identify_controller(0x1234_5000);
    assert!(matches!(
        AdminCommand::try_from(raw),
        Err(AdminCommandError::PointerSet {
            prp1: 0x1234_5000,
            ..
        })
    ));
    let sent = |p: &ModelPlatform| {
        [
            admin_opcode::CREATE_IO_SQ,
            admin_opcode::DOORBELL_BUFFER_CONFIG,
            admin_opcode::GET_LOG_PAGE,
            admin_opcode::SET_FEATURES,
        ]
        .map(|op| p.stats().admin(op))
    };
    let before = sent(&platform);
    for (cmd, what) in [
        (AdminCommand::new(opcode::CREATE_IO_SQ), "queue"),
        (
            AdminCommand::new(opcode::DOORBELL_BUFFER_CONFIG),
            "doorbell",
        ),
        (AdminCommand::set_features(0x0d, 1), "host memory"),
    ] {
        let e = ctrl.admin(cmd).unwrap_err();
        assert!(
            matches!(e, Error::AdminCommand(AdminCommandError::DriverOwned { opcode, .. }) if opcode == cmd.opcode),
            "{what}: {e}"
        );
    }
    // A command longer than its buffer, and one that needs a buffer but has none.
    let small = ctrl.dma().alloc(4096).unwrap();
    let e = ctrl
        .admin_with_data(
            AdminCommand::get_log_page(2, u32::MAX, 8192, 0, false),
            small,
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::AdminCommand(AdminCommandError::BufferTooSmall {
                needed: 8192,
                len: 4096,
                ..
            })
        ),
        "{e}"
    );
    let e = ctrl
        .admin(AdminCommand::get_log_page(2, u32::MAX, 512, 0, false))
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::AdminCommand(AdminCommandError::NeedsBuffer { needed: 512, .. })
        ),
        "{e}"
    );
    // A longer-than-a-page buffer for a command whose length the driver can't read.
    let big = ctrl.dma().alloc(8192).unwrap();
    let vendor = AdminCommand {
        opcode: VENDOR_FILL_OPCODE,
        cdw10: 8192,
        ..Default::default()
    };
    let e = ctrl.admin_with_data(vendor, big).unwrap_err();
    assert!(
        matches!(e, Error::AdminCommand(AdminCommandError::UnknownLength { len: 8192, max, .. }) if max == UNKNOWN_TRANSFER_MAX),
        "{e}"
    );
    assert_eq!(
        sent(&platform),
        before,
        "a refused command reached the device"
    );
}

#[test]
fn a_vendor_command_moving_more_than_its_buffer_writes_only_scratch_pages() {
    let platform = ModelPlatform::new(many_namespaces(1)).unwrap();
    let ctrl = up(&platform);
    let mut before = ctrl.dma().alloc(4096).unwrap();
    let buf = ctrl.dma().alloc(4096).unwrap();
    let mut after = ctrl.dma().alloc(4096).unwrap();
    before.as_mut_slice().fill(0x11);
    after.as_mut_slice().fill(0x11);
    // 12 KiB (PRP2 read as a page), 1 MiB (a list), and 4 KiB + 600 pages (past one list
    // page, so the device follows the guard list's chain entry).
    let mut buf = buf;
    for (i, len) in [12 << 10, 1 << 20, 4096 * 601].into_iter().enumerate() {
        let fill = 0x5a + i as u8;
        let cmd = AdminCommand {
            opcode: VENDOR_FILL_OPCODE,
            cdw10: len,
            cdw11: u32::from(fill),
            ..Default::default()
        };
        let (_, b) = ctrl.admin_with_data(cmd, buf).unwrap();
        assert!(b.as_slice().iter().all(|&x| x == fill), "len {len}");
        buf = b;
        // Without a buffer, everything goes to scratch pages.
        ctrl.admin(cmd).unwrap();
    }
    assert!(before.as_slice().iter().all(|&x| x == 0x11));
    assert!(after.as_slice().iter().all(|&x| x == 0x11));
}

#[test]
fn typed_admin_helpers_read_and_change_the_controller() {
    let platform = ModelPlatform::new(many_namespaces(3)).unwrap();
    let ctrl = up(&platform);
    let id = ctrl.identify_controller().unwrap();
    assert_eq!(id, ctrl.identify().identify);
    assert_eq!(ctrl.identify_namespace(2).unwrap().nsze, 1002);
    assert_eq!(ctrl.identify_active_ns_list(0).unwrap(), vec![1, 2, 3]);
    assert_eq!(ctrl.identify_active_ns_list(1).unwrap(), vec![2, 3]);

    // Temperature Threshold (04h) through Set/Get Features.
    ctrl.set_features(0x04, 350, None).unwrap();
    assert_eq!(ctrl.get_features(0x04, 0).unwrap(), 350);

    // Detach namespace 3 from this controller and attach it again.
    let me = id.cntlid;
    ctrl.namespace_attachment(3, false, &[me]).unwrap();
    ctrl.process_admin_completions().unwrap();
    assert!(ctrl.namespace(3).is_none());
    ctrl.namespace_attachment(3, true, &[me]).unwrap();
    ctrl.process_admin_completions().unwrap();
    assert!(ctrl.namespace(3).is_some());
    let e = ctrl.namespace_attachment(3, true, &[]).unwrap_err();
    assert!(
        matches!(e, Error::AdminCommand(AdminCommandError::BadField { .. })),
        "{e}"
    );

    // Format NVM checks its input before sending.
    let lbafs = ctrl.identify_namespace(1).unwrap().nlbaf;
    let e = ctrl.format_nvm(1, lbafs + 1, 0).unwrap_err();
    assert!(
        matches!(e, Error::AdminCommand(AdminCommandError::BadField { .. })),
        "{e}"
    );
    let e = ctrl.format_nvm(9, 0, 0).unwrap_err();
    assert!(matches!(e, Error::NoSuchNamespace { nsid: 9 }), "{e}");
}

#[test]
fn a_timed_out_admin_command_keeps_its_memory_until_the_controller_is_disabled() {
    let platform = ModelPlatform::new(many_namespaces(1)).unwrap();
    let ctrl = Controller::new(
        platform.clone(),
        ControllerOptions {
            admin_timeout_ms: 50,
            ..Default::default()
        },
    )
    .unwrap();
    let pool = ctrl.dma().clone();
    let before = pool.live_allocations();
    let buf = ctrl.dma().alloc(4096).unwrap();
    let held_at = buf.iova();
    let hold = AdminCommand::new(VENDOR_HOLD_OPCODE);
    let e = ctrl.admin_with_data(hold, buf).unwrap_err();
    assert!(
        matches!(e, Error::AdminTimeout { opcode, .. } if opcode == VENDOR_HOLD_OPCODE),
        "{e}"
    );
    // A command of unknown length never gets the caller's memory: it ran on the controller's
    // own unknown-length pages (one 12 KiB chunk), which stay while the device may use them;
    // the caller's buffer went back to the pool with the error.
    assert_eq!(pool.live_allocations(), before + 1);
    assert!(!pool.is_live_iova_range(held_at, 1));
    let area: Vec<_> = (0..64).map(|_| ctrl.dma().alloc(4096).unwrap()).collect();
    // A second command of unknown length, with data, while the first is still held: it runs
    // on the same pages, and what the device wrote into them never reaches the caller's
    // buffer unless the command succeeds.
    let mut buf = ctrl.dma().alloc(4096).unwrap();
    buf.as_mut_slice().fill(0xa5);
    let e = ctrl.admin_with_data(hold, buf).unwrap_err();
    assert!(matches!(e, Error::AdminTimeout { .. }), "{e}");
    assert_eq!(pool.live_allocations(), before + 1 + 64);
    drop(area);
    // The controller goes on.
    assert_eq!(ctrl.identify_active_ns_list(0).unwrap(), vec![1]);
    // Once the controller is disabled (its drop), the unknown-length pages go back to the
    // pool.
    drop(ctrl);
    assert_eq!(pool.live_allocations(), 0);
    assert_eq!(pool.leaks(), 0);
}
