//! Asynchronous events: Asynchronous Event Requests kept outstanding on the admin queue, and
//! what a polled application's [`Controller::process_admin_completions`] does with them.
//!
//! Namespace Attribute Changed → read the Changed Namespace List log (04h, which also unmasks
//! the event) → rescan only the listed namespaces, or all of them if the list overflowed
//! (first entry FFFFFFFFh). ANA Change → read the ANA log page (0Ch, which clears the event)
//! and keep it ([`Controller::ana_log`]). AERs are re-armed before the log is read, so a change that happens
//! meanwhile raises a new event instead of being lost.

use super::Controller;
use crate::error::Error;
use crate::namespaces::scan::ScanReport;
use crate::platform::Platform;
use crate::spec::ana::OAES_ANA_CHANGE;
use crate::spec::command::feature_id;
use crate::spec::log::{log_id, notice, parse_changed_ns_list, AsyncEvent, AsyncEventType};
use crate::spec::Command;
use std::sync::atomic::Ordering;

/// Bit 8 of the Asynchronous Event Configuration feature: Namespace Attribute Notices.
const NS_ATTRIBUTE_NOTICES: u32 = 1 << 8;
/// The broadcast nsid (controller-wide log pages).
const NSID_ALL: u32 = 0xFFFF_FFFF;

/// What one call of [`Controller::process_admin_completions`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdminEventReport {
    /// Asynchronous events received.
    pub async_events: usize,
    /// Of those, Namespace Attribute Changed notices.
    pub namespace_notices: usize,
    /// AERs that completed with an error (they are not re-armed).
    pub failed_aers: usize,
    /// Whether the Changed Namespace List overflowed (a full rescan was done).
    pub list_overflowed: bool,
    /// The rescan the notices caused, if any.
    pub scan: Option<ScanReport>,
    /// Of the events, ANA change notices.
    pub ana_notices: usize,
    /// The ANA log page read because of them (`None` without notices, or if reading failed).
    pub ana: Option<std::sync::Arc<crate::spec::ana::AnaLog>>,
}

/// Turns on Namespace Attribute Notices (and ANA Change Notices when the controller reports
/// ANA) and sends the first AERs (bring-up).
pub(super) fn enable_namespace_notices<P: Platform>(ctrl: &Controller<P>) {
    let ana = if ctrl.reports_ana() && ctrl.info.identify.oaes & OAES_ANA_CHANGE != 0 {
        OAES_ANA_CHANGE
    } else {
        0
    };
    let value = NS_ATTRIBUTE_NOTICES | ana;
    let cmd = Command::set_features(feature_id::ASYNC_EVENT_CONFIG, value);
    match ctrl.shared.admin_sync(cmd) {
        Ok(_) => ctrl
            .shared
            .async_event_config
            .store(value, Ordering::Relaxed),
        Err(e) => {
            log::warn!("enabling namespace attribute notices failed ({e}); relying on AER defaults")
        }
    }
    arm(ctrl);
}

/// Tops the outstanding AERs up to the target.
fn arm<P: Platform>(ctrl: &Controller<P>) {
    let want = ctrl.shared.aer_target.load(Ordering::Relaxed);
    let mut admin = ctrl.shared.admin.lock().unwrap_or_else(|e| e.into_inner());
    admin.arm_aers(&*ctrl.shared.platform, want);
}

/// Reads (and thereby clears) the Changed Namespace List: `None` if it overflowed.
fn changed_list<P: Platform>(ctrl: &Controller<P>) -> Result<Option<Vec<u32>>, Error> {
    let page = ctrl.get_log_page(log_id::CHANGED_NS_LIST, NSID_ALL, 4096, false)?;
    Ok(parse_changed_ns_list(page.as_slice()))
}

/// Reads log page `lid` to clear a non-namespace event (its content is only logged).
fn clear_event<P: Platform>(ctrl: &Controller<P>, event: AsyncEvent) {
    if let Err(e) = ctrl.get_log_page(event.log_page, NSID_ALL, 512, false) {
        log::warn!("asynchronous event {event:?}: reading log page failed: {e}");
    }
}

pub(super) fn process<P: Platform>(ctrl: &Controller<P>) -> Result<AdminEventReport, Error> {
    let events = {
        let mut admin = ctrl.shared.admin.lock().unwrap_or_else(|e| e.into_inner());
        admin.poll_events(&*ctrl.shared.platform)
    };
    let mut report = AdminEventReport::default();
    let mut others = Vec::new();
    for e in events {
        match e {
            Ok(dw0) => {
                report.async_events += 1;
                let event = AsyncEvent::from_dw0(dw0);
                if event.is_namespace_changed() {
                    report.namespace_notices += 1;
                } else if event.kind == AsyncEventType::Notice && event.info == notice::ANA_CHANGE {
                    report.ana_notices += 1;
                } else {
                    log::info!("asynchronous event {event:?}");
                    others.push(event);
                }
            }
            Err(status) => {
                report.failed_aers += 1;
                log::warn!("Asynchronous Event Request failed ({status}); not re-armed");
                let target = &ctrl.shared.aer_target;
                let mut now = target.load(Ordering::Relaxed);
                while let Err(seen) = target.compare_exchange_weak(
                    now,
                    now.saturating_sub(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    now = seen;
                }
            }
        }
    }
    if report.async_events == 0 && report.failed_aers == 0 {
        return Ok(report);
    }
    arm(ctrl);
    for event in others {
        clear_event(ctrl, event);
    }
    if report.ana_notices > 0 {
        // Reading the page clears the event; a malformed page keeps the previous one.
        match ctrl.refresh_ana() {
            Ok(log) => report.ana = Some(log),
            Err(e) => log::warn!("ANA change: reading the ANA log page failed: {e}"),
        }
    }
    if report.namespace_notices > 0 {
        report.scan = Some(match changed_list(ctrl)? {
            Some(nsids) => ctrl.rescan_namespaces(&nsids),
            None => {
                report.list_overflowed = true;
                ctrl.rescan()?
            }
        });
    }
    Ok(report)
}
