//! Direct mode: while every request takes one path and nothing else is going on (no request
//! waiting in the channel, no other path with requests in flight, no released controller),
//! the channel is that path's queue pair with a request record per command. Its queue pair
//! and namespace sit in [`Direct`], outside the per-path arrays, so that a submission and a
//! poll reach them without the route, the per-path loop or the busy mask.
//!
//! The submission checks that the namespace still takes I/O and that the head's generation
//! (its route stamp, moved after each change of policy, ANA states or paths; see
//! `PathCell::publish`) is the one the route was chosen with.
//!
//! Every cold entry point (slow submission, refusal, a poll with something to settle, a
//! failed completion) first puts the queue pair back in its slot ([`IoChannel::undirect`]),
//! does its work on the general arrays, and re-enters direct mode at the end when it applies
//! ([`IoChannel::redirect`]).

use super::{IoChannel, Tag};
use crate::controller::QueuePair;
use crate::multipath::paths::MAX_PATHS;
use crate::namespace::Namespace;
use crate::platform::Platform;
use crate::queue::Target;
use std::sync::Arc;

/// The one path of a channel in direct mode.
pub(super) struct Direct<P: Platform> {
    pub(super) qp: QueuePair<P, Tag>,
    pub(super) ns: Arc<Namespace>,
    /// Its controller index.
    pub(super) path: usize,
    /// Commands sent on it since direct mode began (added to the per-path count on leaving).
    pub(super) sent: u64,
    /// The namespace as requests' target, read as direct mode began.
    pub(super) target: Target,
    /// Polls since direct mode began (mod 256): every 256th looks at the head.
    pub(super) polls: u8,
}

impl<P: Platform> IoChannel<P> {
    /// Runs `f` on the general arrays: out of direct mode before, back in after if it applies.
    #[inline(always)]
    pub(super) fn in_general_mode<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        self.undirect();
        let r = f(self);
        self.redirect();
        r
    }

    /// Leaves direct mode: the queue pair goes back to its slot, marked busy if requests are
    /// in flight on it.
    #[cold]
    #[inline(never)]
    pub(super) fn undirect(&mut self) {
        if let Some(d) = self.direct.take() {
            let i = d.path & (MAX_PATHS - 1);
            self.sent[i] += d.sent;
            if d.qp.outstanding() != 0 {
                self.busy |= 1 << i;
            }
            self.qpairs[i] = Some(d.qp);
        }
    }

    /// Enters direct mode if it applies: a fixed route (the numa policy, or one usable path)
    /// whose queue pair is open, nothing waiting, no released controller, and no other path
    /// with requests in flight.
    #[cold]
    #[inline(never)]
    pub(super) fn redirect(&mut self) {
        let i = usize::from(self.route);
        if self.direct.is_some()
            || i >= MAX_PATHS
            || !self.pending.is_empty()
            || self.dead != 0
            || self.busy & !(1 << i) != 0
        {
            return;
        }
        let Some(ns) = self.namespaces[i].clone() else {
            return;
        };
        if !ns.io_ready() || self.head.paths.generation() != self.generation {
            return;
        }
        let Ok(target) = Target::of(&ns) else {
            return;
        };
        let Some(qp) = self.qpairs[i].take() else {
            return;
        };
        self.busy = 0;
        self.direct = Some(Direct {
            qp,
            ns,
            path: i,
            sent: 0,
            target,
            polls: 0,
        });
    }
}
