//! Namespace events during a perf run: a background thread reaps each controller's
//! asynchronous events (vfnvme has no interrupts) and reports namespaces that are attached,
//! detached or resized while I/O runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::time::Duration;
use vfnvme::namespaces::NamespaceEvent;
use vfnvme::platform::Platform;
use vfnvme::Controller;

/// How often the admin queues are polled.
const PERIOD: Duration = Duration::from_millis(100);

/// One controller to watch.
pub struct Watched<'a, P: Platform> {
    /// The controller.
    pub ctrl: &'a Controller<P>,
    /// Its name in messages.
    pub name: String,
    /// Its namespace events, subscribed before the run.
    pub events: Receiver<NamespaceEvent>,
}

impl<'a, P: Platform> Watched<'a, P> {
    /// Subscribes to `ctrl`'s namespace events.
    pub fn new(ctrl: &'a Controller<P>, name: &str) -> Self {
        Watched {
            ctrl,
            name: name.to_string(),
            events: ctrl.subscribe_namespace_events(),
        }
    }
}

/// What one event says, for a person.
pub fn describe(name: &str, event: &NamespaceEvent) -> String {
    let (nsid, what) = match *event {
        NamespaceEvent::Added(n) => (n, "added"),
        NamespaceEvent::Removed(n) => (n, "removed: I/O to it now fails"),
        NamespaceEvent::Changed(n) => (n, "changed (resized)"),
    };
    format!("vfnvme perf: {name}: namespace {nsid} {what}")
}

/// Polls every watched controller's admin queue each [`PERIOD`] until `done`, printing each
/// namespace event to standard error. Returns the events seen.
pub fn watch<P: Platform>(watched: &[Watched<'_, P>], done: &AtomicBool) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let last = done.load(Ordering::Acquire);
        for w in watched {
            if let Err(e) = w.ctrl.process_admin_completions() {
                eprintln!("vfnvme perf: {}: reaping asynchronous events: {e}", w.name);
            }
            for event in w.events.try_iter() {
                let line = describe(&w.name, &event);
                eprintln!("{line}");
                seen.push(line);
            }
        }
        if last {
            return seen;
        }
        std::thread::park_timeout(PERIOD);
    }
}

#[cfg(all(test, feature = "model"))]
mod tests {
    use super::*;
    use vfnvme::ControllerOptions;
    use vfnvme_model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform};

    #[test]
    fn a_detach_during_the_run_is_reported() {
        let ns = |nsid| ModelNamespaceConfig {
            nsid,
            blocks: 4096,
            lba_size: 4096,
            backing: Backing::Null,
        };
        let platform = ModelPlatform::new(ModelConfig {
            namespaces: vec![ns(1), ns(2)],
            ..ModelConfig::default()
        })
        .expect("model");
        let ctrl = Controller::new(platform.clone(), ControllerOptions::default()).expect("up");
        let watched = [Watched::new(&ctrl, "model")];
        platform.detach_namespace(2).expect("detach");
        // `done` already set: one pass, which must still reap the event.
        let seen = watch(&watched, &AtomicBool::new(true));
        assert_eq!(
            seen,
            ["vfnvme perf: model: namespace 2 removed: I/O to it now fails"]
        );
        assert!(ctrl.namespace(2).is_none());
    }
}
