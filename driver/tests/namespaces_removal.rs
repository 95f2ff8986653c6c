//! Batched removal while other threads look namespaces up and submit I/O: I/O to removed
//! namespaces fails cleanly with a typed error (or a device status for commands already sent),
//! I/O to the others is unaffected, nothing panics and no completion is lost.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use vfnvme::controller::{Controller, ControllerOptions};
use vfnvme::namespace::NamespaceState;
use vfnvme::namespaces::registry::pin_guard;
use vfnvme::platform::Platform;
use vfnvme::spec::status::generic;
use vfnvme::{QpairOptions, SubmitErrorKind};
use vfnvme_model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform};

const NAMESPACES: u32 = 64;
const THREADS: usize = 3;

/// Whether `nsid` is one the test removes (by detaching it in the device, or by a driver-side
/// removal).
fn doomed(nsid: u32) -> bool {
    nsid.is_multiple_of(2)
}

#[derive(Default, Debug)]
struct Tally {
    submitted: u64,
    completed: u64,
    refused_not_active: u64,
    lookup_missed: u64,
    failed_on_device: u64,
    survivor_errors: u64,
}

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

#[test]
fn removal_under_concurrent_lookups_and_io() {
    let platform = ModelPlatform::new(ModelConfig {
        namespaces: (1..=NAMESPACES)
            .map(|nsid| ModelNamespaceConfig {
                nsid,
                blocks: 1 << 16,
                lba_size: 512,
                backing: Backing::Null,
            })
            .collect(),
        io_latency_ns: 5_000,
        admin_latency_ns: 20_000,
        ..ModelConfig::default()
    })
    .unwrap();
    let ctrl = Controller::new(Arc::clone(&platform), ControllerOptions::default()).unwrap();
    let progress = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let qpairs: Vec<_> = (0..THREADS)
        .map(|_| ctrl.alloc_qpair(QpairOptions::default()).unwrap())
        .collect();

    let tallies: Vec<Tally> = std::thread::scope(|s| {
        let workers: Vec<_> = qpairs
            .into_iter()
            .enumerate()
            .map(|(t, mut qp)| {
                let ctrl = &ctrl;
                let progress = &progress;
                let stop = &stop;
                s.spawn(move || {
                    let mut tally = Tally::default();
                    let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ t as u64;
                    let on_completion = |c: vfnvme::IoCompletion, tally: &mut Tally| {
                        tally.completed += 1;
                        let nsid = (c.tag >> 32) as u32;
                        if !c.is_ok() {
                            if doomed(nsid) && c.status.sc() == generic::INVALID_NAMESPACE {
                                tally.failed_on_device += 1;
                            } else {
                                tally.survivor_errors += 1;
                            }
                        }
                    };
                    let mut n = 0u64;
                    while !stop.load(Ordering::Acquire) || n < 2000 {
                        n += 1;
                        let nsid = 1 + (xorshift(&mut seed) % u64::from(NAMESPACES)) as u32;
                        let tag = u64::from(nsid) << 32 | n;
                        // Two lookup styles: the epoch-guarded borrow and the counted handle.
                        let result = if t % 2 == 0 {
                            let guard = pin_guard();
                            ctrl.registry()
                                .lookup(nsid, &guard)
                                .map(|ns| qp.flush(ns, tag))
                        } else {
                            ctrl.namespace(nsid)
                                .map(|ns| qp.write_zeroes(&ns, n % 1000, 8, tag))
                        };
                        match result {
                            None => {
                                assert!(doomed(nsid), "nsid {nsid} vanished");
                                tally.lookup_missed += 1;
                            }
                            Some(Ok(())) => tally.submitted += 1,
                            Some(Err(e)) => match e.kind {
                                SubmitErrorKind::NamespaceNotActive { nsid: got, state } => {
                                    assert_eq!(got, nsid);
                                    assert!(doomed(nsid));
                                    assert_ne!(state, NamespaceState::Active);
                                    tally.refused_not_active += 1;
                                }
                                SubmitErrorKind::QueueFull { .. } => {}
                                other => panic!("unexpected submit error {other:?}"),
                            },
                        }
                        if n.is_multiple_of(16) {
                            qp.poll(usize::MAX, |c| on_completion(c, &mut tally));
                            progress.fetch_add(1, Ordering::Release);
                        }
                    }
                    while qp.outstanding() > 0 {
                        if qp.poll(usize::MAX, |c| on_completion(c, &mut tally)) == 0 {
                            ctrl.platform().relax();
                        }
                    }
                    tally
                })
            })
            .collect();

        // Waits until the I/O threads have made `more` rounds of progress from now on.
        let wait_progress = |more: u64| {
            let target = progress.load(Ordering::Acquire) + more;
            while progress.load(Ordering::Acquire) < target {
                std::thread::yield_now();
            }
        };
        wait_progress(50);
        // The device takes half of the doomed namespaces away; the event handler removes them.
        let device_side: Vec<u32> = (1..=NAMESPACES).filter(|&n| n % 4 == 0).collect();
        for &nsid in &device_side {
            platform.detach_namespace(nsid).unwrap();
        }
        let mut removed = Vec::new();
        while removed.len() < device_side.len() {
            if let Some(scan) = ctrl.process_admin_completions().unwrap().scan {
                removed.extend(scan.removed);
            }
        }
        removed.sort_unstable();
        assert_eq!(removed, device_side);
        wait_progress(50);
        // The driver drops the other half itself, in one batch.
        let driver_side: Vec<u32> = (1..=NAMESPACES).filter(|&n| n % 4 == 2).collect();
        let gone = ctrl.remove_namespaces(&driver_side);
        assert_eq!(gone.len(), driver_side.len());
        assert!(gone.iter().all(|n| n.state() != NamespaceState::Active));
        wait_progress(50);
        stop.store(true, Ordering::Release);
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });

    let mut total = Tally::default();
    for t in &tallies {
        assert_eq!(t.submitted, t.completed, "lost completions: {t:?}");
        assert_eq!(t.survivor_errors, 0, "{t:?}");
        total.submitted += t.submitted;
        total.refused_not_active += t.refused_not_active;
        total.lookup_missed += t.lookup_missed;
        total.failed_on_device += t.failed_on_device;
    }
    assert!(total.lookup_missed > 0, "{total:?}");
    let survivors: Vec<u32> = ctrl.namespaces().iter().map(|n| n.nsid()).collect();
    assert_eq!(
        survivors,
        (1..=NAMESPACES).filter(|&n| !doomed(n)).collect::<Vec<_>>()
    );
}

