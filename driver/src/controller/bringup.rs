//! Bring-up as an explicit step sequence; every wait is bounded by CAP.TO.

use super::{ControllerInfo, ControllerOptions};
use crate::admin::enable::{disable, enable, program_admin_queue};
use crate::admin::{AdminQueue, DeviceUse, Shared};
use crate::error::Error;
use crate::platform::{Platform, RegisterIo};
use crate::queue::prp;
use crate::queue::ring::ShadowBuffers;
use crate::quirks::{self, Quirks};
use crate::spec::features::NumberOfQueues;
use crate::spec::identify::IdentifyController;
use crate::spec::registers::{Cap, Version, CAP, CSTS, VS};
use crate::spec::{AdminCommand, Command};
use std::sync::Arc;

/// Step 4: Identify Controller.
fn identify_controller<P: Platform>(shared: &Shared<P>) -> Result<IdentifyController, Error> {
    let buf = shared.platform.dma().alloc(4096)?;
    let (_, buf) =
        shared.admin_data(&AdminCommand::identify_controller(), buf, 0, prp::PAGE_SIZE)?;
    Ok(IdentifyController::parse(buf.as_slice())?)
}

/// Step 5: Set Features, Number of Queues; returns the queue pairs granted (≤ requested).
pub(super) fn number_of_queues<P: Platform>(
    shared: &Shared<P>,
    requested: u16,
) -> Result<u16, Error> {
    let requested = requested.clamp(1, u16::MAX - 1);
    let c = shared.admin_sync(Command::set_number_of_queues(requested, requested))?;
    let n = NumberOfQueues::from_dw0(c.dw0);
    Ok(n.pairs().min(requested as u32) as u16)
}

/// Step 6 (optional): Doorbell Buffer Config. Failure is not fatal: MMIO doorbells are used.
fn doorbell_buffer_config<P: Platform>(shared: &Shared<P>) -> Option<Arc<ShadowBuffers>> {
    let pool = shared.platform.dma();
    let bufs = ShadowBuffers {
        doorbells: pool.alloc(prp::PAGE_SIZE).ok()?,
        event_idx: pool.alloc(prp::PAGE_SIZE).ok()?,
    };
    let cmd = Command::doorbell_buffer_config(bufs.doorbells.iova(), bufs.event_idx.iova());
    // SAFETY: both pages belong to `bufs`, which the admin queue owns while the command runs
    // (parked with it if it times out); the controller uses them for as long as it is enabled
    // once the command succeeded, which `UntilDisabled` covers (and `Shared` keeps them after).
    match unsafe { shared.admin_sync_owned(cmd, bufs, DeviceUse::UntilDisabled) } {
        Ok((_, bufs)) => Some(Arc::new(bufs)),
        Err(e) => {
            log::warn!("Doorbell Buffer Config failed ({e}); using MMIO doorbells");
            None
        }
    }
}

/// Runs the bring-up steps up to (not including) namespace discovery.
pub(crate) fn bring_up<P: Platform>(
    platform: Arc<P>,
    options: &ControllerOptions,
) -> Result<(Shared<P>, ControllerInfo), Error> {
    let regs = platform.regs();
    let cap = Cap(regs.read64(CAP));
    if cap.0 == u64::MAX {
        return Err(Error::DeviceGone {
            csts: regs.read32(CSTS),
        });
    }
    let version = Version(regs.read32(VS));
    if cap.css() & 1 == 0 {
        return Err(Error::Unsupported {
            what: "the NVM command set (CAP.CSS bit 0)",
        });
    }
    if cap.mpsmin() != 0 {
        return Err(Error::Unsupported {
            what: "4 KiB memory pages (CAP.MPSMIN > 0)",
        });
    }
    let quirks = platform
        .pci_id()
        .map_or(Quirks::NONE, |(v, d)| quirks::lookup(v, d));
    if let Some(e) = platform.pci_id().and_then(|(v, d)| quirks::entry(v, d)) {
        log::info!(
            "{}: {:04x}:{:04x} ({}) has known quirks: {} (source: {})",
            platform.name(),
            e.vendor,
            e.device,
            e.product,
            e.quirks,
            e.source
        );
    }
    disable(&*platform, cap, quirks)?;
    let admin_depth = (options.admin_depth as u32)
        .min(cap.max_queue_entries())
        .max(2) as u16;
    let admin = AdminQueue::new(platform.dma(), platform.regs(), admin_depth, cap.dstrd())?;
    // SAFETY: `disable` above left the controller disabled; `admin` moves into `shared`
    // below, which keeps it until the controller is disabled again (or leaks it).
    unsafe { program_admin_queue(&*platform, &admin) };
    // From here on `shared` owns the admin rings: on any error below, dropping it disables the
    // controller before they are freed (or leaks them if it can't be disabled).
    let mut shared = Shared::new(
        platform.clone(),
        cap,
        admin,
        options.admin_timeout_ms.saturating_mul(1_000_000),
        quirks,
    );
    shared.io_timeout_ns = options.io_timeout_ms.saturating_mul(1_000_000);
    shared.io_retries = options.io_retries;
    // SAFETY: the admin queue just programmed is `shared`'s, freed only once the controller
    // is disabled (or leaked).
    unsafe { enable(&*platform, cap, quirks) }?;
    let identify = identify_controller(&shared)?;
    let pairs = number_of_queues(&shared, options.io_queues)?;
    shared
        .queues
        .get_mut()
        .unwrap_or_else(|e| e.into_inner())
        .in_use = vec![false; pairs as usize];
    if options.shadow_doorbells && identify.supports_doorbell_buffer_config() {
        shared.shadow = doorbell_buffer_config(&shared);
    }
    let max_transfer = identify
        .max_transfer_bytes(cap.mpsmin())
        .map_or(prp::MAX_TRANSFER, |m| {
            m.min(prp::MAX_TRANSFER as u64) as usize
        });
    let info = ControllerInfo {
        identify,
        cap,
        version,
        max_transfer_bytes: max_transfer,
        io_queue_pairs: pairs,
        max_queue_depth: cap.max_queue_entries(),
        shadow_doorbells: shared.shadow.is_some(),
        quirks,
    };
    Ok((shared, info))
}
