//! One target I/O queue: Read, Write and Flush capsules mapped onto a [`BackendQueue`],
//! with write data taken in-capsule or solicited by R2T (one R2T outstanding per command, at
//! most MAXH2CDATA each). A command's slot index is both its backend tag and its R2T transfer
//! tag, so nothing is looked up by the host's command identifier. Slots keep their last buffer
//! for the next command: the steady state allocates nothing.

use crate::backend::{BackendQueue, DsmRange, IoBuffer, IoOp, IoRequest};
use crate::command::*;
use crate::error::{BackendError, PduError};
use crate::export::Export;
use crate::pdu::H2cDataHeader;
use crate::tx::Tx;

/// NVM opcode: Flush.
pub const OPC_FLUSH: u8 = 0x00;
/// NVM opcode: Write.
pub const OPC_WRITE: u8 = 0x01;
/// NVM opcode: Read.
pub const OPC_READ: u8 = 0x02;
/// NVM opcode: Write Zeroes.
pub const OPC_WRITE_ZEROES: u8 = 0x08;
/// NVM opcode: Dataset Management.
pub const OPC_DSM: u8 = 0x09;
/// ONCS bit: Dataset Management.
pub const ONCS_DSM: u16 = 1 << 2;
/// ONCS bit: Write Zeroes.
pub const ONCS_WRITE_ZEROES: u16 = 1 << 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    /// A write waiting for H2CData.
    AwaitData,
    /// Submitted to the backend.
    InBackend,
}

#[derive(Debug)]
struct Slot<B> {
    state: State,
    cid: u16,
    req: IoRequest,
    len: u32,
    received: u32,
    solicited: u32,
    buf: Option<B>,
    spare: Option<B>,
}

/// One I/O queue's commands in flight.
pub struct IoQueue<Q: BackendQueue> {
    q: Q,
    slots: Box<[Slot<Q::Buf>]>,
    free: Vec<u16>,
    maxh2cdata: u32,
    /// (nsid, blocks) of every exported namespace, for the Dataset Management ranges.
    sizes: Box<[(u32, u64)]>,
}

impl<Q: BackendQueue> IoQueue<Q> {
    /// A queue of `size` commands over `q`, for the namespaces of `export`.
    pub fn new(q: Q, size: u16, export: &Export) -> Self {
        let slots = (0..size)
            .map(|_| Slot {
                state: State::Free,
                cid: 0,
                req: IoRequest {
                    op: IoOp::Flush,
                    nsid: 0,
                    lba: 0,
                    blocks: 0,
                    tag: 0,
                },
                len: 0,
                received: 0,
                solicited: 0,
                buf: None,
                spare: None,
            })
            .collect();
        IoQueue {
            q,
            slots,
            free: (0..size).rev().collect(),
            maxh2cdata: export.config.maxh2cdata,
            sizes: export
                .namespaces
                .iter()
                .map(|n| (n.nsid, n.blocks))
                .collect(),
        }
    }

