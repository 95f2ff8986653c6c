//! [`Backend`] over vfnvme multipath heads: each head of a [`Subsystem`] exported under its
//! nsid, one [`IoChannel`] per head per target I/O queue (opened on first use), so a request
//! fails over between the head's paths as the driver decides; the host sees one namespace.
//! Data moves in the subsystem's shared DMA pool.

use crate::backend::{AnaState, Backend, BackendQueue, ExportedNamespace, IoDone, IoOp, IoRequest};
use crate::command::{SC_INTERNAL, SC_INVALID_NS, SC_LBA_OUT_OF_RANGE};
use crate::error::BackendError;
use std::sync::Arc;
use vfnvme::hal::DmaBuffer;
use vfnvme::multipath::{
    ChannelError, ChannelOptions, Head, IoChannel, PathState, Subsystem, UniqueId,
};
use vfnvme::platform::Platform;
use vfnvme::{QpairOptions, SubmitErrorKind};

/// Status for a request no path could take (SCT 3h, "asymmetric access inaccessible"): the
/// host's multipath retries it on another target port.
const SC_PATH_INACCESSIBLE: u16 = 0x0302;

/// The heads of one multipath subsystem as a [`Backend`].
pub struct HeadBackend<P: Platform> {
    subsystem: Arc<Subsystem<P>>,
    heads: Arc<[Arc<Head>]>,
    exported: Vec<ExportedNamespace>,
    max_transfer: usize,
    max_queue: u16,
}

impl<P: Platform> HeadBackend<P> {
    /// Exports the heads of `subsystem` listed in `nsids` (every head without metadata when
    /// `None`). Refuses a head with metadata and an nsid with more than one head (different
    /// identifiers on different controllers).
    pub fn new(subsystem: Arc<Subsystem<P>>, nsids: Option<&[u32]>) -> Result<Self, String> {
        let mut heads: Vec<Arc<Head>> = match nsids {
            Some(ids) => ids
                .iter()
                .map(|&id| {
                    let hs = subsystem.heads_for(id);
                    match hs.len() {
                        1 => Ok(hs[0].clone()),
                        0 => Err(format!("no multipath head with nsid {id} (see `vfnvme list --subsystems`)")),
                        n => Err(format!("nsid {id} has {n} heads (different identifiers per controller): export it from one controller instead")),
                    }
                })
                .collect::<Result<_, _>>()?,
            None => subsystem.heads(),
        };
        heads.sort_by_key(|h| h.nsid());
        heads.dedup_by_key(|h| h.nsid());
        let mut exported = Vec::new();
        let mut kept = Vec::new();
        for head in heads {
            let paths = head.paths();
            let Some(ns) = paths.paths.first().map(|p| p.namespace.clone()) else {
                log::warn!("head {}: no path; not exported", head.nsid());
                continue;
            };
            if ns.identity().metadata_size != 0 {
                let msg = format!(
                    "head {} has metadata: NVMe/TCP hosts send none",
                    head.nsid()
                );
                if nsids.is_some() {
                    return Err(msg);
                }
                log::warn!("not exported: {msg}");
                continue;
            }
            let mut nguid = [0u8; 16];
            match head.unique_id() {
                UniqueId::Nguid(g) | UniqueId::Uuid(g) => nguid = g,
                UniqueId::Eui64(e) => nguid[..8].copy_from_slice(&e),
                UniqueId::SharedNsid | UniqueId::Unidentified(_) => {
                    let h = crate::digest::crc32c(subsystem.nqn().as_bytes());
                    nguid[0] = 0x76;
                    nguid[4..8].copy_from_slice(&h.to_be_bytes());
                    nguid[12..16].copy_from_slice(&head.nsid().to_be_bytes());
                }
            }
            exported.push(ExportedNamespace {
                nsid: head.nsid(),
                lba_shift: ns.lba_shift(),
                blocks: ns.blocks(),
                nguid,
            });
            kept.push(head);
        }
        if exported.is_empty() {
            return Err("the subsystem has no head to export".into());
        }
        let ctrls = subsystem.controllers();
        let max_transfer = ctrls
            .iter()
            .map(|(_, c, _)| c.identify().max_transfer_bytes)
            .min()
            .unwrap_or(4096);
        let depth = ctrls
            .iter()
            .map(|(_, c, _)| c.identify().max_queue_depth)
            .min()
            .unwrap_or(2);
        let most = depth
            .saturating_sub(1)
            .min(vfnvme::queue::MAX_IN_FLIGHT as u32);
        Ok(HeadBackend {
            subsystem,
            heads: kept.into(),
            exported,
            max_transfer,
            max_queue: u16::try_from(most).unwrap_or(u16::MAX),
        })
    }
}

impl<P: Platform> Backend for HeadBackend<P> {
    type Queue = HeadQueue<P>;

    fn namespaces(&self) -> &[ExportedNamespace] {
        &self.exported
    }

