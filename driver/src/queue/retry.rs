//! Retries of I/O commands (off unless [`ControllerOptions::io_retries`] is set): a copy of each
//! command as submitted, and how often it has been sent again.
//!
//! A command that completes with an error the controller allows to be retried (DNR = 0), or
//! that was in flight when the controller was reset, is sent again with the same data pointers:
//! its buffer never left the tracker. A command whose Abort had to be sent (it timed out) is not
//! retried, as in the Linux driver: it would time out again.
//!
//! [`ControllerOptions::io_retries`]: crate::ControllerOptions::io_retries

use crate::spec::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Per-tracker copies of the commands in flight and their retry counts (one queue pair's).
#[derive(Debug)]
pub(crate) struct RetryBook {
    /// Most retries of one command.
    limit: u8,
    /// The command as submitted on each tracker.
    sqes: Box<[Command]>,
    /// Retries of each tracker's current command so far.
    attempts: Box<[u8]>,
    /// Retries on this queue pair.
    count: u64,
    /// Retries on every queue pair of the controller.
    controller_count: Arc<AtomicU64>,
}

impl RetryBook {
    /// A book for `trackers` trackers, each command retried at most `limit` times.
    pub(crate) fn new(trackers: usize, limit: u8, controller_count: Arc<AtomicU64>) -> Self {
        RetryBook {
            limit,
            sqes: vec![Command::default(); trackers].into_boxed_slice(),
            attempts: vec![0; trackers].into_boxed_slice(),
            count: 0,
            controller_count,
        }
    }

    /// Keeps `cmd`, queued on tracker `idx`: a new command (it has not been retried yet), or
    /// the one kept already, sent again ([`RetryBook::take`] kept it with its new identifier),
    /// whose count stays.
    pub(crate) fn save(&mut self, idx: u16, cmd: &Command) {
        if let (Some(s), Some(a)) = (
            self.sqes.get_mut(idx as usize),
            self.attempts.get_mut(idx as usize),
        ) {
            if *s != *cmd {
                *s = *cmd;
                *a = 0;
            }
        }
    }

    /// Whether tracker `idx`'s command may be sent once more.
    pub(crate) fn may_retry(&self, idx: u16) -> bool {
        self.attempts
            .get(idx as usize)
            .is_some_and(|&a| a < self.limit)
    }

    /// Counts one more attempt of tracker `idx`'s command and returns the command to send
    /// again, with identifier `cid`.
    pub(crate) fn take(&mut self, idx: u16, cid: u16) -> Option<Command> {
        let a = self.attempts.get_mut(idx as usize)?;
        *a = a.saturating_add(1);
        let saved = self.sqes.get_mut(idx as usize)?;
        saved.set_cid(cid);
        let cmd = *saved;
        self.count += 1;
        self.controller_count.fetch_add(1, Ordering::Relaxed);
        Some(cmd)
    }

    /// Retries on this queue pair so far.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }
}
