//! Scenario `hotplug`: host-side hot removal. Two controllers run writes through the
//! driver at queue depth 16; the test then has the host send QMP `device_del` for the one
//! behind the `pcie-root-port` (the guest's pciehp sees an attention button press, waits its
//! 5 s, and removes the device; vfio-pci asks for it back through the device request eventfd).
//! The process must hear it: the removed controller's requests end once with
//! `CONTROLLER_LOST`, its `Removed` event arrives, admin calls fail, and once the process drops
//! it the guest kernel's removal completes (the device leaves /sys/bus/pci/devices within a
//! bound) and QEMU reports `DEVICE_DELETED`. The other controller keeps completing writes the
//! whole time, with no error, and its data reads back. Prints `HOTPLUG-QMP` figures.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use vfnvme::admin::ControllerEvent;
use vfnvme::hal::DmaBuffer;
use vfnvme::spec::Status;
use vfnvme::Namespace;
use vfnvme_tests::guest_io::{self, Ctrl, Qpair};
use vfnvme_tests::{guest, host_qmp};

const DEPTH: usize = 16;
const IO: usize = 4096;
/// Distinct 4 KiB slots the surviving controller cycles through (its data is checked at the end).
const SLOTS: u64 = 256;
/// Writes each controller completes before the removal is requested.
const WARMUP: u64 = 200;
/// Writes the surviving controller must complete after the removed one reported `Removed`.
const AFTER: u64 = 300;
/// Bound on the guest kernel's removal after the process let go of the controller.
const REMOVAL_BOUND: Duration = Duration::from_secs(1);

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

/// The bytes written to `slot` by write number `seq`.
fn pattern(buf: &mut [u8], slot: u64, seq: u64) {
    let word = (slot << 40) ^ seq ^ 0x5a5a_0000_0000_0000;
    for (i, chunk) in buf.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&(word.wrapping_add(i as u64)).to_le_bytes());
    }
}

/// Writes at depth 16 over `SLOTS` slots until `stop` is set (then drains), or until the
/// controller is lost (then stops submitting and drains what is left). `ok` counts successes
/// as they happen; `last` records the sequence number of the last acknowledged write per slot.
fn writer(
    ctrl: &Ctrl,
    ns: &Namespace,
    mut qp: Qpair,
    stop: &AtomicBool,
    ok: &AtomicU64,
    last: &mut [Option<u64>],
) -> Counts {
    let blocks = IO as u32 / ns.lba_size();
    let mut c = Counts::default();
    // Per tag: (slot, seq) in flight.
    let mut in_flight: [Option<(u64, u64)>; DEPTH] = [None; DEPTH];
    let mut bufs: Vec<(u64, DmaBuffer)> = (0..DEPTH as u64)
        .map(|i| (i, ctrl.dma().alloc(IO).expect("DMA buffer")))
        .collect();
    let mut lost_seen = false;
    let mut seq = 0u64;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let stopping = lost_seen || stop.load(Ordering::Relaxed);
        if stopping && qp.outstanding() == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the writer ran 600 s: {c:?}");
        if !stopping {
            let mut queued = false;
            while let Some((tag, mut buf)) = bufs.pop() {
                // Slots in flight are distinct: the window of DEPTH consecutive seqs.
                let slot = seq % SLOTS;
                pattern(buf.as_mut_slice(), slot, seq);
                qp.write(ns, 1024 + slot * u64::from(blocks), blocks, buf, tag)
                    .expect("submission");
                in_flight[tag as usize] = Some((slot, seq));
                seq += 1;
                c.issued += 1;
                queued = true;
            }
            if queued {
                qp.commit();
            }
        }
        qp.poll(usize::MAX, |cpl| {
            let tag = cpl.tag as usize;
            let Some((slot, s)) = in_flight[tag].take() else {
                c.duplicated += 1;
                return;
            };
            match cpl.status {
                st if st.is_success() => {
                    c.ok += 1;
                    ok.fetch_add(1, Ordering::Relaxed);
                    let l = &mut last[slot as usize];
                    if l.is_none_or(|prev| prev < s) {
                        *l = Some(s);
                    }
                }
                Status::CONTROLLER_LOST => {
                    c.lost_status += 1;
                    lost_seen = true;
                }
                other => {
                    eprintln!("write of slot {slot} failed: {other}");
                    c.other_errors += 1;
                }
            }
            match cpl.buffer {
                Some(b) => bufs.push((cpl.tag, b)),
                None => c.no_buffer += 1,
            }
        });
    }
    c.never_completed = qp.outstanding() as u64;
    c
}