    fn open_queue(&self, depth: u32) -> Result<HeadQueue<P>, BackendError> {
        let pool = self
            .subsystem
            .controllers()
            .first()
            .map(|(_, c, _)| c.dma().clone())
            .ok_or_else(|| BackendError::Queue("the subsystem has no controller left".into()))?;
        Ok(HeadQueue {
            subsystem: self.subsystem.clone(),
            heads: self.heads.clone(),
            nsids: self.exported.iter().map(|n| n.nsid).collect(),
            channels: (0..self.heads.len()).map(|_| None).collect(),
            options: ChannelOptions {
                qpair: QpairOptions {
                    depth: depth + 1,
                    ..QpairOptions::default()
                },
                capacity: depth as usize,
                numa_node: None,
            },
            pool,
            outstanding: 0,
        })
    }

    fn max_transfer(&self) -> usize {
        self.max_transfer
    }

    fn max_queue_size(&self) -> u16 {
        self.max_queue
    }

    fn poll_admin(&self) {
        let _ = self.subsystem.poll();
    }

    fn ana_state(&self, nsid: u32) -> AnaState {
        let Ok(i) = self.exported.binary_search_by_key(&nsid, |n| n.nsid) else {
            return AnaState::PersistentLoss;
        };
        let paths = self.heads[i].paths();
        let has = |st: PathState| paths.paths.iter().any(|p| p.state == st);
        if has(PathState::Optimized) {
            AnaState::Optimized
        } else if has(PathState::NonOptimized) {
            AnaState::NonOptimized
        } else if has(PathState::Change) {
            AnaState::Change
        } else if has(PathState::Inaccessible) {
            AnaState::Inaccessible
        } else {
            AnaState::PersistentLoss
        }
    }
}

/// One target I/O queue's channels, one per head.
pub struct HeadQueue<P: Platform> {
    subsystem: Arc<Subsystem<P>>,
    heads: Arc<[Arc<Head>]>,
    nsids: Box<[u32]>,
    channels: Vec<Option<IoChannel<P>>>,
    options: ChannelOptions,
    pool: vfnvme::hal::DmaPool,
    outstanding: usize,
}

fn status_of(e: &ChannelError) -> u16 {
    match e {
        ChannelError::Device { status } => status.field(),
        ChannelError::Refused(SubmitErrorKind::LbaOutOfRange { .. }) => SC_LBA_OUT_OF_RANGE,
        ChannelError::HeadRemoved { .. } => SC_INVALID_NS,
        ChannelError::NoPath { .. }
        | ChannelError::QueueingOff { .. }
        | ChannelError::NoPathTimeout { .. } => SC_PATH_INACCESSIBLE,
        _ => SC_INTERNAL,
    }
}

impl<P: Platform> BackendQueue for HeadQueue<P> {
    type Buf = DmaBuffer;

    fn alloc(&mut self, len: usize) -> Result<DmaBuffer, BackendError> {
        self.pool.alloc(len).map_err(|e| BackendError::NoMemory {
            len,
            why: e.to_string(),
        })
    }

    fn submit(
        &mut self,
        req: IoRequest,
        buf: Option<DmaBuffer>,
    ) -> Result<(), (u16, Option<DmaBuffer>)> {
        let Ok(i) = self.nsids.binary_search(&req.nsid) else {
            return Err((SC_INVALID_NS, buf));
        };
        if self.channels[i].is_none() {
            match IoChannel::open(
                self.subsystem.clone(),
                self.heads[i].clone(),
                self.options.clone(),
            ) {
                Ok(ch) => self.channels[i] = Some(ch),
                Err(e) => {
                    log::warn!("head {}: could not open an I/O channel: {e}", req.nsid);
                    return Err((SC_INTERNAL, buf));
                }
            }
        }
        let Some(ch) = self.channels[i].as_mut() else {
            return Err((SC_INTERNAL, buf));
        };
        let tag = u64::from(req.tag);
        let r = match (req.op, buf) {
            (IoOp::Read, Some(b)) => ch.read(req.lba, req.blocks, b, tag),
            (IoOp::Write, Some(b)) => ch.write(req.lba, req.blocks, b, tag),
            (IoOp::Flush, None) => ch.flush(tag),
            (_, b) => return Err((SC_INTERNAL, b)),
        };
        match r {
            Ok(()) => {
                self.outstanding += 1;
                Ok(())
            }
            Err(e) => Err((status_of(&e.error), e.buffer)),
        }
    }

    fn commit(&mut self) {
        for ch in self.channels.iter_mut().flatten() {
            ch.commit();
        }
    }

    fn poll(&mut self, max: usize, f: &mut dyn FnMut(IoDone<DmaBuffer>)) -> usize {
        let mut n = 0;
        for ch in self.channels.iter_mut().flatten() {
            if n >= max {
                break;
            }
            n += ch.poll(max - n, |c| {
                f(IoDone {
                    tag: c.tag as u16,
                    status: c.result.as_ref().err().map_or(0, status_of),
                    buffer: c.buffer,
                })
            });
        }
        self.outstanding -= n.min(self.outstanding);
        n
    }

    fn outstanding(&self) -> usize {
        self.outstanding
    }
}