#[test]
fn held_handles_refuse_new_io_after_removal_and_in_flight_io_completes() {
    let platform = ModelPlatform::new(ModelConfig {
        namespaces: (1..=8)
            .map(|nsid| ModelNamespaceConfig {
                nsid,
                blocks: 1 << 12,
                lba_size: 4096,
                backing: Backing::Ram,
            })
            .collect(),
        io_latency_ns: 50_000,
        ..ModelConfig::default()
    })
    .unwrap();
    let ctrl = Controller::new(Arc::clone(&platform), ControllerOptions::default()).unwrap();
    let mut qp = ctrl.alloc_qpair(QpairOptions::default()).unwrap();
    let handles = ctrl.namespaces();
    for ns in &handles {
        for i in 0..4u64 {
            let buf = ctrl.dma().alloc(4096).unwrap();
            qp.write(ns, i, 1, buf, u64::from(ns.nsid()) << 32 | i)
                .unwrap();
        }
    }
    qp.commit();
    let doomed: Vec<u32> = (1..=8).filter(|n| n % 2 == 1).collect();
    let removed = ctrl.remove_namespaces(&doomed);
    assert_eq!(removed.len(), 4);
    for ns in &handles {
        let buf = ctrl.dma().alloc(4096).unwrap();
        let r = qp.read(ns, 0, 1, buf, 99);
        if doomed.contains(&ns.nsid()) {
            let err = r.unwrap_err();
            assert!(matches!(
                err.kind,
                SubmitErrorKind::NamespaceNotActive { nsid, .. } if nsid == ns.nsid()
            ));
            assert!(err.buffer.is_some(), "the buffer comes back");
        } else {
            r.unwrap();
        }
    }
    let mut completions = Vec::new();
    while qp.outstanding() > 0 {
        if qp.poll(usize::MAX, |c| completions.push((c.tag, c.is_ok()))) == 0 {
            platform.relax();
        }
    }
    // 32 writes in flight at the removal + 4 reads to the survivors: all complete, all fine
    // (the device still has the namespaces; only the driver stopped using them).
    assert_eq!(completions.len(), 32 + 4);
    assert!(completions.iter().all(|&(_, ok)| ok));
}
