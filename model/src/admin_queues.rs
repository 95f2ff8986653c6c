//! Admin queue management: Create/Delete I/O Completion and Submission Queue.

use super::core::{Core, CtrlState};
use super::iommu::lookup;
use super::queues::{Cq, Sq};
use super::sqe::{Outcome, Sqe, Status, CQE_BYTES, SQE_BYTES};
use std::sync::{Mutex, MutexGuard};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The (SQ, CQ) counts the host may create, 0-based.
pub(super) fn granted(core: &Core, c: &CtrlState) -> (u16, u16) {
    let max = core.cfg.max_io_queue_pairs - 1;
    c.queues_granted.unwrap_or((max, max))
}

pub(super) fn queue_mapped(core: &Core, base: u64, bytes: u64) -> bool {
    lookup(&core.iommu.read(), base, bytes).is_some()
}

/// Checks the common fields of Create I/O SQ/CQ; returns (qid, entries).
fn check_create(
    core: &Core,
    c: &CtrlState,
    sqe: &Sqe,
    limit: u16,
    entry: u64,
) -> Result<(u16, u32), Status> {
    let qid = (sqe.cdw(10) & 0xFFFF) as u16;
    let entries = (sqe.cdw(10) >> 16) + 1;
    if qid == 0 || qid > limit + 1 {
        return Err(Status::INVALID_QID);
    }
    if entries < 2 || entries > core.cfg.max_queue_entries {
        return Err(Status::INVALID_QUEUE_SIZE);
    }
    if sqe.cdw(11) & 1 == 0 {
        return Err(Status::INVALID_FIELD); // CAP.CQR: queues must be physically contiguous
    }
    let base = sqe.prp1();
    if base == 0 || !base.is_multiple_of(c.page) {
        return Err(Status::INVALID_PRP_OFFSET);
    }
    if !queue_mapped(core, base, u64::from(entries) * entry) {
        return Err(Status::INVALID_FIELD);
    }
    Ok((qid, entries))
}

pub(super) fn create_cq(core: &Core, c: &CtrlState, sqe: &Sqe) -> Outcome {
    let (_, ncq) = granted(core, c);
    let (qid, entries) = match check_create(core, c, sqe, ncq, CQE_BYTES) {
        Ok(v) => v,
        Err(s) => return s.into(),
    };
    let ien = sqe.cdw(11) & 2 != 0;
    if ien && sqe.cdw(11) >> 16 != 0 {
        return Status::INVALID_INTERRUPT_VECTOR.into();
    }
    let Some(slot) = core.cqs.get(usize::from(qid)) else {
        return Status::INVALID_QID.into();
    };
    let mut g = lock(slot);
    if g.is_some() {
        return Status::INVALID_QID.into();
    }
    // The model reads the shadow CQ head whenever it polls: no CQ head MMIO needed.
    core.write_eventidx(2 * usize::from(qid) + 1, entries - 1);
    *g = Some(Cq::new(qid, sqe.prp1(), entries, core.cfg.seed));
    Outcome::ok(0)
}

pub(super) fn create_sq(core: &Core, c: &CtrlState, sqe: &Sqe) -> Outcome {
    let (nsq, _) = granted(core, c);
    let (qid, entries) = match check_create(core, c, sqe, nsq, SQE_BYTES as u64) {
        Ok(v) => v,
        Err(s) => return s.into(),
    };
    let cqid = (sqe.cdw(11) >> 16) as u16;
    let Some(slot) = core.sqs.get(usize::from(qid)) else {
        return Status::INVALID_QID.into();
    };
    let mut g = lock(slot);
    if g.is_some() {
        return Status::INVALID_QID.into();
    }
    if cqid == 0 {
        return Status::CQ_INVALID.into();
    }
    let Some(cq_slot) = core.cqs.get(usize::from(cqid)) else {
        return Status::CQ_INVALID.into();
    };
    let mut cq = lock(cq_slot);
    let Some(cq) = cq.as_mut() else {
        return Status::CQ_INVALID.into();
    };
    cq.sqs.push(qid);
    let sq = Sq::new(qid, cqid, sqe.prp1(), entries);
    core.sq_eventidx(&sq);
    *g = Some(sq);
    Outcome::ok(0)
}

pub(super) fn delete_sq(core: &Core, sqe: &Sqe) -> Outcome {
    let qid = (sqe.cdw(10) & 0xFFFF) as usize;
    let Some(slot) = core.sqs.get(qid).filter(|_| qid != 0) else {
        return Status::INVALID_QID.into();
    };
    let mut g = lock(slot);
    if core.cfg.fail_delete_sq && g.is_some() {
        return Status::INTERNAL_ERROR.into();
    }
    let Some(sq) = g.take() else {
        return Status::INVALID_QID.into();
    };
    // Commands of the queue that the device still held back are aborted with it.
    lock(&core.stalled).retain(|s| usize::from(s.qid) != qid);
    if let Some(cq) = core.cqs.get(usize::from(sq.cqid)) {
        if let Some(cq) = lock(cq).as_mut() {
            cq.sqs.retain(|&q| q != sq.qid);
        }
    }
    Outcome::ok(0)
}

pub(super) fn delete_cq(core: &Core, sqe: &Sqe) -> Outcome {
    let qid = (sqe.cdw(10) & 0xFFFF) as usize;
    let Some(slot) = core.cqs.get(qid).filter(|_| qid != 0) else {
        return Status::INVALID_QID.into();
    };
    let mut g = lock(slot);
    match g.as_ref() {
        None => Status::INVALID_QID.into(),
        Some(cq) if !cq.sqs.is_empty() => Status::INVALID_QUEUE_DELETION.into(),
        Some(_) => {
            *g = None;
            Outcome::ok(0)
        }
    }
}

pub(super) fn io_queues_exist(core: &Core) -> bool {
    core.sqs.iter().any(|s| lock(s).is_some()) || core.cqs.iter().skip(1).any(|q| lock(q).is_some())
}
