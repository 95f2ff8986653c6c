//! A small fan-out of events to subscribers (namespace changes, controller state changes).
//!
//! Delivery uses std mpsc channels (unbounded, so a publisher never blocks on a slow
//! subscriber); a subscriber that dropped its receiver is forgotten at the next publish.
//! Publishing is control-path work (it takes a short mutex), never I/O-path work.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::PoisonError;

#[cfg(loom)]
use loom::sync::Mutex;
#[cfg(not(loom))]
use std::sync::Mutex;

/// Fans events out to every live subscriber.
pub struct EventBus<E> {
    subscribers: Mutex<Vec<Sender<E>>>,
}

impl<E> Default for EventBus<E> {
    fn default() -> Self {
        EventBus {
            subscribers: Mutex::new(Vec::new()),
        }
    }
}

impl<E: Clone> std::fmt::Debug for EventBus<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventBus")
            .field("subscribers", &self.subscriber_count())
            .finish()
    }
}

impl<E: Clone> EventBus<E> {
    /// A bus with no subscribers.
    pub fn new() -> Self {
        Self::default()
    }

    /// A receiver of every event published from now on.
    pub fn subscribe(&self) -> Receiver<E> {
        let (tx, rx) = channel();
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(tx);
        rx
    }

    /// Sends `event` to every subscriber, dropping those whose receiver is gone.
    pub fn publish(&self, event: E) {
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|tx| tx.send(event.clone()).is_ok());
    }

    /// How many subscribers are registered (some may have gone since the last publish).
    pub fn subscriber_count(&self) -> usize {
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}
