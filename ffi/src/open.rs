//! Opening controllers on each platform (VFIO device, in-memory model).

use crate::backend::CtrlOps;
use crate::error::{FfiError, FfiResult, Status};
use crate::types::{CtrlOpts, ModelOpts};
use std::sync::Arc;
use vfnvme::dma::PciAddress;

/// Opens the controller at `addr` over VFIO.
pub fn open_vfio(addr: PciAddress, _opts: &CtrlOpts) -> FfiResult<Arc<dyn CtrlOps>> {
    Err(FfiError::new(
        Status::VfnvmeErrUnsupported,
        format!("{addr}: the VFIO platform is not part of this build yet"),
    ))
}

/// Opens an in-memory controller model.
pub fn open_model(_opts: &ModelOpts) -> FfiResult<Arc<dyn CtrlOps>> {
    Err(FfiError::new(
        Status::VfnvmeErrUnsupported,
        "the controller model is not part of this build yet",
    ))
}
