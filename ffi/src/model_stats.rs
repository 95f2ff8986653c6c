//! Counters of the in-memory controller model, for tests and benchmarks of ABI users.

use crate::ctrl::{deref, out_ptr, Ctrl};
use crate::error::{guard, FfiError, Status};
use crate::types::ModelStats;

/// Reads the counters of a controller opened with `vfnvme_ctrl_open_model`. Fails with
/// VFNVME_ERR_UNSUPPORTED for a real (VFIO) controller, which keeps no such counters.
///
/// Thread safety: thread-safe (the counters are read while other threads may run I/O; each is
/// exact, but they are not one atomic snapshot).
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_ctrl_model_stats(ctrl: *const Ctrl, out: *mut ModelStats) -> i32 {
    guard("vfnvme_ctrl_model_stats", || {
        let ctrl = deref(ctrl, "ctrl")?;
        let out = out_ptr(out, "out")?;
        let Some(s) = ctrl.ops.model_stats() else {
            return Err(FfiError::new(
                Status::VfnvmeErrUnsupported,
                format!(
                    "{} is not a controller model: only controllers opened with vfnvme_ctrl_open_model keep counters",
                    ctrl.ops.name()
                ),
            ));
        };
        *out = ModelStats {
            io_commands: s.io_completed.values().sum(),
            sq_doorbell_writes: s.sq_doorbell_writes,
            cq_doorbell_writes: s.cq_doorbell_writes,
            virtual_ns: s.now_ns,
        };
        Ok(0)
    })
}