    /// Commands the queue holds (waiting for data or in the backend).
    pub fn busy(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Takes one command capsule; errors in the command are answered with a status, only
    /// transport violations return an error.
    pub fn command(
        &mut self,
        sqe: Sqe<'_>,
        data: &[u8],
        export: &Export,
        tx: &mut Tx,
    ) -> Result<(), PduError> {
        let cid = sqe.cid();
        let op = match sqe.opcode() {
            OPC_READ => IoOp::Read,
            OPC_WRITE => IoOp::Write,
            OPC_FLUSH => IoOp::Flush,
            OPC_WRITE_ZEROES if export.oncs & ONCS_WRITE_ZEROES != 0 => IoOp::WriteZeroes,
            OPC_DSM if export.oncs & ONCS_DSM != 0 => IoOp::Deallocate,
            _ => {
                tx.respond(cid, SC_INVALID_OPCODE, 0);
                return Ok(());
            }
        };
        let Some(ns) = export.namespace(sqe.nsid()) else {
            tx.respond(cid, SC_INVALID_NS, 0);
            return Ok(());
        };
        // (lba, blocks, bytes of data either way); Dataset Management: (CDW11, ranges, bytes).
        let (lba, blocks, len) = match op {
            IoOp::Flush => (0, 0, 0),
            IoOp::Deallocate => {
                // Linux sends room for all 256 ranges (4 KiB) whatever NR says: take any length
                // from NR's ranges up to that.
                let ranges = (sqe.cdw(10) & 0xff) + 1;
                let bytes = sqe.sgl().length;
                if bytes < ranges * 16 || bytes > 4096 {
                    tx.respond(cid, SC_SGL_LENGTH_INVALID, 0);
                    return Ok(());
                }
                (sqe.cdw(11).into(), ranges, bytes)
            }
            _ => {
                let (lba, blocks) = (sqe.cdw10_11(), (sqe.cdw(12) & 0xffff) + 1);
                let end = lba.checked_add(blocks.into());
                if end.is_none_or(|end| end > ns.blocks) {
                    tx.respond(cid, SC_LBA_OUT_OF_RANGE, 0);
                    return Ok(());
                }
                let len = if op == IoOp::WriteZeroes {
                    0
                } else {
                    blocks << ns.lba_shift
                };
                if len > export.max_transfer() {
                    tx.respond(cid, SC_INVALID_FIELD, 0);
                    return Ok(());
                }
                (lba, blocks, len)
            }
        };
        let host_data = matches!(op, IoOp::Write | IoOp::Deallocate);
        let sgl = sqe.sgl();
        let in_capsule = sgl.kind == SGL_DATA_BLOCK_OFFSET;
        let sgl_ok = match op {
            IoOp::Flush | IoOp::WriteZeroes => data.is_empty() && sgl.length == 0,
            IoOp::Read => sgl.kind == SGL_TRANSPORT && sgl.length == len && data.is_empty(),
            _ if in_capsule => sgl.address == 0 && sgl.length == len && data.len() == len as usize,
            _ => sgl.kind == SGL_TRANSPORT && sgl.length == len && data.is_empty(),
        };
        if !sgl_ok {
            tx.respond(cid, SC_SGL_LENGTH_INVALID, 0);
            return Ok(());
        }
        let Some(tag) = self.free.pop() else {
            log::warn!(
                "queue {}: command {cid:#x} beyond the queue size the host connected with",
                tx.sqid
            );
            tx.respond(cid, SC_INTERNAL, 0);
            return Ok(());
        };
        let req = IoRequest {
            op,
            nsid: ns.nsid,
            lba,
            blocks,
            tag,
        };
        let buf = if len == 0 {
            None
        } else {
            match self.buffer(tag, len as usize) {
                Ok(b) => Some(b),
                Err(e) => {
                    log::warn!("queue {}: {e}", tx.sqid);
                    self.free.push(tag);
                    tx.respond(cid, SC_INTERNAL, 0);
                    return Ok(());
                }
            }
        };
        let s = &mut self.slots[usize::from(tag)];
        s.cid = cid;
        s.req = req;
        s.len = len;
        s.received = 0;
        s.buf = buf;
        if host_data && !in_capsule {
            s.state = State::AwaitData;
            s.solicited = len.min(self.maxh2cdata);
            tx.r2t(cid, tag, 0, s.solicited);
            return Ok(());
        }
        if host_data {
            if let Some(b) = s.buf.as_mut() {
                b.bytes_mut().copy_from_slice(data);
            }
        }
        self.submit(tag, tx);
        Ok(())
    }

    /// A buffer for `len` bytes: the slot's last one if large enough, else a new one.
    fn buffer(&mut self, tag: u16, len: usize) -> Result<Q::Buf, BackendError> {
        if let Some(mut b) = self.slots[usize::from(tag)].spare.take() {
            if b.set_len(len) {
                return Ok(b);
            }
        }
        self.q.alloc(len)
    }

    fn submit(&mut self, tag: u16, tx: &mut Tx) {
        let s = &mut self.slots[usize::from(tag)];
        if s.req.op == IoOp::Deallocate {
            return self.deallocate(tag, tx);
        }
        match self.q.submit(s.req, s.buf.take()) {
            Ok(()) => s.state = State::InBackend,
            Err((status, buf)) => {
                s.spare = buf;
                s.state = State::Free;
                tx.respond(s.cid, status, 0);
                self.free.push(tag);
            }
        }
    }

    /// Dataset Management: the ranges from the slot's buffer (kept as its spare), each checked
    /// against the namespace; only the deallocate attribute (AD) does anything.
    fn deallocate(&mut self, tag: u16, tx: &mut Tx) {
        let sizes = &self.sizes;
        let s = &mut self.slots[usize::from(tag)];
        s.spare = s.buf.take();
        let mut ranges = [DsmRange::default(); 256];
        let n = s.req.blocks as usize;
        let mut status = SC_SUCCESS;
        if let Some(b) = s.spare.as_ref() {
            for (r, raw) in ranges.iter_mut().zip(b.bytes().chunks_exact(16)).take(n) {
                let u32_at =
                    |o: usize| u32::from_le_bytes([raw[o], raw[o + 1], raw[o + 2], raw[o + 3]]);
                r.attributes = u32_at(0);
                r.blocks = u32_at(4);
                r.slba = u64::from(u32_at(8)) | (u64::from(u32_at(12)) << 32);
                let end = r.slba.checked_add(r.blocks.into());
                let size = sizes
                    .iter()
                    .find(|(id, _)| *id == s.req.nsid)
                    .map_or(0, |z| z.1);
                if end.is_none_or(|end| end > size) {
                    status = SC_LBA_OUT_OF_RANGE;
                }
            }
        }
        let ad = s.req.lba & (1 << 2) != 0;
        if status == SC_SUCCESS && ad {
            match self.q.deallocate(s.req.nsid, &ranges[..n], tag) {
                Ok(()) => {
                    s.state = State::InBackend;
                    return;
                }
                Err(e) => status = e,
            }
        }
        s.state = State::Free;
        tx.respond(s.cid, status, 0);
        self.free.push(tag);
    }

    /// Takes H2CData for a write this queue sent an R2T for.
    pub fn h2c_data(
        &mut self,
        h: &H2cDataHeader,
        data: &[u8],
        tx: &mut Tx,
    ) -> Result<(), PduError> {
        let s = match self.slots.get_mut(usize::from(h.ttag)) {
            Some(s) if s.state == State::AwaitData && s.cid == h.cccid => s,
            _ => {
                return Err(PduError::Sequence {
                    what: "H2CData",
                    why: "its transfer tag and command identifier match no R2T outstanding",
                })
            }
        };
        let end = u64::from(h.datao) + data.len() as u64;
        if h.datao != s.received || end > u64::from(s.solicited) {
            return Err(PduError::OutOfRange {
                cid: h.cccid,
                offset: h.datao,
                end,
                limit: s.solicited,
            });
        }
        if let Some(b) = s.buf.as_mut() {
            b.bytes_mut()[h.datao as usize..end as usize].copy_from_slice(data);
        }
        s.received = end as u32;
        if s.received < s.solicited {
            return Ok(());
        }
        if s.received < s.len {
            s.solicited = s.len.min(s.received.saturating_add(self.maxh2cdata));
            let (cid, off, n) = (s.cid, s.received, s.solicited - s.received);
            tx.r2t(cid, h.ttag, off, n);
            return Ok(());
        }
        self.submit(h.ttag, tx);
        Ok(())
    }

    /// Sends what was submitted since the last commit.
    pub fn commit(&mut self) {
        self.q.commit();
    }

    /// Delivers up to `max` finished commands as C2HData and response capsules.
    pub fn poll(&mut self, max: usize, tx: &mut Tx) -> usize {
        let slots = &mut self.slots;
        let free = &mut self.free;
        self.q.poll(max, &mut |done| {
            let Some(s) = slots.get_mut(usize::from(done.tag)) else {
                return;
            };
            if done.status == SC_SUCCESS && s.req.op == IoOp::Read {
                match &done.buffer {
                    Some(b) => tx.data(s.cid, b.bytes()),
                    None => {
                        tx.respond(s.cid, SC_DATA_TRANSFER_ERROR, 0);
                        s.state = State::Free;
                        free.push(done.tag);
                        return;
                    }
                }
            }
            tx.respond(s.cid, done.status, 0);
            if done.buffer.is_some() {
                s.spare = done.buffer;
            }
            s.state = State::Free;
            free.push(done.tag);
        })
    }

    /// Ends the writes still waiting for data (the queue is going away): each answered with
    /// "aborted due to SQ deletion". Returns how many.
    pub fn abort_waiting(&mut self, tx: &mut Tx) -> usize {
        let mut n = 0;
        for (i, s) in self.slots.iter_mut().enumerate() {
            if s.state == State::AwaitData {
                tx.respond(s.cid, SC_ABORTED_SQ_DELETION, 0);
                s.spare = s.buf.take();
                s.state = State::Free;
                self.free.push(i as u16);
                n += 1;
            }
        }
        n
    }
}
