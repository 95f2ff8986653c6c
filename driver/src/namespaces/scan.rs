//! The namespace scan: which namespaces the controller has, what they are, and how the
//! registry must change to match.
//!
//! 1. The Identify Active Namespace ID list (CNS 02h), paginated 1024 nsids at a time; if the
//!    controller rejects CNS 02h (NVMe < 1.1), every nsid 1..=NN is probed instead.
//! 2. For each nsid: Identify Namespace (CNS 00h) and the Namespace Identification
//!    Descriptors (CNS 03h), then the command-set-specific Identify Namespace (CNS 05h) when
//!    the descriptors report a CSI other than NVM.
//! 3. All of these go through the admin queue's pipelined submitter: as many in flight as the
//!    queue has free slots, one doorbell per round, each command with its own preallocated
//!    4 KiB page (the page of its slot). The parallelism is the admin queue depth.
//! 4. [`apply`] turns the probes into registry changes: new → insert; gone → removal (one
//!    batch, one grace period); identity or format changed → removal plus addition; only the
//!    size changed → `resize` in place.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use super::NamespaceRegistry;
use crate::admin::{AdminWork, Shared};
use crate::error::Error;
use crate::namespace::{Namespace, NamespaceIdentity};
use crate::platform::Platform;
use crate::quirks::Quirks;
use crate::spec::identify::{parse_active_ns_list, parse_ns_descriptors, IdentifyNamespace};
use crate::spec::status::{generic, sct};
use crate::spec::{Command, Completion};
use vfnvme_hal::{DmaBuffer, DmaPool};

/// nsids in one page of the Active Namespace ID list.
const ACTIVE_LIST_ENTRIES: usize = 1024;
/// The most nsids probed one by one when CNS 02h is not supported (pre-1.1 controllers have
/// small NN; this bounds the work if one reports a huge one).
pub const FALLBACK_MAX_NSIDS: u32 = 1 << 16;

/// How many probe commands may be in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScanMode {
    /// As many as the admin queue has free slots (the default).
    #[default]
    Pipelined,
    /// One command at a time (for comparison).
    OneAtATime,
}

/// What a scan found and changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanReport {
    /// Whether every namespace was scanned (otherwise only listed nsids).
    pub full: bool,
    /// Whether the Active Namespace ID list was unsupported and 1..=NN was probed.
    pub used_fallback: bool,
    /// nsids probed.
    pub probed: usize,
    /// Admin commands sent (list pages and probes).
    pub admin_commands: usize,
    /// nsids that appeared (including those re-added after an identity change).
    pub added: Vec<u32>,
    /// nsids removed (including those re-added after an identity change).
    pub removed: Vec<u32>,
    /// nsids whose size changed in place.
    pub resized: Vec<u32>,
    /// nsids whose probe failed (left as they were).
    pub failed: Vec<u32>,
}

/// What one probe found.
#[derive(Debug)]
pub enum Probe {
    /// The namespace is active.
    Present {
        /// Identity and format.
        identity: NamespaceIdentity,
        /// Size in logical blocks.
        blocks: u64,
    },
    /// Not an active namespace.
    Absent,
    /// The probe failed; the namespace is left as it is.
    Failed(Error),
}

/// One 4 KiB DMA page per admin slot, allocated once per controller.
#[derive(Debug, Default)]
pub(crate) struct ScanPages {
    pages: Vec<DmaBuffer>,
    /// The controller's quirks: which Identify CNS values the scan may send.
    quirks: Quirks,
}

impl ScanPages {
    /// `slots` pages of 4 KiB, for a controller with `quirks`.
    pub fn new(pool: &DmaPool, slots: usize, quirks: Quirks) -> Result<Self, Error> {
        let pages = (0..slots.max(1))
            .map(|_| pool.alloc(4096))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ScanPages { pages, quirks })
    }

    /// Whether the Active Namespace ID list (CNS 02h) may be read.
    fn active_list_allowed(&self) -> bool {
        !self.quirks.contains(Quirks::IDENTIFY_CNS)
    }

    /// Whether Namespace Identification Descriptor lists (CNS 03h) may be read.
    fn descriptors_allowed(&self) -> bool {
        !self.quirks.contains(Quirks::IDENTIFY_CNS)
            && !self.quirks.contains(Quirks::NO_NS_DESC_LIST)
    }
}

