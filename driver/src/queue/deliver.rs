//! How a reap hands finished requests over: [`Deliver`] has one method for the success path
//! (the parts straight from the tracker, so that the buffer is moved once, to wherever the
//! receiver puts it) and one for everything else. A closure taking [`IoCompletion`]s is one
//! through [`ByClosure`].

use super::IoCompletion;
use crate::spec::Status;
use vfnvme_hal::DmaBuffer;

/// Receives the requests a reap finishes.
pub trait Deliver<T> {
    /// A request finished on the success path: its tag, status (an error of an earlier
    /// command of a request split at MDTS, else success), dword 0 of its last completion, its
    /// slot, and its buffer, to be taken from the tracker (left `None`).
    fn finished(
        &mut self,
        tag: T,
        status: Status,
        cdw0: u32,
        slot: u16,
        buffer: &mut Option<DmaBuffer>,
    );
    /// Any other finished request (an error, a retry given up, a request ended by recovery).
    fn completion(&mut self, c: IoCompletion<T>);
    /// A reap that stops at errors stopped before one (left in the queue).
    #[inline(always)]
    fn stopped(&mut self) {}
}

/// A closure taking [`IoCompletion`]s, as a [`Deliver`].
pub struct ByClosure<F>(pub F);

impl<T, F: FnMut(IoCompletion<T>)> Deliver<T> for ByClosure<F> {
    #[inline(always)]
    fn finished(
        &mut self,
        tag: T,
        status: Status,
        cdw0: u32,
        slot: u16,
        buffer: &mut Option<DmaBuffer>,
    ) {
        (self.0)(IoCompletion {
            tag,
            status,
            cdw0,
            slot,
            buffer: buffer.take(),
            memory_held: false,
        })
    }

    #[inline(always)]
    fn completion(&mut self, c: IoCompletion<T>) {
        (self.0)(c)
    }
}
