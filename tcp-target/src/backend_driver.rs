//! [`Backend`] over one vfnvme [`Controller`]: its namespaces exported under their own nsids,
//! one [`QueuePair`] per target I/O queue, data in the controller's DMA buffers. Works on any
//! platform: VFIO for real controllers, the in-memory model (`vfnvme_model::ModelPlatform`)
//! in host tests and `vfnvme serve --model`.

use crate::backend::{
    Backend, BackendQueue, DsmRange, ExportedNamespace, IoBuffer, IoDone, IoOp, IoRequest,
};
use crate::command::{SC_INTERNAL, SC_INVALID_NS, SC_LBA_OUT_OF_RANGE};
use crate::error::BackendError;
use std::sync::Arc;
use vfnvme::hal::DmaBuffer;
use vfnvme::platform::Platform;
use vfnvme::{Controller, Namespace, QpairOptions, QueuePair, SubmitErrorKind};

/// One controller's namespaces as a [`Backend`].
pub struct ControllerBackend<P: Platform> {
    ctrl: Arc<Controller<P>>,
    exported: Vec<ExportedNamespace>,
    /// The driver's namespaces, in the order of `exported`.
    namespaces: Arc<[Arc<Namespace>]>,
}

impl<P: Platform> ControllerBackend<P> {
    /// Exports the namespaces of `ctrl` listed in `nsids` (all active ones that take I/O
    /// without metadata when `None`). Namespaces formatted with metadata are refused: the
    /// NVMe/TCP host sends none.
    pub fn new(ctrl: Arc<Controller<P>>, nsids: Option<&[u32]>) -> Result<Self, String> {
        let mut list: Vec<Arc<Namespace>> = match nsids {
            Some(ids) => ids
                .iter()
                .map(|&id| {
                    ctrl.namespace(id).ok_or_else(|| {
                        format!(
                            "namespace {id} is not active on the controller (see `vfnvme list-ns`)"
                        )
                    })
                })
                .collect::<Result<_, _>>()?,
            None => ctrl.namespaces(),
        };
        list.sort_by_key(|ns| ns.nsid());
        let mut exported = Vec::new();
        let mut kept = Vec::new();
        for ns in list {
            let id = ns.identity();
            if id.metadata_size != 0 || !id.io_supported() {
                let msg = format!(
                    "namespace {} has {} bytes of metadata per block: NVMe/TCP hosts send none; format it without metadata (`vfnvme format -n {} --lbaf N`)",
                    ns.nsid(),
                    id.metadata_size,
                    ns.nsid()
                );
                if nsids.is_some() {
                    return Err(msg);
                }
                log::warn!("not exported: {msg}");
                continue;
            }
            exported.push(ExportedNamespace {
                nsid: ns.nsid(),
                lba_shift: ns.lba_shift(),
                blocks: ns.blocks(),
                nguid: nguid_of(&ctrl, &ns),
            });
            kept.push(ns);
        }
        if exported.is_empty() {
            return Err("the controller has no namespace to export".into());
        }
        Ok(ControllerBackend {
            ctrl,
            exported,
            namespaces: kept.into(),
        })
    }

    /// The controller.
    pub fn controller(&self) -> &Arc<Controller<P>> {
        &self.ctrl
    }
}

/// The namespace's NGUID, else its EUI64 widened, else one made from the controller's serial
/// and the nsid (stable across runs, distinct per namespace).
fn nguid_of<P: Platform>(ctrl: &Controller<P>, ns: &Namespace) -> [u8; 16] {
    let id = ns.identity();
    if id.nguid != [0; 16] {
        return id.nguid;
    }
    let mut g = [0u8; 16];
    if id.eui64 != [0; 8] {
        g[..8].copy_from_slice(&id.eui64);
        return g;
    }
    let h = crate::digest::crc32c(ctrl.identify().serial().as_bytes());
    g[0] = 0x76; // 'v'
    g[4..8].copy_from_slice(&h.to_be_bytes());
    g[12..16].copy_from_slice(&ns.nsid().to_be_bytes());
    g
}

impl<P: Platform> Backend for ControllerBackend<P> {
    type Queue = ControllerQueue<P>;

    fn namespaces(&self) -> &[ExportedNamespace] {
        &self.exported
    }

