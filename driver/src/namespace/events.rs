//! Namespace change events and their subscribers.
//!
//! The registry publishes an event after each change is visible to lookups; the scan and AER
//! logic subscribe. Delivery uses std mpsc channels (unbounded, so a publisher never blocks on
//! a slow subscriber); a subscriber that dropped its receiver is forgotten at the next publish.
//! Publishing is admin-path work (it takes a short mutex), never I/O-path work.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::PoisonError;

use super::epoch::Mutex;

/// A change to the set of namespaces of a controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NamespaceEvent {
    /// A namespace became reachable by lookups.
    Added(u32),
    /// A namespace was unlinked: new lookups no longer find it.
    Removed(u32),
    /// A namespace changed in place (a resize).
    Changed(u32),
}

impl NamespaceEvent {
    /// The namespace ID the event is about.
    pub fn nsid(&self) -> u32 {
        match *self {
            NamespaceEvent::Added(n) | NamespaceEvent::Removed(n) | NamespaceEvent::Changed(n) => n,
        }
    }
}

/// Fans events out to every live subscriber.
pub struct EventBus {
    subscribers: Mutex<Vec<Sender<NamespaceEvent>>>,
}

impl Default for EventBus {
    fn default() -> Self {
        EventBus {
            subscribers: Mutex::new(Vec::new()),
        }
    }
}

impl std::fmt::Debug for EventBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventBus")
            .field("subscribers", &self.subscriber_count())
            .finish()
    }
}

impl EventBus {
    /// A bus with no subscribers.
    pub fn new() -> Self {
        Self::default()
    }

    /// A receiver of every event published from now on.
    pub fn subscribe(&self) -> Receiver<NamespaceEvent> {
        let (tx, rx) = channel();
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(tx);
        rx
    }

    /// Sends `event` to every subscriber, dropping those whose receiver is gone.
    pub fn publish(&self, event: NamespaceEvent) {
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|tx| tx.send(event).is_ok());
    }

    /// How many subscribers are registered (some may have gone since the last publish).
    pub fn subscriber_count(&self) -> usize {
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn every_subscriber_gets_every_event_and_dropped_ones_are_forgotten() {
        let bus = EventBus::new();
        let a = bus.subscribe();
        let b = bus.subscribe();
        bus.publish(NamespaceEvent::Added(7));
        drop(b);
        bus.publish(NamespaceEvent::Changed(7));
        assert_eq!(bus.subscriber_count(), 1);
        let got: Vec<_> = a.try_iter().collect();
        assert_eq!(
            got,
            vec![NamespaceEvent::Added(7), NamespaceEvent::Changed(7)]
        );
        assert_eq!(got[1].nsid(), 7);
    }
}
