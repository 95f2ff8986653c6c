//! Namespace change events and their subscribers.
//!
//! The registry publishes an event after each change is visible to lookups; the scan and AER
//! logic subscribe. Delivery uses std mpsc channels (unbounded, so a publisher never blocks on
//! a slow subscriber); a subscriber that dropped its receiver is forgotten at the next publish.
//! Publishing is admin-path work (it takes a short mutex), never I/O-path work.

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

/// The namespace event bus of a controller.
pub type EventBus = crate::event_bus::EventBus<NamespaceEvent>;

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
