//! Scenario `multins` (in the QEMU guest): detach one namespace at run time with the Namespace
//! Attachment command (opcode 15h, SEL 1 = detach, 0 = attach; controller list in a 4 KiB
//! buffer), and watch the registry follow the Namespace Attribute Changed events while I/O
//! keeps running on the other namespaces.
//!
//! QEMU implements Namespace Attachment for namespaces of an `nvme-subsys`; if the controller
//! rejects the command, the failure says so.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vfnvme::namespace::NamespaceState;
use vfnvme::namespaces::NamespaceEvent;
use vfnvme::vfio_platform::{VfioOptions, VfioPlatform};
use vfnvme::{Controller, ControllerOptions, QpairOptions, SubmitErrorKind};
use vfnvme_tests::guest;

/// How long the guest may take to raise and deliver a namespace event.
const EVENT_DEADLINE: Duration = Duration::from_secs(10);

fn attachment(ctrl: &Controller<VfioPlatform>, nsid: u32, attach: bool) {
    let cntlid = ctrl.identify().identify.cntlid;
    let what = if attach { "attach" } else { "detach" };
    ctrl.namespace_attachment(nsid, attach, &[cntlid])
        .unwrap_or_else(|e| {
            panic!(
                "Namespace Attachment ({what} nsid {nsid} to controller {cntlid}) failed: {e}; \
                 QEMU supports it only for namespaces of an nvme-subsys device"
            )
        });
}

/// Polls admin completions until `want` is published (or the deadline passes).
fn wait_for(
    ctrl: &Controller<VfioPlatform>,
    events: &std::sync::mpsc::Receiver<NamespaceEvent>,
    want: NamespaceEvent,
) {
    let deadline = Instant::now() + EVENT_DEADLINE;
    loop {
        ctrl.process_admin_completions().expect("admin completions");
        if events.try_iter().any(|e| e == want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no {want:?} within {EVENT_DEADLINE:?}: the controller raised no Namespace Attribute \
             Changed event, or it was not handled"
        );
        std::thread::yield_now();
    }
}

#[test]
fn detach_and_reattach_one_namespace_while_io_runs_on_the_others() {
    if !guest::in_guest(
        "guest_multins_attach::detach_and_reattach_one_namespace_while_io_runs_on_the_others",
    ) {
        return;
    }
    let expected = guest::expected_namespaces(None);
    assert!(expected.len() >= 2, "multins needs at least 2 namespaces");
    let bdf = guest::vfio_devices()
        .into_iter()
        .next()
        .expect("no vfio-pci controller in VFNVME_VFIO_DEVICES");
    let platform = VfioPlatform::open(&bdf, VfioOptions::default())
        .unwrap_or_else(|e| panic!("opening {bdf}: {e}"));
    let ctrl = Controller::new(platform, ControllerOptions::default())
        .unwrap_or_else(|e| panic!("bring-up of {bdf}: {e}"));
    assert_eq!(ctrl.namespaces().len(), expected.len());
    let victim = expected.last().map(|n| n.nsid).unwrap_or(0);
    let victim_blocks = expected.last().map(|n| n.blocks).unwrap_or(0);
    let others: Vec<Arc<vfnvme::Namespace>> = ctrl
        .namespaces()
        .into_iter()
        .filter(|n| n.nsid() != victim)
        .collect();
    let events = ctrl.subscribe_namespace_events();
    let stop = AtomicBool::new(false);
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).expect("qpair");

    let (done, errors) = std::thread::scope(|s| {
        let io = s.spawn(|| {
            let (mut done, mut errors) = (0u64, 0u64);
            let mut i = 0u64;
            while !stop.load(Ordering::Acquire) {
                let ns = &others[(i % others.len() as u64) as usize];
                let lba = i % ns.blocks().min(1024);
                let mut buf = ctrl.dma().alloc(ns.lba_size() as usize).expect("DMA");
                buf.as_mut_slice().fill((i % 251) as u8);
                match qp.write_sync(ns, lba, 1, buf) {
                    Ok(buf) => match qp.read_sync(ns, lba, 1, buf) {
                        Ok(b) if b.as_slice().iter().all(|&x| x == (i % 251) as u8) => done += 1,
                        _ => errors += 1,
                    },
                    Err(_) => errors += 1,
                }
                i += 1;
            }
            (done, errors)
        });

        let held = ctrl.namespace(victim).expect("victim registered");
        attachment(&ctrl, victim, false);
        wait_for(&ctrl, &events, NamespaceEvent::Removed(victim));
        assert!(
            ctrl.namespace(victim).is_none(),
            "detached namespace still listed"
        );
        assert_ne!(held.state(), NamespaceState::Active);
        let mut probe_qp = ctrl.alloc_qpair(QpairOptions::default()).expect("qpair");
        let buf = ctrl.dma().alloc(held.lba_size() as usize).expect("DMA");
        let err = probe_qp.read(&held, 0, 1, buf, 0).unwrap_err();
        assert!(
            matches!(err.kind, SubmitErrorKind::NamespaceNotActive { nsid, .. } if nsid == victim),
            "{err}"
        );

        attachment(&ctrl, victim, true);
        wait_for(&ctrl, &events, NamespaceEvent::Added(victim));
        let back = ctrl
            .namespace(victim)
            .expect("re-attached namespace listed");
        assert_eq!(back.blocks(), victim_blocks);
        assert_eq!(back.state(), NamespaceState::Active);
        let buf = ctrl.dma().alloc(back.lba_size() as usize).expect("DMA");
        probe_qp
            .read_sync(&back, 0, 1, buf)
            .expect("I/O to the re-attached namespace");

        stop.store(true, Ordering::Release);
        io.join().expect("I/O thread panicked")
    });
    assert_eq!(errors, 0, "I/O to the other namespaces failed");
    assert!(done > 0, "no I/O ran meanwhile");
    assert_eq!(ctrl.namespaces().len(), expected.len());
    eprintln!("multins attach: {done} write+read pairs on the other namespaces meanwhile");
}
