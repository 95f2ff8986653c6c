//! How a reap hands finished requests over: [`Deliver`] has one method for the success path
//! (the parts straight from the tracker, so that the buffer is moved once, to wherever the
//! receiver puts it) and one for everything else. A closure taking [`IoCompletion`]s is one
//! through [`ByClosure`].

use super::IoCompletion;
use crate::spec::Status;
use vfnvme_hal::DmaBuffer;

/// Receives the requests a reap finishes.
pub trait Deliver<T> {
    /// Whether a reap stops before the first completion with an error status (left in the
    /// queue; [`stopped`](Self::stopped) is called), so that this sink only ever takes the
    /// success path and the error is reaped by another, out of line. Requests ended by
    /// recovery still come to [`completion`](Self::completion).
    const STOP_AT_ERROR: bool = false;
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
    /// A reap with [`STOP_AT_ERROR`](Self::STOP_AT_ERROR) stopped before an error (left in
    /// the queue).
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
