//! A global allocator that counts heap allocations, split by whether the model is running.

use super::marked::IN_MODEL;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// The system allocator plus two counters (install it with `#[global_allocator]`).
pub struct CountingAlloc;
/// Allocations made outside the model (the driver and the benchmark).
pub static DRIVER_ALLOCS: AtomicU64 = AtomicU64::new(0);
/// Allocations made inside the model's entry points.
pub static MODEL_ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: delegates to the system allocator; only adds a counter.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if IN_MODEL.try_with(|m| m.get()).unwrap_or(false) {
            MODEL_ALLOCS.fetch_add(1, Ordering::Relaxed);
        } else {
            DRIVER_ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}
