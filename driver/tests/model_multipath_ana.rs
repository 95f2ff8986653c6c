//! The model's NVM subsystem and ANA, seen through the driver's controller: shared namespaces
//! across controllers, the ANA log page at bring-up and on ANA change events, the
//! path-related statuses of every ANA state, every state transition, scheduled transitions in
//! virtual time, and Namespace Attachment per controller.

use std::sync::Arc;
use vfnvme::platform::Platform;
use vfnvme::spec::ana::{AnaState as DrvState, CMIC_ANA, CMIC_MULTI_CONTROLLER};
use vfnvme::spec::status::sct;
use vfnvme::{Controller, ControllerOptions, Error, QpairOptions};
use vfnvme_model::{
    AnaState, Backing, ModelAnaGroup, ModelConfig, ModelNamespaceConfig, ModelPlatform,
    ModelSubsystem, ModelSubsystemConfig,
};

fn subsystem(controllers: u16) -> ModelSubsystem {
    let ns = |nsid| ModelNamespaceConfig {
        nsid,
        blocks: 1 << 16,
        lba_size: 512,
        backing: Backing::Ram,
    };
    ModelSubsystem::new(ModelSubsystemConfig {
        controllers,
        base: ModelConfig {
            namespaces: vec![ns(1), ns(2), ns(3)],
            io_latency_ns: 1_000,
            admin_latency_ns: 1_000,
            ..ModelConfig::default()
        },
        ana_groups: vec![
            ModelAnaGroup {
                id: 1,
                nsids: vec![1, 2],
                state: AnaState::Optimized,
            },
            ModelAnaGroup {
                id: 2,
                nsids: vec![3],
                state: AnaState::NonOptimized,
            },
        ],
        ..ModelSubsystemConfig::default()
    })
    .expect("subsystem config")
}

fn up(p: &Arc<ModelPlatform>) -> Controller<ModelPlatform> {
    Controller::new(p.clone(), ControllerOptions::default()).expect("bring-up")
}

fn drv(s: AnaState) -> DrvState {
    match s {
        AnaState::Optimized => DrvState::Optimized,
        AnaState::NonOptimized => DrvState::NonOptimized,
        AnaState::Inaccessible => DrvState::Inaccessible,
        AnaState::PersistentLoss => DrvState::PersistentLoss,
        AnaState::Change => DrvState::Change,
    }
}

/// Writes one block of `byte` at `lba` through `ctrl`; the status on failure.
fn write(ctrl: &Controller<ModelPlatform>, nsid: u32, lba: u64, byte: u8) -> Result<(), Error> {
    let ns = ctrl.namespace(nsid).expect("namespace");
    let mut qp = ctrl.alloc_qpair(QpairOptions::default())?;
    let mut buf = ctrl.dma().alloc(512)?;
    buf.as_mut_slice().fill(byte);
    qp.write_sync(&ns, lba, 1, buf).map(|_| ())
}

fn read(ctrl: &Controller<ModelPlatform>, nsid: u32, lba: u64) -> Result<u8, Error> {
    let ns = ctrl.namespace(nsid).expect("namespace");
    let mut qp = ctrl.alloc_qpair(QpairOptions::default())?;
    let buf = ctrl.dma().alloc(512)?;
    let buf = qp.read_sync(&ns, lba, 1, buf)?;
    let b = buf.as_slice();
    assert!(
        b.iter().all(|&x| x == b[0]),
        "a block written with one byte"
    );
    Ok(b[0])
}

