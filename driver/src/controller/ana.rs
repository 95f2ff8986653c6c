//! The controller's view of Asymmetric Namespace Access: the ANA log page (0Ch), read at
//! bring-up when Identify Controller reports ANA (CMIC bit 3) and again on every ANA change
//! event; the latest parsed page is kept for the multipath layer.

use super::Controller;
use crate::error::Error;
use crate::platform::Platform;
use crate::spec::ana::{AnaLog, AnaState, CMIC_ANA};
use crate::spec::log::log_id;
use std::sync::Arc;

/// The largest ANA log page read (the kernel caps its buffer similarly).
const ANA_LOG_MAX: usize = 1 << 20;

impl<P: Platform> Controller<P> {
    /// Whether the controller reports ANA (CMIC bit 3).
    pub fn reports_ana(&self) -> bool {
        self.info.identify.cmic & CMIC_ANA != 0
    }

    /// The last ANA log page read (`None` if the controller reports no ANA, or it was never
    /// read successfully).
    pub fn ana_log(&self) -> Option<Arc<AnaLog>> {
        self.ana.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The ANA state of group `anagrpid` on this controller from the last log page read:
    /// `None` without ANA (group 0, or no page), which callers treat as optimized.
    pub fn ana_state(&self, anagrpid: u32) -> Option<AnaState> {
        if anagrpid == 0 {
            return None;
        }
        self.ana
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(|log| log.state_of(anagrpid))
    }

    /// Reads the ANA log page (0Ch) now (which also clears a pending ANA change event) and
    /// keeps it. Errors: the controller reports no ANA ([`Error::Unsupported`]), the command
    /// failed, or the page is malformed ([`Error::AnaLog`]; the previous page is kept).
    pub fn refresh_ana(&self) -> Result<Arc<AnaLog>, Error> {
        if !self.reports_ana() {
            return Err(Error::Unsupported {
                what: "ANA (the controller's CMIC bit 3 is clear)",
            });
        }
        let id = &self.info.identify;
        let len = AnaLog::size_for(id.nanagrpid.max(id.anagrpmax), id.nn, ANA_LOG_MAX);
        let page = self.get_log_page(log_id::ANA, 0xFFFF_FFFF, len, false)?;
        let log = Arc::new(AnaLog::parse(page.as_slice())?);
        *self.ana.lock().unwrap_or_else(|e| e.into_inner()) = Some(log.clone());
        Ok(log)
    }
}