fn wait_until(what: &str, bound: Duration, cond: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < bound, "{what}: not within {bound:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    start.elapsed()
}

#[test]
fn qmp_device_del_during_io_on_two_controllers_loses_one_and_the_other_carries_on() {
    if !guest::in_guest(
        "guest_hotplug_qmp::qmp_device_del_during_io_on_two_controllers_loses_one_and_the_other_carries_on",
    ) {
        return;
    }
    let removable = guest::device_list("VFNVME_REMOVABLE_DEVICES");
    assert_eq!(
        removable.len(),
        1,
        "the scenario has one controller behind a root port"
    );
    let gone_bdf = removable[0].clone();
    let stays_bdf = guest::vfio_devices()
        .into_iter()
        .find(|b| *b != gone_bdf)
        .expect("a second vfio controller");
    let qemu_id = host_qmp::qemu_id_of(&gone_bdf).expect("VFNVME_QEMU_IDS names the controller");

    let gone = guest_io::open(&gone_bdf);
    let stays = guest_io::open(&stays_bdf);
    assert!(
        gone.platform().removal_notice().is_some(),
        "vfio-pci of 6.1 has the device request interrupt"
    );
    let gone_events = gone.subscribe_controller_events();
    let stays_events = stays.subscribe_controller_events();
    let gone_ns = guest_io::namespace(&gone, 1);
    let stays_ns = guest_io::namespace(&stays, 1);
    let (gone_qp, stays_qp) = (guest_io::qpair(&gone, 64), guest_io::qpair(&stays, 64));
    let (gone_ok, stays_ok) = (AtomicU64::new(0), AtomicU64::new(0));
    let (never_stop, stop_stays) = (AtomicBool::new(false), AtomicBool::new(false));
    let mut gone_last = vec![None; SLOTS as usize];
    let mut stays_last = vec![None; SLOTS as usize];
    let (removed_tx, removed_rx) = mpsc::channel();

    let (gone_counts, stays_counts, timing) = std::thread::scope(|s| {
        let gone_io = s.spawn(|| {
            writer(
                &gone,
                &gone_ns,
                gone_qp,
                &never_stop,
                &gone_ok,
                &mut gone_last,
            )
        });
        let stays_io = s.spawn(|| {
            writer(
                &stays,
                &stays_ns,
                stays_qp,
                &stop_stays,
                &stays_ok,
                &mut stays_last,
            )
        });
        wait_until(
            "both controllers ran writes",
            Duration::from_secs(300),
            || {
                gone_ok.load(Ordering::Relaxed) >= WARMUP
                    && stays_ok.load(Ordering::Relaxed) >= WARMUP
            },
        );

        // The host-side removal, at this moment.
        let asked = Instant::now();
        let reply = host_qmp::execute(
            "device_del",
            serde_json::json!({ "id": qemu_id }),
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("QMP device_del {qemu_id}: {e}"));
        assert_eq!(reply, serde_json::json!({}), "device_del returns nothing");
        let stays_ok_at_request = stays_ok.load(Ordering::Relaxed);
        let event_after = loop {
            match gone_events.recv_timeout(Duration::from_secs(120)) {
                Ok(ControllerEvent::Removed) => break asked.elapsed(),
                Ok(other) => eprintln!("event of {gone_bdf} before the removal: {other:?}"),
                Err(e) => panic!("no Removed event from {gone_bdf} within 120 s: {e}"),
            }
        };
        removed_tx.send(()).unwrap();
        let gone_counts = gone_io.join().unwrap();
        let stays_ok_at_removed = stays_ok.load(Ordering::Relaxed);
        // The other controller carries on.
        wait_until(
            "the other controller kept completing writes after the removal",
            Duration::from_secs(120),
            || stays_ok.load(Ordering::Relaxed) >= stays_ok_at_removed + AFTER,
        );
        stop_stays.store(true, Ordering::Relaxed);
        let stays_counts = stays_io.join().unwrap();
        (
            gone_counts,
            stays_counts,
            (event_after, stays_ok_at_request, stays_ok_at_removed),
        )
    });
    removed_rx.try_recv().unwrap();
    let (event_after, stays_ok_at_request, stays_ok_at_removed) = timing;

    // The removed controller: admin calls fail, dropping it lets the kernel finish.
    assert!(
        gone.process_admin_completions().is_err(),
        "admin calls fail on a removed controller"
    );
    let released = Instant::now();
    drop(gone_ns);
    drop(gone);
    let drop_took = released.elapsed();
    let sysfs = Path::new("/sys/bus/pci/devices").join(&gone_bdf);
    let removal_after_drop = wait_until(
        "the guest kernel's removal finished after the controller was dropped",
        REMOVAL_BOUND,
        || !sysfs.exists(),
    );
    let deleted = host_qmp::wait_event(
        "DEVICE_DELETED",
        |d| d["device"] == qemu_id.as_str(),
        Duration::from_secs(30),
    )
    .expect("QMP events readable");
    assert!(
        deleted.is_some(),
        "QEMU reported DEVICE_DELETED for {qemu_id}: {:?}",
        host_qmp::events()
    );

    println!(
        "HOTPLUG-QMP removed={gone_bdf} ({qemu_id}) issued={} ok={} controller_lost={} other_errors={} no_buffer={} duplicated={} never_completed={} removed_event_after_request={event_after:?} drop={drop_took:?} sysfs_gone_after_drop={removal_after_drop:?}",
        gone_counts.issued,
        gone_counts.ok,
        gone_counts.lost_status,
        gone_counts.other_errors,
        gone_counts.no_buffer,
        gone_counts.duplicated,
        gone_counts.never_completed
    );
    println!(
        "HOTPLUG-QMP stays={stays_bdf} issued={} ok={} (at the request {stays_ok_at_request}, at Removed {stays_ok_at_removed}) errors={} duplicated={} never_completed={}",
        stays_counts.issued,
        stays_counts.ok,
        stays_counts.lost_status + stays_counts.other_errors,
        stays_counts.duplicated,
        stays_counts.never_completed
    );
    let c = &gone_counts;
    assert!(c.lost_status >= 1, "{c:?}");
    assert_eq!(
        (c.duplicated, c.never_completed, c.no_buffer, c.other_errors),
        (0, 0, 0, 0),
        "{c:?}"
    );
    assert_eq!(c.issued, c.ok + c.lost_status, "each exactly once: {c:?}");
    let c = &stays_counts;
    assert_eq!(
        (
            c.lost_status,
            c.other_errors,
            c.duplicated,
            c.never_completed,
            c.no_buffer
        ),
        (0, 0, 0, 0, 0),
        "{c:?}"
    );
    assert_eq!(c.issued, c.ok, "{c:?}");
    assert!(c.ok >= stays_ok_at_removed + AFTER, "{c:?}");

    // The other controller saw no recovery event, and its data reads back.
    let events: Vec<ControllerEvent> = stays_events.try_iter().collect();
    assert!(events.is_empty(), "{stays_bdf} had events: {events:?}");
    stays
        .process_admin_completions()
        .expect("the other controller's admin queue works");
    let mut qp = guest_io::qpair(&stays, 16);
    let blocks = IO as u64 / u64::from(stays_ns.lba_size());
    let mut checked = 0;
    let mut expected = vec![0u8; IO];
    for (slot, seq) in stays_last.iter().enumerate() {
        let Some(seq) = *seq else { continue };
        let got = guest_io::read(&stays, &mut qp, &stays_ns, 1024 + slot as u64 * blocks, IO);
        pattern(&mut expected, slot as u64, seq);
        guest_io::assert_same(
            &expected,
            &got,
            stays_ns.lba_size(),
            &format!("slot {slot}"),
        );
        checked += 1;
    }
    assert_eq!(checked, SLOTS, "every slot was written");
    println!("HOTPLUG-QMP stays: {checked} slots read back as last written");
    // gone_last is only informative: those writes may have been lost with the device.
    let _ = gone_last;
}