#[test]
fn controllers_share_subsystem_identity_and_data() {
    let sub = subsystem(3);
    let ctrls: Vec<_> = sub.controllers().iter().map(up).collect();
    for (i, c) in ctrls.iter().enumerate() {
        let id = &c.identify().identify;
        assert_eq!(id.subnqn, sub.nqn());
        assert_eq!(id.cmic, CMIC_MULTI_CONTROLLER | CMIC_ANA);
        assert_eq!(id.cntlid as usize, i + 1);
        assert_eq!(id.anagrpmax, 2);
        assert_eq!(id.anatt, 10);
        assert_eq!(id.anacap & 0x1F, 0x1F);
        assert!(c.reports_ana());
    }
    assert_ne!(ctrls[0].identify().serial(), ctrls[1].identify().serial());
    for nsid in 1..=3 {
        let ids: Vec<_> = ctrls
            .iter()
            .map(|c| *c.namespace(nsid).unwrap().identity())
            .collect();
        assert!(ids.iter().all(|i| *i == ids[0]), "nsid {nsid}: {ids:?}");
        assert_ne!(ids[0].nguid, [0; 16]);
        assert_eq!(ids[0].anagrpid, if nsid == 3 { 2 } else { 1 });
    }
    // A write on one controller reads back on the others.
    write(&ctrls[0], 1, 10, 0xA5).unwrap();
    write(&ctrls[2], 3, 11, 0x5A).unwrap();
    for c in &ctrls {
        assert_eq!(read(c, 1, 10).unwrap(), 0xA5);
        assert_eq!(read(c, 3, 11).unwrap(), 0x5A);
        assert_eq!(read(c, 2, 10).unwrap(), 0, "another namespace is untouched");
    }
    // One clock.
    let t = sub.now_ns();
    assert!(t > 0);
    assert!(sub.controllers().iter().all(|p| p.now_ns() == t));
}

#[test]
fn ana_log_is_read_at_bring_up() {
    let sub = subsystem(2);
    let c = up(sub.controller(1).unwrap());
    let log = c.ana_log().expect("read at bring-up");
    assert_eq!(log.groups.len(), 2);
    assert_eq!(log.state_of(1), Some(DrvState::Optimized));
    assert_eq!(log.state_of(2), Some(DrvState::NonOptimized));
    assert_eq!(log.groups[0].nsids, vec![1, 2]);
    assert_eq!(log.groups[1].nsids, vec![3]);
    assert_eq!(c.ana_state(2), Some(DrvState::NonOptimized));
    assert_eq!(c.ana_state(0), None);
}

#[test]
fn every_ana_transition_reaches_the_driver_and_the_io_status() {
    let sub = subsystem(2);
    let c0 = up(sub.controller(0).unwrap());
    let c1 = up(sub.controller(1).unwrap());
    let mut from = AnaState::Optimized;
    let mut transitions = 0;
    let mut lba = 0;
    for &a in &AnaState::ALL {
        for &b in &AnaState::ALL {
            if a == b {
                continue;
            }
            for to in [a, b] {
                if to == from {
                    continue;
                }
                sub.set_ana_state(1, 1, to).unwrap();
                let report = c1.process_admin_completions().unwrap();
                assert_eq!(report.ana_notices, 1, "{from:?} -> {to:?}");
                let log = report.ana.expect("log read on the event");
                assert_eq!(log.state_of(1), Some(drv(to)));
                assert_eq!(c1.ana_state(1), Some(drv(to)));
                assert_eq!(log.state_of(2), Some(DrvState::NonOptimized), "other group");
                lba += 1;
                match (write(&c1, 1, lba, 7), to) {
                    (Ok(()), AnaState::Optimized | AnaState::NonOptimized) => {
                        assert_eq!(read(&c0, 1, lba).unwrap(), 7)
                    }
                    (Err(Error::IoFailed { status }), _) => {
                        assert_eq!(status.sct(), sct::PATH, "{to:?}: {status}");
                        let want = match to {
                            AnaState::PersistentLoss => 0x01,
                            AnaState::Inaccessible => 0x02,
                            AnaState::Change => 0x03,
                            _ => unreachable!("usable states succeed"),
                        };
                        assert_eq!(status.sc(), want, "{to:?}");
                        assert!(!status.dnr());
                        assert_eq!(read(&c0, 1, lba).unwrap(), 0, "nothing written");
                    }
                    (r, _) => panic!("{from:?} -> {to:?}: {r:?}"),
                }
                // The other controller and group are untouched.
                write(&c0, 1, lba, 8).unwrap();
                write(&c1, 3, lba, 9).unwrap();
                assert_eq!(c0.process_admin_completions().unwrap().ana_notices, 0);
                from = to;
                transitions += 1;
            }
        }
    }
    assert!(
        transitions >= 20,
        "all 20 ordered pairs were covered: {transitions}"
    );
    // Setting the same state again raises no event.
    sub.set_ana_state(1, 1, from).unwrap();
    assert_eq!(c1.process_admin_completions().unwrap().ana_notices, 0);
}

