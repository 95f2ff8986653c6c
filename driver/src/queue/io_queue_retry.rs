//! The retry side of [`IoQueue`] (see `queue/retry.rs`): a failed command sent again, and the
//! commands of a reset controller sent again once their queue exists anew. Control path only.

use super::{IoCompletion, IoQueue};
use crate::queue::retry::RetryBook;
use crate::queue::tracker::{Completed, ABORT_SENT, ENDED};
use crate::spec::Status;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

impl<T: Copy + Default> IoQueue<T> {
    /// Turns retries on: each command is sent again at most `limit` times (0 turns them
    /// off), counted on this queue and in `controller_count`. Allocates a copy slot per tracker.
    pub(crate) fn enable_retries(&mut self, limit: u8, controller_count: Arc<AtomicU64>) {
        self.retry = (limit > 0).then(|| {
            Box::new(RetryBook::new(
                self.trackers.capacity(),
                limit,
                controller_count,
            ))
        });
    }

    /// Keeps a copy of every command queued since the last SQ doorbell (read back from the
    /// ring, where the controller has not looked yet), for its retries. A command already kept
    /// (one sent again) keeps its retry count; a new one starts at 0.
    #[cold]
    #[inline(never)]
    pub(super) fn save_unrung(&mut self) {
        let Some(r) = self.retry.as_deref_mut() else {
            return;
        };
        for k in 0..self.rings.sq_unrung() {
            let cmd = self.rings.unrung_command(k);
            if let Some(idx) = self.trackers.busy_index(cmd.cid()) {
                r.save(idx, &cmd);
            }
        }
    }

    /// Whether retries are on.
    pub(crate) fn retries_enabled(&self) -> bool {
        self.retry.is_some()
    }

    /// Commands sent again on this queue so far.
    pub fn retries(&self) -> u64 {
        self.retry.as_ref().map_or(0, |r| r.count())
    }

    /// Command `cid` completed with the error status `field`: sends it again if the status
    /// allows it (DNR = 0), no Abort went out for it and it has retries left. Returns whether it
    /// was sent again (the completion is then consumed).
    fn retry_failed(&mut self, cid: u16, field: u16) -> bool {
        let status = Status::from_field(field);
        if status.dnr() {
            return false;
        }
        let Some(idx) = self.trackers.busy_index(cid) else {
            return false;
        };
        let aborted = self
            .trackers
            .get(idx)
            .is_some_and(|t| t.busy & ABORT_SENT != 0);
        let Some(r) = self.retry.as_deref_mut() else {
            return false;
        };
        if aborted || !r.may_retry(idx) {
            return false;
        }
        let new_cid = self.trackers.renew(idx);
        let Some(cmd) = r.take(idx, new_cid) else {
            return false;
        };
        log::debug!("command {cid} failed with {status}; sent again as {new_cid}");
        self.rings.push(&cmd);
        true
    }

    /// Command `cid` failed with `field`: sends it again if retries are on and allow it
    /// ([`Self::retry_failed`]), or else records the error and returns the completion if that
    /// ended its request.
    #[cold]
    #[inline(never)]
    pub(super) fn end_failed(
        &mut self,
        cid: u16,
        field: u16,
        cdw0: u32,
    ) -> Option<IoCompletion<T>> {
        if self.retry.is_some() && self.retry_failed(cid, field) {
            return None;
        }
        match self.trackers.complete(cid, field, cdw0) {
            Completed::Done {
                tag,
                status,
                cdw0,
                slot,
                buffer,
            } => Some(IoCompletion {
                tag,
                status,
                cdw0,
                slot,
                buffer,
                memory_held: false,
            }),
            Completed::Pending => None,
            Completed::Unknown => {
                self.spurious_completion(cid);
                None
            }
        }
    }

    /// After a reset disabled the controller and this queue was created again (its rings are
    /// reset here): sends every command in flight again, unless its request has a command out of
    /// retries or one that timed out (its Abort went out); those requests end with `status`
    /// and wait for [`IoQueue::deliver_ended`] (buffers handed back: the device stopped).
    /// Returns how many requests ended. O(trackers).
    pub(crate) fn requeue_after_reset(&mut self, status: Status) -> usize {
        // Commands queued but not rung yet have no copy: take it before the rings go.
        self.save_unrung();
        self.rings.reset();
        let Some(r) = self.retry.as_deref_mut() else {
            return 0;
        };
        let n = self.trackers.capacity() as u16;
        // A tracker of a request in flight (not one ended earlier and not yet delivered).
        let in_flight = |t: &&crate::queue::tracker::Tracker<T>| t.busy != 0 && t.busy & ENDED == 0;
        // Pass 1: the requests that can't go again, marked on their head (`remaining` = 0
        // there; the heads of the others count their commands again in pass 3).
        let mut hopeless = Vec::new();
        for idx in 0..n {
            let Some(t) = self.trackers.get(idx).filter(in_flight) else {
                continue;
            };
            if t.busy & ABORT_SENT != 0 || !r.may_retry(idx) {
                hopeless.push(t.parent);
            }
        }
        hopeless.sort_unstable();
        hopeless.dedup();
        for idx in 0..n {
            let Some(t) = self
                .trackers
                .get_mut(idx)
                .filter(|t| t.busy != 0 && t.busy & ENDED == 0)
            else {
                continue;
            };
            if t.parent == idx {
                t.remaining = 0;
            }
        }
        // Pass 2: free the other commands of the hopeless requests, send the others again.
        for idx in 0..n {
            let Some(parent) = self.trackers.get(idx).filter(in_flight).map(|t| t.parent) else {
                continue;
            };
            if hopeless.binary_search(&parent).is_ok() {
                if parent != idx {
                    self.trackers.end_command(idx, false);
                }
                continue;
            }
            let cid = self.trackers.renew(idx);
            if let Some(cmd) = r.take(idx, cid) {
                self.rings.push(&cmd);
            }
            if let Some(h) = self.trackers.get_mut(parent) {
                h.remaining = h.remaining.wrapping_add(1);
            }
        }
        // Pass 3: end the hopeless requests.
        for &head in &hopeless {
            self.trackers.end_head(head, status, false, drop);
        }
        hopeless.len()
    }
}
