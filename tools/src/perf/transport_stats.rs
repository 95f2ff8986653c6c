//! Per-queue-pair transport statistics (`--transport-stats`, as spdk_nvme_perf's): counted in
//! plain fields of the worker's own loop, plus the driver's doorbell counters.

use serde_json::{json, Value};
use vfnvme::DoorbellStats;

/// What one queue pair did over the whole run (ramp included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransportStats {
    /// Queue pair id.
    pub qid: u16,
    /// Calls of `poll`.
    pub polls: u64,
    /// Polls that found no completion.
    pub idle_polls: u64,
    /// I/O completions reaped.
    pub completions: u64,
    /// I/Os handed to the queue pair.
    pub submitted: u64,
    /// I/Os perf had to hold back because the submission queue was full (smaller
    /// `--queue-size` than the queue depth needs), submitted later.
    pub queued: u64,
    /// Doorbell updates in the run (SQ/CQ, MMIO/shadow), if the driver counts them.
    pub doorbells: Option<DoorbellStats>,
}

/// `after - before` of the driver's counters.
pub fn doorbell_delta(
    before: Option<DoorbellStats>,
    after: Option<DoorbellStats>,
) -> Option<DoorbellStats> {
    let (b, a) = (before?, after?);
    Some(DoorbellStats {
        sq_mmio: a.sq_mmio - b.sq_mmio,
        sq_shadow: a.sq_shadow - b.sq_shadow,
        cq_mmio: a.cq_mmio - b.cq_mmio,
        cq_shadow: a.cq_shadow - b.cq_shadow,
    })
}

impl TransportStats {
    /// The block spdk_nvme_perf prints for a PCIe queue pair, under `label`.
    pub fn text(&self, label: &str) -> String {
        let mut s = format!(
            "{label} (qid {qid}):\n\tpolls:              {}\n\tidle_polls:         {}\n\tcompletions:        {}\n\tsubmitted_requests: {}\n\tqueued_requests:    {}\n",
            self.polls,
            self.idle_polls,
            self.completions,
            self.submitted,
            self.queued,
            qid = self.qid,
        );
        match self.doorbells {
            Some(d) => {
                s += &format!(
                    "\tsq_mmio_doorbell_updates:   {}\n\tsq_shadow_doorbell_updates: {}\n\tcq_mmio_doorbell_updates:   {}\n\tcq_shadow_doorbell_updates: {}\n",
                    d.sq_mmio, d.sq_shadow, d.cq_mmio, d.cq_shadow
                );
            }
            None => s += "\tdoorbell updates: not counted (driver built without doorbell-stats)\n",
        }
        s
    }

    /// The same as JSON.
    pub fn json(&self) -> Value {
        let d = self.doorbells;
        json!({
            "qid": self.qid,
            "polls": self.polls,
            "idle_polls": self.idle_polls,
            "completions": self.completions,
            "submitted_requests": self.submitted,
            "queued_requests": self.queued,
            "sq_mmio_doorbell_updates": d.map(|d| d.sq_mmio),
            "sq_shadow_doorbell_updates": d.map(|d| d.sq_shadow),
            "cq_mmio_doorbell_updates": d.map(|d| d.cq_mmio),
            "cq_shadow_doorbell_updates": d.map(|d| d.cq_shadow),
        })
    }
}
