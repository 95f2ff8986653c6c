//! Shared parts of the driver's benchmarks: heap allocation counting split between driver and
//! model, a platform wrapper that marks (and optionally times) the model's work so that
//! callgrind and the wall clock can split it off, the callgrind runner, a model subsystem
//! brought up on the wrapper, and argument helpers.
#![allow(dead_code, unused_imports)]

pub mod alloc;
pub mod args;
pub mod callgrind;
pub mod marked;
pub mod subsystem;

pub use alloc::{CountingAlloc, DRIVER_ALLOCS, MODEL_ALLOCS};
pub use args::{arg_value, median};
pub use callgrind::{callgrind_per_io, PerIo};
pub use marked::{in_model, model_ns, Marked, MarkedRegs, TIME_MODEL};
pub use subsystem::{bench_subsystem, Bench};