    fn open_queue(&self, depth: u32) -> Result<ControllerQueue<P>, BackendError> {
        let max = self.ctrl.identify().max_queue_depth;
        let qp = self
            .ctrl
            .alloc_qpair_with_payload::<u16>(QpairOptions {
                depth: (depth + 1).min(max).max(2),
                ..QpairOptions::default()
            })
            .map_err(|e| BackendError::Queue(e.to_string()))?;
        Ok(ControllerQueue {
            qp,
            ctrl: self.ctrl.clone(),
            exported: self.exported.iter().map(|n| n.nsid).collect(),
            namespaces: self.namespaces.clone(),
        })
    }

    fn max_transfer(&self) -> usize {
        self.ctrl.identify().max_transfer_bytes
    }

    fn max_queue_size(&self) -> u16 {
        // A queue pair of depth d holds d − 1 commands, at most MAX_IN_FLIGHT.
        let depth = self.ctrl.identify().max_queue_depth.saturating_sub(1);
        let most = depth.min(vfnvme::queue::MAX_IN_FLIGHT as u32);
        u16::try_from(most).unwrap_or(u16::MAX)
    }

    fn oncs(&self) -> u16 {
        // Dataset Management (bit 2) and Write Zeroes (bit 3) when the controller has them.
        self.ctrl.identify().identify.oncs & 0x000C
    }

    fn poll_admin(&self) {
        if let Err(e) = self.ctrl.process_admin_completions() {
            log::debug!("admin completions: {e}");
        }
    }
}

/// One target I/O queue's [`QueuePair`].
pub struct ControllerQueue<P: Platform> {
    qp: QueuePair<P, u16>,
    ctrl: Arc<Controller<P>>,
    exported: Box<[u32]>,
    namespaces: Arc<[Arc<Namespace>]>,
}

impl IoBuffer for DmaBuffer {
    fn bytes(&self) -> &[u8] {
        self.as_slice()
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
    fn set_len(&mut self, len: usize) -> bool {
        DmaBuffer::set_len(self, len).is_ok()
    }
}

fn status_of(kind: &SubmitErrorKind) -> u16 {
    match kind {
        SubmitErrorKind::LbaOutOfRange { .. } => SC_LBA_OUT_OF_RANGE,
        SubmitErrorKind::NamespaceNotActive { .. } => SC_INVALID_NS,
        _ => SC_INTERNAL,
    }
}

impl<P: Platform> BackendQueue for ControllerQueue<P> {
    type Buf = DmaBuffer;

    fn alloc(&mut self, len: usize) -> Result<DmaBuffer, BackendError> {
        self.ctrl
            .dma()
            .alloc(len)
            .map_err(|e| BackendError::NoMemory {
                len,
                why: e.to_string(),
            })
    }

    fn submit(
        &mut self,
        req: IoRequest,
        buf: Option<DmaBuffer>,
    ) -> Result<(), (u16, Option<DmaBuffer>)> {
        let Ok(i) = self.exported.binary_search(&req.nsid) else {
            return Err((SC_INVALID_NS, buf));
        };
        let ns = &self.namespaces[i];
        let r = match (req.op, buf) {
            (IoOp::Read, Some(b)) => self.qp.read(ns, req.lba, req.blocks, b, req.tag),
            (IoOp::Write, Some(b)) => self.qp.write(ns, req.lba, req.blocks, b, req.tag),
            (IoOp::Flush, None) => self.qp.flush(ns, req.tag),
            (IoOp::WriteZeroes, None) => self.qp.write_zeroes(ns, req.lba, req.blocks, req.tag),
            (_, b) => return Err((SC_INTERNAL, b)),
        };
        r.map_err(|e| (status_of(&e.kind), e.buffer))
    }

    fn deallocate(&mut self, nsid: u32, ranges: &[DsmRange], tag: u16) -> Result<(), u16> {
        let Ok(i) = self.exported.binary_search(&nsid) else {
            return Err(SC_INVALID_NS);
        };
        self.qp
            .deallocate(&self.namespaces[i], ranges, tag)
            .map_err(|e| status_of(&e.kind))
    }

    fn commit(&mut self) {
        self.qp.commit();
    }

    fn poll(&mut self, max: usize, f: &mut dyn FnMut(IoDone<DmaBuffer>)) -> usize {
        self.qp.poll(max, |c| {
            f(IoDone {
                tag: c.tag,
                status: c.status.field(),
                buffer: c.buffer,
            })
        })
    }

    fn outstanding(&self) -> usize {
        self.qp.outstanding()
    }
}
