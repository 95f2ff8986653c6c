//! Opening a controller on a VFIO device (the in-memory model: `crate::model`).

use crate::backend::CtrlOps;
use crate::driver_ops::ffi_error;
use crate::error::{FfiError, FfiResult, Status};
use crate::types::CtrlOpts;
use std::sync::Arc;
use vfnvme::hal::{HalError, PageSize, PciAddress};
use vfnvme::vfio_platform::{VfioOptions, VfioPlatform};
use vfnvme::{Controller, ControllerOptions};

/// Opens the controller at `addr` over VFIO and brings it up.
pub fn open_vfio(addr: PciAddress, opts: &CtrlOpts) -> FfiResult<Arc<dyn CtrlOps>> {
    let platform = VfioPlatform::open(&addr.to_string(), vfio_options(opts))
        .map_err(|e| open_error(&addr, &e))?;
    let ctrl = Controller::new(platform, controller_options(opts)?)
        .map_err(|e| ffi_error(&format!("{addr}: bring-up"), &e))?;
    Ok(Arc::new(ctrl))
}

/// The VFIO options `opts` asks for.
pub(crate) fn vfio_options(opts: &CtrlOpts) -> VfioOptions {
    VfioOptions {
        page_size: if opts.small_pages {
            PageSize::Small4K
        } else {
            PageSize::Huge2M
        },
        no_iommu: opts.no_iommu,
    }
}

/// The controller options `opts` asks for.
pub(crate) fn controller_options(opts: &CtrlOpts) -> FfiResult<ControllerOptions> {
    let mut copts = ControllerOptions {
        shadow_doorbells: opts.shadow_doorbells,
        ..ControllerOptions::default()
    };
    if opts.io_queues > 0 {
        copts.io_queues = u16::try_from(opts.io_queues).unwrap_or(u16::MAX);
    }
    if opts.admin_timeout_ms > 0 {
        copts.admin_timeout_ms = u64::from(opts.admin_timeout_ms);
    }
    if opts.io_timeout_ms > 0 {
        copts.io_timeout_ms = u64::from(opts.io_timeout_ms);
    }
    copts.io_retries = crate::types::io_retries(opts.io_retries)?;
    Ok(copts)
}

/// The error of a failed VFIO open: a device that is not an NVMe controller is
/// `VFNVME_ERR_UNSUPPORTED` ("not an NVMe controller", naming what it is); anything else
/// (a missing device included) `VFNVME_ERR_DEVICE`.
pub(crate) fn open_error(addr: &PciAddress, e: &HalError) -> FfiError {
    let status = match e {
        HalError::NotNvme { .. } => Status::VfnvmeErrUnsupported,
        _ => Status::VfnvmeErrDevice,
    };
    FfiError::new(status, format!("{addr}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_iommu_is_read_only_inside_the_callers_size() {
        let new = CtrlOpts {
            no_iommu: true,
            ..CtrlOpts::default()
        };
        // SAFETY: a valid struct of this library's size.
        let read = unsafe { crate::opts::read(&new, "opts") }.unwrap();
        assert!(vfio_options(&read).no_iommu);
        assert!(
            !vfio_options(&CtrlOpts::default()).no_iommu,
            "off by default"
        );
        // A caller built against the header before the field: its size ends before it.
        let old = CtrlOpts {
            size: std::mem::offset_of!(CtrlOpts, no_iommu) as u32,
            no_iommu: true,
            ..CtrlOpts::default()
        };
        // SAFETY: the struct is larger than the size it claims.
        let read = unsafe { crate::opts::read(&old, "opts") }.unwrap();
        assert!(
            !vfio_options(&read).no_iommu,
            "an old caller gets the default"
        );
    }

    #[test]
    fn a_device_that_is_not_nvme_is_unsupported_and_named() {
        let addr = PciAddress::parse("0000:00:02.0").unwrap();
        let e = HalError::NotNvme {
            address: addr.to_string(),
            class: 0x020000,
            what: "an Ethernet controller".into(),
            vendor: 0x8086,
            device: 0x100e,
            driver: "e1000".into(),
        };
        let f = open_error(&addr, &e);
        assert_eq!(f.status, Status::VfnvmeErrUnsupported);
        assert!(
            f.message.contains("not an NVMe controller"),
            "{}",
            f.message
        );
        assert!(!f.message.contains("vfnvme setup"), "{}", f.message);
        let f = open_error(
            &addr,
            &HalError::NoSuchDevice {
                address: addr.to_string(),
            },
        );
        assert_eq!(f.status, Status::VfnvmeErrDevice);
    }
}
