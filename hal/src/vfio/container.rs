//! The VFIO container (`/dev/vfio/vfio`): API version, the type1v2 extension, and setting the
//! IOMMU once a group is attached.

use super::ioctls;
use crate::error::HalError;
use crate::pci::paths::{io_error, SysPaths};
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use vfio_bindings::bindings::vfio::{VFIO_TYPE1v2_IOMMU, VFIO_API_VERSION, VFIO_NOIOMMU_IOMMU};

/// An open VFIO container.
#[derive(Debug)]
pub struct Container {
    file: File,
}

/// Opens a VFIO node read-write, mapping a missing node to [`HalError::NoVfio`].
pub(crate) fn open_node(path: &std::path::Path) -> Result<File, HalError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => HalError::NoVfio {
                path: path.display().to_string(),
            },
            _ if e.raw_os_error() == Some(libc::EBUSY) => HalError::Io {
                path: path.display().to_string(),
                source: std::io::Error::new(
                    e.kind(),
                    "busy: this VFIO group is already open, by another process (QEMU, another vfnvme) or by an earlier open in this process that is still alive; close that first",
                ),
            },
            _ => io_error(path, e),
        })
}

pub(crate) fn ioctl_error(op: &'static str, e: nix::Error) -> HalError {
    HalError::Ioctl {
        op,
        source: e.into(),
    }
}

impl Container {
    /// Opens `/dev/vfio/vfio` (under `paths`).
    pub fn open(paths: &SysPaths) -> Result<Self, HalError> {
        Ok(Container {
            file: open_node(&paths.vfio_container())?,
        })
    }

    /// Checks the API version and that the type1v2 IOMMU is available.
    pub fn check_api(&self) -> Result<(), HalError> {
        self.check_api_for(VFIO_TYPE1v2_IOMMU, "type1v2")
    }

    /// Checks the API version and that VFIO's no-IOMMU mode is available (the kernel has
    /// CONFIG_VFIO_NOIOMMU and `enable_unsafe_noiommu_mode` is on).
    pub fn check_api_noiommu(&self) -> Result<(), HalError> {
        self.check_api_for(VFIO_NOIOMMU_IOMMU, "no-IOMMU")
    }

    fn check_api_for(&self, extension: u32, name: &str) -> Result<(), HalError> {
        // SAFETY: VFIO_GET_API_VERSION takes no argument; the fd is open.
        let version = unsafe { ioctls::vfio_get_api_version(self.fd()) }
            .map_err(|e| ioctl_error("GET_API_VERSION", e))?;
        if version != VFIO_API_VERSION as i32 {
            return Err(HalError::Unsupported {
                what: format!("API version is {version}, expected {VFIO_API_VERSION}"),
            });
        }
        // SAFETY: VFIO_CHECK_EXTENSION takes the extension number by value.
        let has = unsafe { ioctls::vfio_check_extension(self.fd(), extension as i32) }
            .map_err(|e| ioctl_error("CHECK_EXTENSION", e))?;
        if has <= 0 {
            return Err(HalError::Unsupported {
                what: format!("container has no {name} IOMMU support"),
            });
        }
        Ok(())
    }

    /// Sets VFIO's no-IOMMU model (`VFIO_NOIOMMU_IOMMU`): no DMA mapping, device addresses are
    /// physical; a no-IOMMU group must already be attached.
    pub fn set_iommu_noiommu(&self) -> Result<(), HalError> {
        // SAFETY: VFIO_SET_IOMMU takes the IOMMU type by value.
        unsafe { ioctls::vfio_set_iommu(self.fd(), VFIO_NOIOMMU_IOMMU as i32) }
            .map_err(|e| ioctl_error("SET_IOMMU(NOIOMMU)", e))?;
        Ok(())
    }

    /// Sets the type1v2 IOMMU model; a group must already be attached.
    pub fn set_iommu_type1v2(&self) -> Result<(), HalError> {
        // SAFETY: VFIO_SET_IOMMU takes the IOMMU type by value.
        unsafe { ioctls::vfio_set_iommu(self.fd(), VFIO_TYPE1v2_IOMMU as i32) }
            .map_err(|e| ioctl_error("SET_IOMMU(TYPE1v2)", e))?;
        Ok(())
    }

    /// The container's file descriptor.
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pci::test_sysfs::FakeSys;

    #[test]
    fn missing_dev_vfio_says_how_to_load_it() {
        let fake = FakeSys::new();
        let err = Container::open(&fake.paths()).unwrap_err();
        match &err {
            HalError::NoVfio { path } => assert!(path.ends_with("dev/vfio/vfio"), "{path}"),
            other => panic!("wrong error {other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.contains("modprobe vfio-pci"), "{msg}");
        assert!(msg.contains("intel_iommu=on"), "{msg}");
    }

    #[test]
    fn a_non_vfio_file_fails_the_api_check_cleanly() {
        let fake = FakeSys::new();
        fake.dev_vfio(&[]);
        let c = Container::open(&fake.paths()).unwrap();
        let err = c.check_api().unwrap_err();
        assert!(
            matches!(
                err,
                HalError::Ioctl {
                    op: "GET_API_VERSION",
                    ..
                }
            ),
            "{err}"
        );
    }
}
