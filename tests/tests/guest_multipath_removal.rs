//! Scenario `multipath`: controller 00:10.0 is removed from under the process (guest-side
//! `echo 1 > /sys/bus/pci/devices/0000:00:10.0/remove`, from another thread) while
//! write+read-verify I/O runs at QD 32 on the head of namespace 1 through both controllers,
//! opened in one VFIO container and DMA pool. The device request notice marks controller 0
//! removed, its requests fail over to 00:11.0, no error reaches the user; once the process
//! lets go of 00:10.0 the kernel finishes the removal (the device leaves sysfs), and
//! 00:11.0 goes on with the same DMA pool: every slot reads back, and when the last user
//! goes the pool's unmaps all succeed in the container that 00:10.0's group left.

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use vfnvme::hal::pci::bind::{bind_to_vfio, current_driver};
use vfnvme::hal::PciAddress;
use vfnvme::multipath::PathPolicy;
use vfnvme_tests::guest;
use vfnvme_tests::guest_multipath::{self as mp, delta, paths_of, sent};
use vfnvme_tests::mp_workload::Workload;

const NSID: u32 = 1;
const DEPTH: usize = 32;
const PHASE: u64 = 1500;

fn device_dir(bdf: &str) -> PathBuf {
    Path::new("/sys/bus/pci/devices").join(bdf)
}

#[test]
fn controller_removed_under_io_fails_over_and_is_released() {
    if !guest::in_guest(
        "guest_multipath_removal::controller_removed_under_io_fails_over_and_is_released",
    ) {
        return;
    }
    let devices = guest::vfio_devices();
    assert_eq!(
        devices.len(),
        2,
        "the multipath scenario has two vfio controllers"
    );
    let removed_bdf = devices[0].clone();
    let mut ctrls = mp::open_shared(&devices);
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

    w.run_count(&mut ch, &sub, PHASE, "before the removal");
    let s0 = sent(&ch);

    // The removal blocks in the kernel until the process lets go of the device.
    let (done_tx, done_rx) = mpsc::channel();
    let remove_path = device_dir(&removed_bdf).join("remove");
    let remover = std::thread::spawn(move || {
        let r = std::fs::write(&remove_path, "1");
        let _ = done_tx.send(());
        r
    });
    w.run(
        &mut ch,
        &sub,
        Duration::from_secs(120),
        "controller 0 noticed removed",
        |_| paths_of(&sub, NSID) == [1],
    );
    assert!(ctrls[0]
        .platform()
        .removal_notice()
        .is_some_and(|n| n.requested()));
    let s1 = sent(&ch);
    w.run_count(&mut ch, &sub, PHASE, "after the removal");
    let s2 = sent(&ch);
    let lost = w.drain(&mut ch, &sub, Duration::from_secs(60));
    assert!(
        done_rx.try_recv().is_err(),
        "the kernel waits for the process before removing the device"
    );

    // Let go of 00:10.0: the channel (its queue pair), the subsystem and the controller.
    let stats = ch.stats();
    drop(ch);
    drop(sub);
    let gone = ctrls.remove(0);
    assert_eq!(
        Arc::strong_count(&gone),
        1,
        "nothing else holds controller 0"
    );
    drop(gone);
    done_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the sysfs remove returned once the device was released");
    remover
        .join()
        .expect("remover thread")
        .expect("the sysfs remove succeeded");
    assert!(
        !device_dir(&removed_bdf).exists(),
        "{removed_bdf} left sysfs"
    );

    // 00:11.0 alone, same pool and container: every slot written so far reads back.
    let sub = mp::subsystem(&ctrls, PathPolicy::RoundRobin);
    let mut ch = mp::channel(&sub, NSID, 64);
    w.reread_all();
    w.run(
        &mut ch,
        &sub,
        Duration::from_secs(120),
        "reading every slot back",
        |w| w.reads_queued() == 0,
    );
    w.run_count(&mut ch, &sub, 500, "00:11.0 alone");
    let lost = lost + w.drain(&mut ch, &sub, Duration::from_secs(60));
    // Controller index 0 of this subsystem is 00:11.0: shown in the ctrl1 column.
    let s3 = [0, sent(&ch)[0]];

    let before = delta([0, 0], s0);
    let removing = delta(s0, s1);
    let removed = delta(s1, s2);
    mp::report(
        "pci-remove",
        &w.tally,
        lost,
        stats.failovers + ch.stats().failovers,
        &[
            ("before", before),
            ("removing", removing),
            ("removed", removed),
            ("alone", s3),
        ],
    );
    eprintln!("channel stats during the removal: {stats:?}");
    assert_eq!(w.first_error(), None, "{:?}", w.tally);
    assert_eq!(
        (w.tally.errors, lost, w.tally.duplicated, w.tally.corrupt),
        (0, 0, 0, 0),
        "{:?}",
        w.tally
    );
    assert_eq!(w.tally.ok, w.tally.issued);
    assert!(
        before[0] > 0 && before[1] > 0,
        "round-robin over both: {before:?}"
    );
    assert_eq!(
        removed[0], 0,
        "nothing sent to the removed controller: {removed:?}"
    );
    assert!(removed[1] >= PHASE / 2, "{removed:?}");

    // The last users of the pool go: every region is unmapped for real (the container still
    // holds 00:11.0's group), none is left counted as mapped.
    drop(ch);
    drop(sub);
    w.release_buffers();
    drop(w);
    drop(ctrls);
    assert_eq!(type1.mapped_bytes(), 0, "every DMA region was unmapped");
    drop(type1);

    // Give 00:10.0 back for whoever comes next.
    let addr = PciAddress::parse(&removed_bdf).unwrap();
    std::fs::write("/sys/bus/pci/rescan", "1").expect("rescan the PCI bus");
    bind_to_vfio(&addr).unwrap_or_else(|e| panic!("rebind {removed_bdf} to vfio-pci: {e}"));
    assert_eq!(current_driver(&addr).unwrap().as_deref(), Some("vfio-pci"));
}
