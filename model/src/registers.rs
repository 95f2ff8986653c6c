//! The register file (BAR0): properties at 0x00..0x38, doorbells from 0x1000.

use super::core::{Core, CtrlState};
use super::queues::{Cq, Sq};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use vfnvme_hal::platform::RegisterIo;

const CAP: usize = 0x00;
const VS: usize = 0x08;
const INTMS: usize = 0x0C;
const INTMC: usize = 0x10;
const CC: usize = 0x14;
const CSTS: usize = 0x1C;
const AQA: usize = 0x24;
const ASQ: usize = 0x28;
const ACQ: usize = 0x30;
const DOORBELLS: usize = 0x1000;

/// The model's register file, as the driver sees it through [`RegisterIo`].
#[derive(Debug, Clone)]
pub struct ModelRegs {
    pub(crate) core: Arc<Core>,
}

impl ModelRegs {
    fn cap(&self) -> u64 {
        let cfg = &self.core.cfg;
        let mqes = u64::from(cfg.max_queue_entries - 1);
        mqes | u64::from(cfg.contiguous_queues_required) << 16 // CQR
            | u64::from(cfg.timeout_units) << 24
            | u64::from(cfg.doorbell_stride) << 32
            | 1 << 37 // CSS: NVM command set
            | u64::from(cfg.mpsmin) << 48
            | u64::from(cfg.mpsmax) << 52
    }

    fn csts(&self) -> u32 {
        let mut c = self.core.lock_ctrl();
        let now = self.core.now();
        let window = self.core.cfg.early_csts_read_fatal_ns;
        if window > 0
            && c.en_changed_at
                .is_some_and(|t| now < t.saturating_add(window))
        {
            // A controller that breaks when polled too soon after CC.EN changes.
            c.cfs = true;
        }
        let fatal = c.cfs || self.core.fatal.load(Ordering::Acquire);
        let rdy = (c.enabled && c.ready_at.is_some_and(|t| now >= t))
            || c.rdy_clear_at.is_some_and(|t| now < t);
        let shst = match c.shutdown_at {
            Some(t) if now >= t => 2,
            Some(_) => 1,
            None => 0,
        };
        u32::from(rdy) | u32::from(fatal) << 1 | shst << 2
    }

    fn read_dword(&self, offset: usize) -> u32 {
        match offset {
            CAP => self.cap() as u32,
            0x04 => (self.cap() >> 32) as u32,
            VS => self.core.cfg.version,
            INTMS | INTMC => 0,
            CC => self.core.lock_ctrl().cc,
            CSTS => self.csts(),
            AQA => self.core.lock_ctrl().aqa,
            ASQ => self.core.lock_ctrl().asq as u32,
            0x2C => (self.core.lock_ctrl().asq >> 32) as u32,
            ACQ => self.core.lock_ctrl().acq as u32,
            0x34 => (self.core.lock_ctrl().acq >> 32) as u32,
            o if o >= DOORBELLS && o < self.bar_end() => 0,
            _ => u32::MAX,
        }
    }

    /// Fault injection: the device vanished (reads all ones, ignores writes).
    #[inline]
    fn gone(&self) -> bool {
        self.core.faults.gone.load(Ordering::Relaxed)
    }

    fn stride(&self) -> usize {
        4 << self.core.cfg.doorbell_stride
    }

    fn bar_end(&self) -> usize {
        DOORBELLS + self.core.cqs.len() * 2 * self.stride()
    }

    fn write_dword(&self, offset: usize, value: u32) {
        match offset {
            CC => self.write_cc(value),
            AQA => self.core.lock_ctrl().aqa = value & 0x0FFF_0FFF,
            ASQ => set_low(&mut self.core.lock_ctrl().asq, value),
            0x2C => set_high(&mut self.core.lock_ctrl().asq, value),
            ACQ => set_low(&mut self.core.lock_ctrl().acq, value),
            0x34 => set_high(&mut self.core.lock_ctrl().acq, value),
            // Only the first dword of each stride-sized slot is a doorbell.
            o if o >= DOORBELLS
                && o < self.bar_end()
                && (o - DOORBELLS).is_multiple_of(self.stride()) =>
            {
                self.core.doorbell((o - DOORBELLS) / self.stride(), value)
            }
            _ => {}
        }
    }

