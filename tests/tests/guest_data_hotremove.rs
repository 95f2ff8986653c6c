//! Scenario `data`: hot removal through the driver. While a thread runs writes at
//! queue depth 16, `echo 1 > /sys/bus/pci/devices/BDF/remove`: the kernel signals the device
//! request eventfd that `VfioPlatform` registered, the queue pair's periodic check marks the
//! controller removed, the requests in flight end once with `CONTROLLER_LOST` (buffers back),
//! the `Removed` event arrives, the process drops the controller, and the kernel's removal
//! finishes within a second of that. The device is then rescanned and given back to vfio-pci.

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use vfnvme::admin::ControllerEvent;
use vfnvme::hal::pci::bind::bind_to_vfio;
use vfnvme::hal::PciAddress;
use vfnvme::spec::Status;
use vfnvme_tests::{guest, guest_io};

const DEPTH: usize = 16;
const IO: usize = 4096;

#[derive(Debug, Default)]
struct Counts {
    issued: u64,
    ok: u64,
    lost_status: u64,
    other_errors: u64,
    no_buffer: u64,
    duplicated: u64,
    never_completed: u64,
}

#[test]
fn sysfs_remove_during_io_ends_it_with_controller_lost_and_the_removal_finishes() {
    if !guest::in_guest(
        "guest_data_hotremove::sysfs_remove_during_io_ends_it_with_controller_lost_and_the_removal_finishes",
    ) {
        return;
    }
    let bdf = guest::vfio_devices()[0].clone();
    let addr = PciAddress::parse(&bdf).unwrap();
    let ctrl = guest_io::open(&bdf);
    assert!(
        ctrl.platform().removal_notice().is_some(),
        "vfio-pci of 6.1 has the device request interrupt"
    );
    let events = ctrl.subscribe_controller_events();
    let ns = guest_io::namespace(&ctrl, 1);
    let blocks = IO as u32 / ns.lba_size();
    let mut qp = guest_io::qpair(&ctrl, 64);
    let (started_tx, started_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let remove_path = Path::new("/sys/bus/pci/devices").join(&bdf).join("remove");

    let (ctrl_ref, ns_ref) = (&ctrl, &ns);
    let (counts, remover) = std::thread::scope(|s| {
        let io = s.spawn(move || {
            let (ctrl, ns) = (ctrl_ref, ns_ref);
            let mut c = Counts::default();
            let mut in_flight = [false; DEPTH];
            let mut bufs: Vec<(u64, vfnvme::hal::DmaBuffer)> = (0..DEPTH as u64)
                .map(|i| (i, ctrl.dma().alloc(IO).unwrap()))
                .collect();
            let mut lost_seen = false;
            let mut started = false;
            let mut n = 0u64;
            let deadline = Instant::now() + Duration::from_secs(300);
            while !(lost_seen && qp.outstanding() == 0) && Instant::now() < deadline {
                if !lost_seen {
                    while let Some((i, buf)) = bufs.pop() {
                        let lba = 1000 + (n % 1024) * u64::from(blocks);
                        n += 1;
                        qp.write(ns, lba, blocks, buf, i).expect("submission");
                        in_flight[i as usize] = true;
                        c.issued += 1;
                    }
                    qp.commit();
                }
                qp.poll(usize::MAX, |cpl| {
                    let i = cpl.tag as usize;
                    if !in_flight[i] {
                        c.duplicated += 1;
                        return;
                    }
                    in_flight[i] = false;
                    match cpl.status {
                        st if st.is_success() => c.ok += 1,
                        Status::CONTROLLER_LOST => {
                            c.lost_status += 1;
                            lost_seen = true;
                        }
                        _ => c.other_errors += 1,
                    }
                    match cpl.buffer {
                        Some(b) => bufs.push((cpl.tag, b)),
                        None => c.no_buffer += 1,
                    }
                });
                if c.ok >= 200 && !started {
                    started = true;
                    let _ = started_tx.send(());
                }
            }
            c.never_completed = qp.outstanding() as u64;
            drop(qp);
            drop(bufs);
            c
        });
        started_rx
            .recv_timeout(Duration::from_secs(300))
            .expect("I/O ran before the removal");
        // The removal blocks in the kernel until we let go, so it runs on its own thread.
        let remover = std::thread::spawn(move || {
            let r = std::fs::write(&remove_path, "1");
            done_tx.send(Instant::now()).unwrap();
            r
        });
        let removed_at = Instant::now();
        let event = loop {
            match events.recv_timeout(Duration::from_secs(120)) {
                Ok(ControllerEvent::Removed) => break Some(removed_at.elapsed()),
                Ok(other) => eprintln!("event before the removal: {other:?}"),
                Err(_) => break None,
            }
        };
        eprintln!("Removed event {event:?} after the sysfs write");
        assert!(event.is_some(), "the driver published Removed");
        let counts = io.join().unwrap();
        (counts, remover)
    });
    assert!(
        ctrl.process_admin_completions().is_err(),
        "admin calls fail on a removed controller"
    );
    let released_at = Instant::now();
    drop(ns);
    drop(ctrl);
    let drop_took = released_at.elapsed();
    let finished = done_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the sysfs remove returned after the controller was dropped");
    let took = finished.saturating_duration_since(released_at);
    remover.join().unwrap().expect("the sysfs remove succeeded");
    println!(
        "HOT-REMOVAL issued={} ok={} controller_lost={} other_errors={} no_buffer={} duplicated={} never_completed={} drop={drop_took:?} removal_done_after_drop={took:?}",
        counts.issued,
        counts.ok,
        counts.lost_status,
        counts.other_errors,
        counts.no_buffer,
        counts.duplicated,
        counts.never_completed
    );
    assert!(counts.lost_status >= 1, "{counts:?}");
    assert_eq!(counts.duplicated, 0, "{counts:?}");
    assert_eq!(counts.never_completed, 0, "{counts:?}");
    assert_eq!(counts.no_buffer, 0, "{counts:?}");
    assert_eq!(counts.other_errors, 0, "{counts:?}");
    assert_eq!(
        counts.issued,
        counts.ok + counts.lost_status,
        "each exactly once"
    );
    assert!(
        took < Duration::from_secs(1),
        "the kernel's removal took {took:?} after the controller was dropped"
    );
    assert!(
        !Path::new("/sys/bus/pci/devices").join(&bdf).exists(),
        "{bdf} is gone from sysfs"
    );

    // Give the device back for whoever comes next.
    std::fs::write("/sys/bus/pci/rescan", "1").expect("rescan the PCI bus");
    bind_to_vfio(&addr).unwrap_or_else(|e| panic!("rebind {bdf} to vfio-pci: {e}"));
    let again = guest_io::open(&bdf);
    assert!(again.namespace(1).is_some(), "the controller works again");
}
