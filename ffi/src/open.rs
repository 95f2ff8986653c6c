//! Opening controllers on each platform (VFIO device, in-memory model).

use crate::backend::CtrlOps;
use crate::driver_ops::ffi_error;
use crate::error::{FfiError, FfiResult, Status};
use crate::types::{CtrlOpts, ModelOpts};
use nvme::dma::{DmaError, PageSize, PciAddress};
use nvme::model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform};
use nvme::vfio_platform::{VfioOptions, VfioPlatform};
use nvme::{Controller, ControllerOptions};
use std::sync::Arc;

/// Opens the controller at `addr` over VFIO and brings it up.
pub fn open_vfio(addr: PciAddress, opts: &CtrlOpts) -> FfiResult<Arc<dyn CtrlOps>> {
    let vopts = VfioOptions {
        page_size: if opts.small_pages {
            PageSize::Small4K
        } else {
            PageSize::Huge2M
        },
    };
    let platform =
        VfioPlatform::open(&addr.to_string(), vopts).map_err(|e| open_error(&addr, &e))?;
    let mut copts = ControllerOptions {
        shadow_doorbells: opts.shadow_doorbells,
        ..ControllerOptions::default()
    };
    if opts.io_queues > 0 {
        copts.io_queues = u16::try_from(opts.io_queues).unwrap_or(u16::MAX);
    }
    let ctrl = Controller::new(platform, copts)
        .map_err(|e| ffi_error(&format!("{addr}: bring-up"), &e))?;
    Ok(Arc::new(ctrl))
}

/// The error of a failed VFIO open: a device that is not an NVMe controller is
/// `VFNVME_ERR_UNSUPPORTED` ("not an NVMe controller", naming what it is); anything else
/// (a missing device included) `VFNVME_ERR_DEVICE`.
fn open_error(addr: &PciAddress, e: &DmaError) -> FfiError {
    let status = match e {
        DmaError::NotNvme { .. } => Status::VfnvmeErrUnsupported,
        _ => Status::VfnvmeErrDevice,
    };
    FfiError::new(status, format!("{addr}: {e}"))
}

/// Opens an in-memory controller model and brings it up.
pub fn open_model(opts: &ModelOpts) -> FfiResult<Arc<dyn CtrlOps>> {
    let count = if opts.namespaces == 0 {
        1
    } else {
        opts.namespaces
    };
    if count > 1024 {
        return Err(FfiError::new(
            Status::VfnvmeErrInvalidArgument,
            format!("model with {count} namespaces: use at most 1024"),
        ));
    }
    let lba_size = if opts.lba_size == 0 {
        4096
    } else {
        opts.lba_size
    };
    let blocks = if opts.blocks == 0 { 65536 } else { opts.blocks };
    let backing = if opts.null_data {
        Backing::Null
    } else {
        Backing::Ram
    };
    let mut config = ModelConfig {
        namespaces: (1..=count)
            .map(|nsid| ModelNamespaceConfig {
                nsid,
                blocks,
                lba_size,
                backing,
            })
            .collect(),
        max_io_queue_pairs: 64,
        max_queue_entries: 4096,
        ..ModelConfig::default()
    };
    if opts.latency_ns > 0 {
        config.io_latency_ns = u64::from(opts.latency_ns);
    }
    if opts.seed != 0 {
        config.seed = opts.seed;
    }
    let platform = ModelPlatform::new(config)
        .map_err(|e| FfiError::new(Status::VfnvmeErrInvalidArgument, format!("model: {e}")))?;
    let copts = ControllerOptions {
        shadow_doorbells: opts.shadow_doorbells,
        ..ControllerOptions::default()
    };
    let ctrl = Controller::new(platform, copts).map_err(|e| ffi_error("model: bring-up", &e))?;
    Ok(Arc::new(ctrl))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_that_is_not_nvme_is_unsupported_and_named() {
        let addr = PciAddress::parse("0000:00:02.0").unwrap();
        let e = DmaError::NotNvme {
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
            &DmaError::NoSuchDevice {
                address: addr.to_string(),
            },
        );
        assert_eq!(f.status, Status::VfnvmeErrDevice);
    }
}