    fn write_cc(&self, value: u32) {
        let core = &self.core;
        let mut c = core.lock_ctrl();
        let old = c.cc;
        if core.cfg.ignore_disable && old & 1 == 1 && value & 1 == 0 {
            return;
        }
        c.cc = value;
        let now = core.now();
        if (old ^ value) & 1 != 0 {
            c.en_changed_at = Some(now);
        }
        match (old & 1, value & 1) {
            (0, 1) => self.enable(&mut c),
            (1, 0) => {
                let was_ready = c.ready_at.is_some_and(|t| now >= t);
                c.rdy_clear_at = (was_ready && core.cfg.disable_delay_ns > 0)
                    .then(|| now + core.cfg.disable_delay_ns);
                core.reset_queues(&mut c);
                c.events.reset();
                c.enabled = false;
                c.cfs = false;
                c.ready_at = None;
                c.shutdown_at = None;
                c.queues_granted = None;
                c.features.clear();
                c.maintenance.on_reset();
            }
            _ => {}
        }
        let shn = (value >> 14) & 3;
        if shn == 0 {
            if (old >> 14) & 3 != 0 {
                c.shutdown_at = None;
            }
        } else if (old >> 14) & 3 == 0 {
            c.shutdown_at = Some(now + core.cfg.shutdown_delay_ns);
        }
    }

    /// CC.EN 0 → 1: checks the admin queue setup and CC fields, then starts the ready timer.
    fn enable(&self, c: &mut CtrlState) {
        let core = &self.core;
        let mqes = core.cfg.max_queue_entries - 1;
        let asqs = c.aqa & 0xFFF;
        let acqs = (c.aqa >> 16) & 0xFFF;
        let cc = c.cc;
        let mps = (cc >> 7) & 0xF;
        let ok = asqs >= 1
            && acqs >= 1
            && asqs <= mqes
            && acqs <= mqes
            && c.asq != 0
            && c.acq != 0
            && c.asq & 0xFFF == 0
            && c.acq & 0xFFF == 0
            && (cc >> 4) & 7 == 0 // CSS: NVM
            && (cc >> 11) & 7 == 0 // AMS: round robin
            && mps >= u32::from(core.cfg.mpsmin)
            && mps <= u32::from(core.cfg.mpsmax)
            && (cc >> 16) & 0xF == 6 // IOSQES: 64 bytes
            && (cc >> 20) & 0xF == 4; // IOCQES: 16 bytes
        if !ok {
            c.cfs = true;
            return;
        }
        c.page = 4096 << mps;
        core.io_page.store(c.page, Ordering::Relaxed);
        c.admin_sq = Some(Sq::new(0, 0, c.asq, asqs + 1));
        if let Some(slot) = core.cqs.first() {
            *slot.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(Cq::new(0, c.acq, acqs + 1, core.cfg.seed));
        }
        c.enabled = true;
        c.shutdown_at = None;
        // Fault injection: a reset (any enable after the first) may leave it never ready.
        let no_ready = c.enables > 0 && core.faults.draw_no_ready();
        c.enables = c.enables.saturating_add(1);
        c.ready_at =
            (!core.cfg.never_ready && !no_ready).then(|| core.now() + core.cfg.ready_delay_ns);
    }
}

fn set_low(r: &mut u64, v: u32) {
    *r = (*r & !0xFFFF_FFFF) | u64::from(v);
}
fn set_high(r: &mut u64, v: u32) {
    *r = (*r & 0xFFFF_FFFF) | u64::from(v) << 32;
}

// The writes are `unsafe` because the trait's are: the contract is written for a real
// controller. The model itself copies only inside mappings of its IOMMU, and refuses (and
// records) accesses outside the watched pool's live allocations; what the contract still
// protects here is live memory of other owners that a stale or foreign address could name.
impl RegisterIo for ModelRegs {
    fn read32(&self, offset: usize) -> u32 {
        if !offset.is_multiple_of(4) || self.gone() {
            return u32::MAX;
        }
        self.read_dword(offset)
    }

    unsafe fn write32(&self, offset: usize, value: u32) {
        if offset.is_multiple_of(4) && !self.gone() {
            self.write_dword(offset, value);
        }
    }

    fn read64(&self, offset: usize) -> u64 {
        if !offset.is_multiple_of(4) || self.gone() {
            return u64::MAX;
        }
        match offset {
            CAP => self.cap(),
            ASQ => self.core.lock_ctrl().asq,
            ACQ => self.core.lock_ctrl().acq,
            _ => {
                u64::from(self.read_dword(offset))
                    | u64::from(self.read_dword(offset.saturating_add(4))) << 32
            }
        }
    }

    fn size(&self) -> usize {
        self.bar_end()
    }

    unsafe fn write64(&self, offset: usize, value: u64) {
        if self.gone() {
            return;
        }
        match offset {
            ASQ => self.core.lock_ctrl().asq = value,
            ACQ => self.core.lock_ctrl().acq = value,
            CAP | VS | CSTS => {}
            o if o % 4 == 0 => {
                self.write_dword(o, value as u32);
                self.write_dword(o.saturating_add(4), (value >> 32) as u32);
            }
            _ => {}
        }
    }
}
