//! A subsystem: controllers with one SUBNQN that report CMIC multi-controller, and the heads
//! built from their namespaces. Everything here is control path (a writer lock serialises
//! changes); the I/O path only reads heads and path lists ([`super::IoChannel`]).

use super::error::MultipathError;
use super::head::{Head, HeadOptions};
use super::heads::HeadTable;
use super::paths::MAX_PATHS;
use crate::admin::ControllerEvent;
use crate::controller::Controller;
use crate::error::Error;
use crate::namespaces::epoch::pin;
use crate::namespaces::NamespaceEvent;
use crate::platform::Platform;
use crate::spec::ana::CMIC_MULTI_CONTROLLER;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

mod rebuild;

use rebuild::anatt_ns;

/// One controller of the subsystem.
#[derive(Debug)]
pub(crate) struct Member<P: Platform> {
    /// `None` once the device was removed: the subsystem lets go of it so that the kernel's
    /// removal can finish (the channels drop their queue pairs on it too).
    ctrl: RwLock<Option<Arc<Controller<P>>>>,
    /// False once `ctrl` is `None` (read without the lock by the channels).
    held: AtomicBool,
    /// The controller's name (its PCI address), kept after it is released.
    pub name: String,
    pub numa: Option<u32>,
    /// False once the controller failed, was removed, or was taken out of the subsystem.
    pub alive: AtomicBool,
}

impl<P: Platform> Member<P> {
    /// The controller, unless it was removed and released.
    pub fn ctrl(&self) -> Option<Arc<Controller<P>>> {
        self.ctrl.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Lets go of a removed controller; returns whether this call did (idempotent).
    fn release(&self) -> bool {
        let gone = self.ctrl.write().unwrap_or_else(|e| e.into_inner()).take();
        self.held.store(false, Ordering::Release);
        if gone.is_some() {
            log::info!("{}: removed; the subsystem released it", self.name);
        }
        gone.is_some()
    }
}

/// State only writers touch (under the writer lock).
#[derive(Debug, Default)]
struct Writer {
    /// Controller and namespace event receivers, by member index.
    receivers: Vec<(usize, Receiver<ControllerEvent>, Receiver<NamespaceEvent>)>,
    /// When each (controller, ANA group) entered the change state (platform ns).
    change_since: HashMap<(usize, u32), u64>,
    /// nsids already reported as having mismatched identifiers.
    mismatch_logged: BTreeSet<u32>,
    /// (nsid, controller) paths reported once for a format other than their head's.
    format_mismatch_logged: BTreeSet<(u32, usize)>,
    /// The ANA log page each controller had at the last rebuild (a page read by someone
    /// else's `process_admin_completions` is noticed by comparing).
    ana_seen: HashMap<usize, Arc<crate::spec::ana::AnaLog>>,
}

/// What one [`Subsystem::poll`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubsystemReport {
    /// Controllers found failed or removed.
    pub controllers_lost: Vec<usize>,
    /// Controllers that finished a reset.
    pub controllers_reset: Vec<usize>,
    /// ANA change notices handled.
    pub ana_notices: usize,
    /// Namespace events seen.
    pub namespace_events: usize,
    /// Heads whose path list changed.
    pub heads_changed: usize,
    /// Heads removed.
    pub heads_removed: usize,
}