#[test]
fn scheduled_transition_through_change_in_virtual_time() {
    let sub = subsystem(2);
    let p = sub.controller(0).unwrap();
    let c = up(p);
    let t0 = p.now_ns();
    p.set_ana_state(1, AnaState::Change).unwrap();
    p.schedule_ana_state(1, AnaState::Optimized, t0 + 5_000_000_000)
        .unwrap();
    assert_eq!(c.process_admin_completions().unwrap().ana_notices, 1);
    assert_eq!(c.ana_state(1), Some(DrvState::Change));
    assert!(matches!(write(&c, 2, 0, 1), Err(Error::IoFailed { status }) if status.sc() == 0x03));
    // Polling idles the clock forward to the scheduled change.
    let mut polls = 0;
    while c.ana_state(1) != Some(DrvState::Optimized) {
        polls += 1;
        assert!(polls < 100_000, "the scheduled change never came");
        c.process_admin_completions().unwrap();
        p.relax();
    }
    assert!(p.now_ns() >= t0 + 5_000_000_000);
    write(&c, 2, 0, 1).unwrap();
    assert!(
        p.set_ana_state(9, AnaState::Optimized).is_err(),
        "no group 9"
    );
    assert!(p.schedule_ana_state(9, AnaState::Optimized, 0).is_err());
}

#[test]
fn namespace_attachment_is_per_controller() {
    let sub = subsystem(2);
    let c0 = up(sub.controller(0).unwrap());
    let c1 = up(sub.controller(1).unwrap());
    write(&c1, 2, 5, 0x33).unwrap();
    c0.namespace_attachment(2, false, &[1]).unwrap();
    let r = c0.process_admin_completions().unwrap();
    assert_eq!(r.scan.unwrap().removed, vec![2]);
    assert!(c0.namespace(2).is_none());
    assert_eq!(
        read(&c1, 2, 5).unwrap(),
        0x33,
        "still there on the other controller"
    );
    let log = c0.refresh_ana().unwrap();
    assert_eq!(
        log.groups[0].nsids,
        vec![1],
        "the ANA log lists attached namespaces only"
    );
    c0.namespace_attachment(2, true, &[1]).unwrap();
    c0.process_admin_completions().unwrap();
    assert_eq!(read(&c0, 2, 5).unwrap(), 0x33, "same data after re-attach");
}

#[test]
fn subsystem_configuration_errors_are_typed() {
    let bad = |f: &dyn Fn(&mut ModelSubsystemConfig)| {
        let mut c = ModelSubsystemConfig {
            ana_groups: vec![ModelAnaGroup {
                id: 1,
                nsids: vec![1],
                state: AnaState::Optimized,
            }],
            ..ModelSubsystemConfig::default()
        };
        f(&mut c);
        ModelSubsystem::new(c).unwrap_err().to_string()
    };
    assert!(bad(&|c| c.controllers = 0).contains("controllers"));
    assert!(bad(&|c| c.ana_groups[0].id = 0).contains("ANA group 0"));
    assert!(bad(&|c| c.ana_groups[0].nsids = vec![7]).contains("namespace 7"));
    assert!(bad(&|c| c.ana_groups[0].nsids.clear()).contains("in no ANA group"));
    assert!(bad(&|c| {
        let g = c.ana_groups[0].clone();
        c.ana_groups.push(g)
    })
    .contains("own ID"));
    let ok = ModelSubsystem::new(ModelSubsystemConfig::default()).unwrap();
    assert!(ok.controller(5).is_err());
    let c = up(ok.controller(0).unwrap());
    assert_eq!(
        c.identify().identify.cmic,
        CMIC_MULTI_CONTROLLER,
        "no ANA groups: no ANA"
    );
    assert!(c.ana_log().is_none());
    assert!(matches!(c.refresh_ana(), Err(Error::Unsupported { .. })));
}
