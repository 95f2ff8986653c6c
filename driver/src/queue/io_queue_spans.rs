//! The out-of-line side of [`IoQueue`]'s reads and writes: requests split at MDTS, lists of
//! spans (iovecs), and SGLs. A plain read or write that fits one command never comes here
//! (`submit_rw` builds it in place); this path takes the rest, with no allocation: PRP lists
//! and SGL segments go in each command's tracker page.

use super::{IoQueue, Rw, Split};
use crate::error::{PrpError, SubmitError};
use crate::queue::prp::{self, ListBuilder};
use crate::queue::request::{not_rw, Data, Request};
use crate::queue::sgl::SglBuilder;
use crate::queue::spans::Cursor;
use crate::spec::{Command, Status};
use vfnvme_hal::{DmaBuffer, DmaSpan};

impl<T: Copy + Default> IoQueue<T> {
    /// Queues a read or write that does not go through the one-command path: on a list of
    /// spans, or with metadata (split per `split`; one buffer: with PRPs, or with one SGL Data
    /// Block per command when `split.sgl`).
    #[inline(never)]
    pub(super) fn submit_described(
        &mut self,
        req: Request<'_, T>,
        split: Split,
    ) -> Result<u16, SubmitError> {
        let rw = Rw {
            nsid: req.nsid,
            opcode: req.op.opcode(),
            lba: req.lba,
            blocks: req.blocks,
        };
        let tag = req.tag;
        match req.data {
            Data::Owned(b) => self.submit_split(rw, split, Some(b.iova()), Some(b), tag),
            Data::Span(s) => self.submit_split(rw, split, Some(s.iova()), None, tag),
            Data::Spans(spans) => self.submit_spans(rw, split, spans, None, tag),
            Data::None | Data::Ranges(_) => Err(SubmitError::new(not_rw(req.op), None)),
        }
    }

    /// Queues `rw` on `spans` (moved in order) as commands of at most `split.per_cmd` blocks,
    /// each taking its part of the list: with PRPs when they can describe the list and the
    /// queue pair does not prefer SGLs, else with SGLs if the controller has them; refused
    /// otherwise, saying why ([`SubmitErrorKind::NotPrpDescribable`]). `buf`, if any, is kept
    /// until the completion.
    fn submit_spans(
        &mut self,
        rw: Rw,
        split: Split,
        spans: &[DmaSpan],
        buf: Option<DmaBuffer>,
        tag: T,
    ) -> Result<u16, SubmitError> {
        let Split {
            per_cmd,
            elem,
            metadata,
            sgl: _,
        } = split;
        let total = u64::from(rw.blocks) * elem;
        let use_sgl = match prp::describable(spans, total) {
            _ if self.prefer_sgl => true,
            Ok(()) => false,
            Err(_) if self.sgl.supported() => true,
            Err(kind) => return Err(SubmitError::new(kind, buf)),
        };
        if use_sgl {
            let support = self.sgl;
            for (index, iova, len) in crate::queue::spans::pieces(spans, total) {
                if let Err(kind) = support.check_piece(index, iova, len) {
                    return Err(SubmitError::new(kind, buf));
                }
            }
        }
        let needed = rw.blocks.div_ceil(per_cmd) as usize;
        if let Err(kind) = self.room_for(needed) {
            return Err(SubmitError::new(kind, buf));
        }
        let start_tail = self.rings.sq_tail();
        let mut cursor = Cursor::new(spans);
        let mut head = u16::MAX;
        let mut done: u32 = 0;
        while done < rw.blocks {
            let n = (rw.blocks - done).min(per_cmd);
            // Cannot fail: `needed` trackers are free.
            let Some((idx, t)) = self.trackers.alloc_mut() else {
                break;
            };
            if head == u16::MAX {
                head = idx;
            }
            t.parent = head;
            let mut cmd = Command::rw_n(rw.opcode, rw.nsid, rw.lba + u64::from(done), n);
            cmd.set_cid(t.cid);
            if let Some(f) = &metadata {
                f.apply(&mut cmd, done);
            }
            let bytes = (u64::from(n) * elem) as usize;
            let list_iova = t.prp_list.iova();
            let list = t.prp_list.as_mut_slice();
            let built = if use_sgl {
                describe_sgl(&mut cursor, bytes, list, list_iova, &mut cmd)
            } else {
                describe_prps(&mut cursor, bytes, list, list_iova, &mut cmd)
            };
            if let Err(e) = built {
                self.rollback(head, start_tail);
                return Err(SubmitError::new(e.into(), buf));
            }
            self.rings.push(&cmd);
            done += n;
        }
        if let Some(h) = self.trackers.get_mut(head) {
            h.remaining = needed as u16;
            h.status = Status::SUCCESS;
            h.tag = tag;
            h.set_buffer(buf);
        }
        Ok(head)
    }
}

/// The SGL of the command moving the next `bytes` bytes at `cursor`, into `cmd` (its
/// segment, if it needs one, in `list`, the tracker's page at `list_iova`).
fn describe_sgl(
    cursor: &mut Cursor<'_>,
    bytes: usize,
    list: &mut [u8],
    list_iova: u64,
    cmd: &mut Command,
) -> Result<(), PrpError> {
    let mut sgl = SglBuilder::new(list);
    cursor.take(bytes, PrpError::Empty, |_, iova, len| sgl.push(iova, len))?;
    let (addr, len, id) = sgl.finish(list_iova)?;
    cmd.set_sgl(addr, len, id);
    Ok(())
}

/// The PRPs of the command moving the next `bytes` bytes at `cursor` (a list
/// [`prp::describable`] accepted), into `cmd` (its PRP list, if it needs one, in `list`).
fn describe_prps(
    cursor: &mut Cursor<'_>,
    bytes: usize,
    list: &mut [u8],
    list_iova: u64,
    cmd: &mut Command,
) -> Result<(), PrpError> {
    let mut prps = ListBuilder::new(list);
    cursor.take(bytes, PrpError::Empty, |_, iova, len| prps.push(iova, len))?;
    let (prp1, prp2) = prps.finish(list_iova)?;
    cmd.set_prps(prp1, prp2);
    Ok(())
}