/// Controllers of one NVM subsystem and their multipath heads.
#[derive(Debug)]
pub struct Subsystem<P: Platform> {
    nqn: String,
    members: Box<[OnceLock<Member<P>>]>,
    heads: HeadTable,
    writer: Mutex<Writer>,
    defaults: HeadOptions,
    publications: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<P: Platform> Subsystem<P> {
    /// An empty subsystem for SUBNQN `nqn`; new heads get `defaults`.
    pub fn new(nqn: impl Into<String>, defaults: HeadOptions) -> Arc<Self> {
        Arc::new(Subsystem {
            nqn: nqn.into(),
            members: (0..MAX_PATHS).map(|_| OnceLock::new()).collect(),
            heads: HeadTable::new(),
            writer: Mutex::new(Writer::default()),
            defaults,
            publications: AtomicU64::new(0),
        })
    }

    /// A subsystem of `controllers` (same SUBNQN, CMIC multi-controller, one DMA pool), the
    /// SUBNQN taken from the first; no NUMA nodes.
    pub fn from_controllers(
        controllers: Vec<Arc<Controller<P>>>,
        defaults: HeadOptions,
    ) -> Result<Arc<Self>, MultipathError> {
        let nqn = controllers
            .first()
            .map(|c| c.identify().identify.subnqn.clone())
            .unwrap_or_default();
        let sub = Self::new(nqn, defaults);
        for c in controllers {
            sub.add_controller(c, None)?;
        }
        Ok(sub)
    }

    /// The subsystem NQN.
    pub fn nqn(&self) -> &str {
        &self.nqn
    }

    /// Adds a controller as a path to every namespace it has; returns its index. It must
    /// report CMIC multi-controller and this subsystem's SUBNQN, and allocate from the same
    /// DMA pool as the other controllers (a request's buffer moves between paths).
    pub fn add_controller(
        &self,
        ctrl: Arc<Controller<P>>,
        numa_node: Option<u32>,
    ) -> Result<usize, MultipathError> {
        let name = ctrl.platform().name();
        let id = &ctrl.identify().identify;
        if id.cmic & CMIC_MULTI_CONTROLLER == 0 {
            return Err(MultipathError::NotMultiController { name });
        }
        if id.subnqn != self.nqn {
            return Err(MultipathError::SubsystemMismatch {
                name,
                want: self.nqn.clone(),
                got: id.subnqn.clone(),
            });
        }
        let mut w = lock(&self.writer);
        let mut index = None;
        for (i, slot) in self.members.iter().enumerate() {
            match slot.get().map(|m| m.ctrl()) {
                Some(Some(m)) if Arc::ptr_eq(&m, &ctrl) => {
                    return Err(MultipathError::AlreadyMember { name })
                }
                Some(Some(m)) if !m.dma().same_pool(ctrl.dma()) => {
                    return Err(MultipathError::DmaPoolMismatch { name })
                }
                Some(_) => {}
                None => {
                    index = Some(i);
                    break;
                }
            }
        }
        let index = index.ok_or(MultipathError::TooManyControllers { max: MAX_PATHS })?;
        w.receivers.push((
            index,
            ctrl.subscribe_controller_events(),
            ctrl.subscribe_namespace_events(),
        ));
        let member = Member {
            name: name.clone(),
            ctrl: RwLock::new(Some(ctrl)),
            held: AtomicBool::new(true),
            numa: numa_node,
            alive: AtomicBool::new(true),
        };
        if self.members[index].set(member).is_err() {
            return Err(MultipathError::TooManyControllers { max: MAX_PATHS });
        }
        self.rebuild(&mut w, &[], false);
        Ok(index)
    }

    /// Takes controller `index` out: its paths go away (requests in flight on it still
    /// complete, and path errors fail over). Returns whether it was in.
    pub fn remove_controller(&self, index: usize) -> bool {
        let mut w = lock(&self.writer);
        let Some(m) = self.member(index) else {
            return false;
        };
        let was = m.alive.swap(false, Ordering::AcqRel);
        self.rebuild(&mut w, &[], false);
        was
    }

    pub(crate) fn member(&self, index: usize) -> Option<&Member<P>> {
        self.members.get(index).and_then(OnceLock::get)
    }

    /// Controller `index` (also after it failed or was taken out; `None` once a removed
    /// device was released).
    pub fn controller(&self, index: usize) -> Option<Arc<Controller<P>>> {
        self.member(index).and_then(Member::ctrl)
    }

    /// The controllers still held, by index, with whether each is still a live path (a
    /// removed device is released and no longer listed: see [`Self::paths_named`]).
    pub fn controllers(&self) -> Vec<(usize, Arc<Controller<P>>, bool)> {
        self.members
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let m = s.get()?;
                Some((i, m.ctrl()?, m.alive.load(Ordering::Acquire)))
            })
            .collect()
    }

    /// Whether controller `index` was removed and released (lock-free).
    pub(crate) fn released(&self, index: usize) -> bool {
        self.member(index)
            .is_some_and(|m| !m.held.load(Ordering::Acquire))
    }

    /// Every controller ever added, by index: its name (PCI address), whether it is a live
    /// path, and whether the subsystem still holds it (false once a removed device was
    /// released).
    pub fn paths_named(&self) -> Vec<(usize, String, bool, bool)> {
        self.members
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let m = s.get()?;
                let held = m.ctrl().is_some();
                Some((i, m.name.clone(), m.alive.load(Ordering::Acquire), held))
            })
            .collect()
    }

    /// The platform time, from the first controller still held (the model's controllers
    /// share one clock; on VFIO each platform counts from its own open, a few ms apart, which
    /// the timers here — ANATT, delayed removal — tolerate).
    pub fn now_ns(&self) -> u64 {
        self.members
            .iter()
            .filter_map(OnceLock::get)
            .find_map(Member::ctrl)
            .map_or(0, |c| c.platform().now_ns())
    }

    /// The head of namespace `nsid` (lock-free, wait-free). If controllers disagree about the
    /// namespace's identifier there are several heads: see [`Subsystem::heads_for`].
    pub fn head(&self, nsid: u32) -> Option<Arc<Head>> {
        self.heads.get(nsid)
    }

    /// Runs `f` on the (first) head of `nsid` without taking a reference count or a lock:
    /// the I/O path's lookup. `None` if there is none.
    #[inline]
    pub fn with_head<R>(&self, nsid: u32, f: impl FnOnce(&Head) -> R) -> Option<R> {
        self.heads.with(|v| {
            let i = v.partition_point(|h| h.nsid() < nsid);
            v.get(i).filter(|h| h.nsid() == nsid).map(|h| f(h))
        })
    }

    /// Every head of `nsid`.
    pub fn heads_for(&self, nsid: u32) -> Vec<Arc<Head>> {
        self.heads.all(nsid)
    }

    /// Every head, by nsid.
    pub fn heads(&self) -> Vec<Arc<Head>> {
        self.heads.snapshot()
    }

    /// How many times path lists were published (each publication is one batch of heads with
    /// one grace period for all their old lists).
    pub fn publications(&self) -> u64 {
        self.publications.load(Ordering::Relaxed)
    }

    /// The control-path poll: controller events (reset done, failed, removed), admin
    /// completions of every live controller (namespace changes, ANA changes), ANA transition
    /// and delayed-removal timers; then every head whose paths changed is published in one
    /// batch. Call it periodically from any thread (e.g. every millisecond).
    pub fn poll(&self) -> SubsystemReport {
        let mut w = lock(&self.writer);
        let mut report = SubsystemReport::default();
        let mut changed = false;
        let mut reset_done = Vec::new();
        let mut released = false;
        let receivers = std::mem::take(&mut w.receivers);
        for (i, ctrl_rx, ns_rx) in &receivers {
            let Some(m) = self.member(*i) else { continue };
            while let Ok(e) = ctrl_rx.try_recv() {
                match e {
                    ControllerEvent::Removed => {
                        if m.alive.swap(false, Ordering::AcqRel) {
                            report.controllers_lost.push(*i);
                            changed = true;
                        }
                        // The device is going: let go of it so that the kernel's removal
                        // can finish (requests still in flight on it end with "controller
                        // lost" in their channels, which fail them over). Its heads are
                        // republished so that every channel drops its queue pair there.
                        released |= m.release();
                    }
                    ControllerEvent::Failed if m.alive.swap(false, Ordering::AcqRel) => {
                        report.controllers_lost.push(*i);
                        changed = true;
                    }
                    ControllerEvent::ResetDone => {
                        report.controllers_reset.push(*i);
                        reset_done.push(*i);
                    }
                    _ => {}
                }
            }
            while ns_rx.try_recv().is_ok() {
                report.namespace_events += 1;
                changed = true;
            }
            if !m.alive.load(Ordering::Acquire) {
                // Not a path any more (failed, or taken out) but still held: if the kernel
                // asks for the device back, let go of it.
                if let Some(ctrl) = m.ctrl().filter(|c| c.platform().removed()) {
                    ctrl.mark_removed();
                    drop(ctrl);
                    released |= m.release();
                }
                continue;
            }
            let Some(ctrl) = m.ctrl() else { continue };
            match ctrl.process_admin_completions() {
                Ok(r) => {
                    report.ana_notices += r.ana_notices;
                    changed |= r.ana_notices > 0 || r.scan.is_some();
                }
                Err(
                    e @ (Error::ControllerRemoved
                    | Error::ControllerFailed
                    | Error::DeviceGone { .. }),
                ) => {
                    m.alive.store(false, Ordering::Release);
                    report.controllers_lost.push(*i);
                    changed = true;
                    if !matches!(e, Error::ControllerFailed) {
                        released |= m.release();
                    }
                }
                Err(e) => log::warn!("subsystem {}: controller {i}: {e}", self.nqn),
            }
            // Namespace events raised by the scan above.
            while ns_rx.try_recv().is_ok() {
                report.namespace_events += 1;
                changed = true;
            }
            // An ANA page read elsewhere (the application's own admin poll).
            if let Some(log) = ctrl.ana_log() {
                changed |= !w
                    .ana_seen
                    .get(i)
                    .is_some_and(|seen| Arc::ptr_eq(seen, &log));
            }
        }
        w.receivers = receivers;
        let now = self.now_ns();
        changed |= self.timers_due(&w, now);
        if changed || released || !reset_done.is_empty() {
            let (heads_changed, heads_removed) = self.rebuild(&mut w, &reset_done, released);
            report.heads_changed = heads_changed;
            report.heads_removed = heads_removed;
        }
        report
    }

    /// Whether an ANA transition outlived ANATT or a pathless head's delayed removal ran out.
    fn timers_due(&self, w: &Writer, now: u64) -> bool {
        let anatt_over = w.change_since.iter().any(|(&(i, _), &since)| {
            self.controller(i)
                .is_some_and(|c| now.saturating_sub(since) > anatt_ns(&c))
        });
        anatt_over
            || self.heads.with(|heads| {
                heads.iter().any(|h| {
                    h.deadline_ns.load(Ordering::Acquire) <= now
                        && h.paths.read(&pin(), |l| l.paths.is_empty())
                })
            })
    }

    /// Removes every head of `nsid` now: requests queued in their channels fail at once with
    /// [`super::ChannelError::HeadRemoved`]. Returns how many heads were removed.
    pub fn remove_head(&self, nsid: u32) -> usize {
        let _w = lock(&self.writer);
        let all = self.heads.snapshot();
        let (gone, keep): (Vec<_>, Vec<_>) = all.into_iter().partition(|h| h.nsid() == nsid);
        for h in &gone {
            h.mark_removed();
        }
        if !gone.is_empty() {
            self.heads.replace(keep);
            self.publications.fetch_add(1, Ordering::Relaxed);
        }
        gone.len()
    }
}