fn is_invalid_namespace(e: &Error) -> bool {
    matches!(e, Error::AdminFailed { status, .. }
        if status.sct() == sct::GENERIC && status.sc() == generic::INVALID_NAMESPACE)
}

/// Reads the Active Namespace ID list; `Ok(None)` if the controller rejects CNS 02h.
fn active_list<P: Platform>(
    shared: &Shared<P>,
    page: &DmaBuffer,
    report: &mut ScanReport,
) -> Result<Option<Vec<u32>>, Error> {
    let mut nsids = Vec::new();
    let mut after = 0u32;
    loop {
        report.admin_commands += 1;
        let cmd = Command::identify_active_ns_list(after, page.iova());
        // SAFETY: Identify moves 4 KiB into `page`, a 4 KiB page of the controller's scan pages
        // (locked by the caller), which live as long as the controller and are only ever
        // filled by Identify commands; a late write after a timeout lands in that page too.
        match unsafe { shared.admin_sync_raw(cmd) } {
            Ok(_) => {}
            Err(Error::AdminFailed { status, .. }) if nsids.is_empty() => {
                log::info!("Active Namespace ID list rejected ({status}); probing 1..=NN");
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
        let list = parse_active_ns_list(page.as_slice())?;
        let full = list.len() == ACTIVE_LIST_ENTRIES;
        let last = list.last().copied();
        nsids.extend(list.into_iter().filter(|&n| n > after));
        match last {
            Some(l) if full && l > after && l < 0xFFFF_FFFE => after = l,
            _ => return Ok(Some(nsids)),
        }
    }
}

/// What is known of one nsid while its probe commands run.
#[derive(Default)]
struct Partial {
    /// Identify Namespace: `Ok(None)` = inactive.
    ns: Option<Result<Option<(NamespaceIdentity, u64)>, Error>>,
    desc: Option<Result<crate::spec::identify::NsDescriptors, Error>>,
    csi: Option<Result<(), Error>>,
}

#[derive(Clone, Copy)]
enum Step {
    Namespace,
    Descriptors,
    CsiNamespace(u8),
}

/// The probe commands of a set of nsids, fed to the pipelined submitter.
struct ProbeWork<'a> {
    nsids: &'a [u32],
    pages: &'a [DmaBuffer],
    next_index: usize,
    next_step_is_descriptors: bool,
    /// Send CNS 03h probes (not for controllers with the IDENTIFY_CNS / NO_NS_DESC_LIST quirk).
    descriptors: bool,
    /// Dependent CNS 05h probes, sent before new nsids.
    follow_ups: VecDeque<(usize, Step)>,
    in_slot: Vec<Option<(usize, Step)>>,
    partial: Vec<Partial>,
    in_flight: usize,
    max_in_flight: usize,
    sent: usize,
}

impl ProbeWork<'_> {
    fn take_step(&mut self) -> Option<(usize, Step)> {
        if let Some(s) = self.follow_ups.pop_front() {
            return Some(s);
        }
        if self.next_index >= self.nsids.len() {
            return None;
        }
        let i = self.next_index;
        if self.next_step_is_descriptors {
            self.next_step_is_descriptors = false;
            self.next_index += 1;
            Some((i, Step::Descriptors))
        } else if self.descriptors {
            self.next_step_is_descriptors = true;
            Some((i, Step::Namespace))
        } else {
            self.next_index += 1;
            Some((i, Step::Namespace))
        }
    }
}

fn parse_namespace(page: &[u8]) -> Result<Option<(NamespaceIdentity, u64)>, Error> {
    let id = IdentifyNamespace::parse(page)?;
    if id.nsze == 0 {
        return Ok(None);
    }
    let fmt = id.current_format()?;
    let identity = NamespaceIdentity {
        eui64: id.eui64,
        nguid: id.nguid,
        uuid: [0; 16],
        csi: 0,
        lba_shift: fmt.lbads,
        metadata_size: fmt.ms,
        metadata_extended: fmt.ms != 0 && id.metadata_extended(),
        protection_type: id.dps & 0x7,
        protection_first: id.dps & 0x7 != 0 && id.dps & 0x8 != 0,
        anagrpid: id.anagrpid,
        shared: id.nmic & 1 != 0,
    };
    Ok(Some((identity, id.nsze)))
}

