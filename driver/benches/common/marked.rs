//! A platform wrapper over a model controller that marks every entry into the model (and
//! times it, unless under callgrind), so that the model's cost can be split off the driver's.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use vfnvme::hal::DmaPool;
use vfnvme::platform::{Platform, RegisterIo};
use vfnvme_model::{ModelPlatform, ModelRegs};

thread_local! {
    /// Whether this thread is inside the model (read by the allocation counter).
    pub(super) static IN_MODEL: Cell<bool> = const { Cell::new(false) };
    static MODEL_NS: Cell<u64> = const { Cell::new(0) };
}

/// Whether to time each call into the model (off under callgrind, where it would only add
/// instructions).
pub static TIME_MODEL: AtomicBool = AtomicBool::new(true);

/// Runs `f` as the model's work. Never inlined: callgrind's inclusive cost of this function
/// is the model's share.
#[inline(never)]
pub fn in_model<R>(f: impl FnOnce() -> R) -> R {
    IN_MODEL.with(|m| m.set(true));
    let r = if TIME_MODEL.load(Ordering::Relaxed) {
        let t = Instant::now();
        let r = f();
        let ns = t.elapsed().as_nanos() as u64;
        MODEL_NS.with(|m| m.set(m.get() + ns));
        r
    } else {
        f()
    };
    IN_MODEL.with(|m| m.set(false));
    r
}

/// Host time spent in the model so far on this thread.
pub fn model_ns() -> u64 {
    MODEL_NS.with(|m| m.get())
}

/// A model controller whose entry points are marked.
pub struct Marked {
    /// The model controller underneath.
    pub model: Arc<ModelPlatform>,
    regs: MarkedRegs,
}

impl Marked {
    /// Wraps `model`.
    pub fn new(model: Arc<ModelPlatform>) -> Arc<Marked> {
        Arc::new(Marked {
            regs: MarkedRegs(model.clone()),
            model,
        })
    }
}

/// The model's registers, each access marked.
pub struct MarkedRegs(Arc<ModelPlatform>);

impl MarkedRegs {
    fn inner(&self) -> &ModelRegs {
        self.0.regs()
    }
}

// The wrappers are inlined into the driver so that what is left on the driver's side of the
// split is the call into `in_model` (about what a real MMIO access costs), not the wrapper's
// own prologue and closure set-up.
impl RegisterIo for MarkedRegs {
    #[inline(always)]
    fn read32(&self, offset: usize) -> u32 {
        in_model(|| self.inner().read32(offset))
    }
    #[inline(always)]
    unsafe fn write32(&self, offset: usize, value: u32) {
        // SAFETY: the caller's guarantee (`RegisterIo::write32`), passed on to the model.
        in_model(|| unsafe { self.inner().write32(offset, value) })
    }
    fn read64(&self, offset: usize) -> u64 {
        in_model(|| self.inner().read64(offset))
    }
    unsafe fn write64(&self, offset: usize, value: u64) {
        // SAFETY: the caller's guarantee (`RegisterIo::write64`), passed on to the model.
        in_model(|| unsafe { self.inner().write64(offset, value) })
    }
    fn size(&self) -> usize {
        self.inner().size()
    }
}

impl Platform for Marked {
    type Regs = MarkedRegs;
    fn regs(&self) -> &MarkedRegs {
        &self.regs
    }
    fn dma(&self) -> &DmaPool {
        self.model.dma()
    }
    fn now_ns(&self) -> u64 {
        self.model.now_ns()
    }
    fn relax(&self) {
        in_model(|| self.model.relax())
    }
    #[inline(always)]
    fn before_poll(&self, cq_id: u16) {
        in_model(|| self.model.before_poll(cq_id))
    }
    fn name(&self) -> String {
        self.model.name()
    }
}
