//! Scenario `multipath` helpers: both controllers opened in ONE VFIO container with one DMA
//! pool ([`VfioPlatform::open_shared`]), a [`Subsystem`] of them, a channel on a head, and the
//! one-line `MULTIPATH-FAILOVER` report.

use std::io::Write;
use std::sync::Arc;

use vfnvme::multipath::{ChannelOptions, HeadOptions, IoChannel, PathPolicy, Subsystem};
use vfnvme::platform::Platform;
use vfnvme::vfio_platform::{VfioOptions, VfioPlatform};
use vfnvme::{Controller, ControllerOptions, QpairOptions};

use crate::mp_workload::Tally;

/// A subsystem of controllers on VFIO.
pub type Sub = Subsystem<VfioPlatform>;
/// A channel on one of its heads.
pub type Channel = IoChannel<VfioPlatform>;
/// A controller shared with a subsystem.
pub type SharedCtrl = Arc<Controller<VfioPlatform>>;

/// Opens every controller of `bdfs` in one container and pool and brings each up.
pub fn open_shared(bdfs: &[String]) -> Vec<SharedCtrl> {
    let addrs: Vec<&str> = bdfs.iter().map(String::as_str).collect();
    let platforms = VfioPlatform::open_shared(&addrs, VfioOptions::default())
        .unwrap_or_else(|e| panic!("{bdfs:?}: opening in one VFIO container failed: {e}"));
    assert_eq!(platforms.len(), bdfs.len());
    for p in &platforms[1..] {
        assert!(
            p.dma().same_pool(platforms[0].dma()),
            "open_shared gives every platform the same DMA pool"
        );
        assert!(Arc::ptr_eq(
            p.device()
                .and_then(|d| d.type1())
                .expect("a VFIO device in a type1 container"),
            platforms[0]
                .device()
                .and_then(|d| d.type1())
                .expect("a VFIO device in a type1 container")
        ));
    }
    platforms
        .into_iter()
        .zip(bdfs)
        .map(|(p, bdf)| {
            Arc::new(
                Controller::new(p, ControllerOptions::default())
                    .unwrap_or_else(|e| panic!("{bdf}: controller bring-up failed: {e}")),
            )
        })
        .collect()
}

/// A subsystem of `ctrls` whose heads use `policy`.
pub fn subsystem(ctrls: &[SharedCtrl], policy: PathPolicy) -> Arc<Sub> {
    let sub = Subsystem::from_controllers(
        ctrls.to_vec(),
        HeadOptions {
            policy,
            ..HeadOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("forming the subsystem: {e}"));
    for h in sub.heads() {
        let paths: Vec<String> = h
            .paths()
            .paths
            .iter()
            .map(|p| {
                format!(
                    "ctrl {} {:?} {:?}",
                    p.controller,
                    p.state,
                    p.namespace.identity()
                )
            })
            .collect();
        eprintln!("head nsid {} id {}: {paths:?}", h.nsid(), h.unique_id());
    }
    sub
}

/// A channel on the head of `nsid`, queue pairs of `depth` entries.
pub fn channel(sub: &Arc<Sub>, nsid: u32, depth: u32) -> Channel {
    let head = sub
        .head(nsid)
        .unwrap_or_else(|| panic!("no head for namespace {nsid}"));
    IoChannel::open(
        sub.clone(),
        head,
        ChannelOptions {
            qpair: QpairOptions {
                depth,
                ..QpairOptions::default()
            },
            ..ChannelOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("opening a channel on namespace {nsid}: {e}"))
}

/// The controller indexes among the head's paths of `nsid`.
pub fn paths_of(sub: &Sub, nsid: u32) -> Vec<usize> {
    sub.head(nsid)
        .map(|h| h.paths().paths.iter().map(|p| p.controller).collect())
        .unwrap_or_default()
}

/// Commands sent per path (controller 0 and 1) by `ch` so far.
pub fn sent(ch: &Channel) -> [u64; 2] {
    let s = ch.stats().per_path;
    [
        s.first().copied().unwrap_or(0),
        s.get(1).copied().unwrap_or(0),
    ]
}

/// `b - a` per path.
pub fn delta(a: [u64; 2], b: [u64; 2]) -> [u64; 2] {
    [b[0] - a[0], b[1] - a[1]]
}

/// Prints (past libtest's capture) the table row of a failover test (prefix `MULTIPATH-FAILOVER`):
/// issued, completed OK, with error, lost, duplicated, corrupt, failed over, then the commands sent
/// per path in each phase.
pub fn report(test: &str, t: &Tally, lost: u64, failovers: u64, phases: &[(&str, [u64; 2])]) {
    let per: Vec<String> = phases
        .iter()
        .map(|(name, p)| format!("{name} {}/{}", p[0], p[1]))
        .collect();
    let line = format!(
        "MULTIPATH-FAILOVER | {test} | issued {} | ok {} | error {} | lost {lost} | duplicated {} | corrupt {} | failovers {failovers} | per path (ctrl0/ctrl1): {} | completions per path {}/{} |",
        t.issued,
        t.ok,
        t.errors,
        t.duplicated,
        t.corrupt,
        per.join(", "),
        t.per_path[0],
        t.per_path[1],
    );
    // Written to the stream directly, so libtest's capture does not hide it.
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}