impl AdminWork for ProbeWork<'_> {
    fn next(&mut self, slot: u16) -> Option<Command> {
        if self.in_flight >= self.max_in_flight {
            return None;
        }
        let page = self.pages.get(slot as usize)?.iova();
        let (i, step) = self.take_step()?;
        let nsid = *self.nsids.get(i)?;
        let cmd = match step {
            Step::Namespace => Command::identify_namespace(nsid, page),
            Step::Descriptors => Command::identify_ns_descriptors(nsid, page),
            Step::CsiNamespace(csi) => Command::identify_csi_namespace(nsid, csi, page),
        };
        if let Some(s) = self.in_slot.get_mut(slot as usize) {
            *s = Some((i, step));
        }
        self.in_flight += 1;
        self.sent += 1;
        Some(cmd)
    }

    fn done(&mut self, slot: u16, result: Result<Completion, Error>) {
        self.in_flight = self.in_flight.saturating_sub(1);
        let Some((i, step)) = self.in_slot.get_mut(slot as usize).and_then(Option::take) else {
            return;
        };
        let Some(page) = self.pages.get(slot as usize) else {
            return;
        };
        let data = page.as_slice();
        let mut follow_up = None;
        let Some(p) = self.partial.get_mut(i) else {
            return;
        };
        match step {
            Step::Namespace => {
                p.ns = Some(match result {
                    Ok(_) => parse_namespace(data),
                    Err(e) if is_invalid_namespace(&e) => Ok(None),
                    Err(e) => Err(e),
                });
            }
            Step::Descriptors => {
                let desc = result.and_then(|_| Ok(parse_ns_descriptors(data)?));
                if let Ok(Some(csi)) = desc.as_ref().map(|d| d.csi) {
                    if csi != 0 {
                        follow_up = Some((i, Step::CsiNamespace(csi)));
                    }
                }
                p.desc = Some(desc);
            }
            Step::CsiNamespace(_) => p.csi = Some(result.map(|_| ())),
        }
        if let Some(f) = follow_up {
            self.follow_ups.push_back(f);
        }
    }

    fn timed_out(&mut self, _waited_ms: u64) {
        self.next_index = self.nsids.len();
        self.follow_ups.clear();
    }
}

fn finish(p: Partial) -> Probe {
    let (mut identity, blocks) = match p.ns {
        None => {
            return Probe::Failed(Error::AdminTimeout {
                opcode: 0x06,
                waited_ms: 0,
            })
        }
        Some(Err(e)) => return Probe::Failed(e),
        Some(Ok(None)) => return Probe::Absent,
        Some(Ok(Some(v))) => v,
    };
    match p.desc {
        Some(Ok(d)) => {
            identity.eui64 = d.eui64.unwrap_or(identity.eui64);
            identity.nguid = d.nguid.unwrap_or(identity.nguid);
            identity.uuid = d.uuid.unwrap_or([0; 16]);
            identity.csi = d.csi.unwrap_or(0);
        }
        // The namespace went away between the two commands.
        Some(Err(e)) if is_invalid_namespace(&e) => return Probe::Absent,
        // Pre-1.3 controllers have no descriptor list: EUI64/NGUID from CNS 00h only.
        Some(Err(e)) => log::debug!("namespace descriptors unavailable: {e}"),
        None => {}
    }
    if identity.csi != 0 {
        match p.csi {
            Some(Ok(())) => {}
            Some(Err(e)) => return Probe::Failed(e),
            None => {
                return Probe::Failed(Error::AdminTimeout {
                    opcode: 0x06,
                    waited_ms: 0,
                })
            }
        }
    }
    Probe::Present { identity, blocks }
}

/// Probes `nsids` through the pipelined submitter (or one at a time).
pub(crate) fn probe<P: Platform>(
    shared: &Shared<P>,
    pages: &ScanPages,
    nsids: &[u32],
    mode: ScanMode,
    report: &mut ScanReport,
) -> Vec<(u32, Probe)> {
    let slots = pages.pages.len();
    let mut work = ProbeWork {
        nsids,
        pages: &pages.pages,
        next_index: 0,
        next_step_is_descriptors: false,
        descriptors: pages.descriptors_allowed(),
        follow_ups: VecDeque::new(),
        in_slot: (0..slots).map(|_| None).collect(),
        partial: (0..nsids.len()).map(|_| Partial::default()).collect(),
        in_flight: 0,
        max_in_flight: match mode {
            ScanMode::Pipelined => usize::MAX,
            ScanMode::OneAtATime => 1,
        },
        sent: 0,
    };
    // SAFETY: every command `ProbeWork` hands out is an Identify (4 KiB) into the scan page
    // of its slot, owned by `pages` (locked by the caller for the whole scan, alive as long as
    // the controller) and used by one command at a time.
    unsafe { shared.admin_pipeline(&mut work) };
    report.admin_commands += work.sent;
    report.probed += nsids.len();
    nsids
        .iter()
        .copied()
        .zip(work.partial.into_iter().map(finish))
        .collect()
}

/// Scans every namespace of the controller (NN from Identify Controller) and applies the
/// result to `registry`.
pub(crate) fn full_scan<P: Platform>(
    shared: &Shared<P>,
    pages: &ScanPages,
    nn: u32,
    registry: &NamespaceRegistry,
    mode: ScanMode,
) -> Result<ScanReport, Error> {
    let mut report = ScanReport {
        full: true,
        ..ScanReport::default()
    };
    let first = pages.pages.first().ok_or(Error::Unsupported {
        what: "a scan without DMA pages",
    })?;
    let listed = if pages.active_list_allowed() {
        active_list(shared, first, &mut report)?
    } else {
        log::info!("controller quirk: no Active Namespace ID list; probing 1..=NN");
        None
    };
    let nsids = match listed {
        Some(list) => list,
        None => {
            report.used_fallback = true;
            if nn > FALLBACK_MAX_NSIDS {
                log::warn!("NN = {nn}: probing only nsids 1..={FALLBACK_MAX_NSIDS}");
            }
            (1..=nn.min(FALLBACK_MAX_NSIDS)).collect()
        }
    };
    let probes = probe(shared, pages, &nsids, mode, &mut report);
    apply(registry, probes, true, &mut report);
    Ok(report)
}

/// Probes only `nsids` (e.g. from the Changed Namespace List) and applies the result.
pub(crate) fn partial_scan<P: Platform>(
    shared: &Shared<P>,
    pages: &ScanPages,
    nsids: &[u32],
    registry: &NamespaceRegistry,
    mode: ScanMode,
) -> ScanReport {
    let mut report = ScanReport::default();
    let mut list: Vec<u32> = nsids
        .iter()
        .copied()
        .filter(|&n| super::registry::is_valid_nsid(n))
        .collect();
    list.sort_unstable();
    list.dedup();
    let probes = probe(shared, pages, &list, mode, &mut report);
    apply(registry, probes, false, &mut report);
    report
}

/// Applies probe results to `registry`. With `full`, registered nsids that were not probed are
/// gone. All removals (gone, or identity changed) happen in one `remove_batch`: one grace
/// period for the lot; then additions, then in-place resizes.
pub fn apply(
    registry: &NamespaceRegistry,
    probes: Vec<(u32, Probe)>,
    full: bool,
    report: &mut ScanReport,
) {
    let mut probed = HashSet::with_capacity(probes.len());
    let mut remove = Vec::new();
    let mut add = Vec::new();
    let mut resize = Vec::new();
    for (nsid, probe) in probes {
        probed.insert(nsid);
        match probe {
            Probe::Present { identity, blocks } => match registry.get(nsid) {
                None => add.push(Arc::new(Namespace::new(nsid, identity, blocks))),
                Some(old) if *old.identity() != identity => {
                    remove.push(nsid);
                    add.push(Arc::new(Namespace::new(nsid, identity, blocks)));
                }
                Some(old) if old.blocks() != blocks => resize.push((nsid, blocks)),
                Some(_) => {}
            },
            Probe::Absent => {
                if registry.get(nsid).is_some() {
                    remove.push(nsid);
                }
            }
            Probe::Failed(e) => {
                log::warn!("namespace {nsid}: probe failed, left as it was: {e}");
                report.failed.push(nsid);
            }
        }
    }
    if full {
        remove.extend(registry.nsids().into_iter().filter(|n| !probed.contains(n)));
    }
    for ns in registry.remove_batch(&remove) {
        report.removed.push(ns.nsid());
    }
    for ns in add {
        let nsid = ns.nsid();
        let result = match registry.insert(Arc::clone(&ns)) {
            Err(super::RegistryError::Occupied(_)) => registry.replace(ns).map(|_| ()),
            r => r,
        };
        match result {
            Ok(()) => report.added.push(nsid),
            Err(e) => log::warn!("namespace {nsid} not registered: {e}"),
        }
    }
    for (nsid, blocks) in resize {
        if registry.resize(nsid, blocks).is_ok() {
            report.resized.push(nsid);
        }
    }
}
