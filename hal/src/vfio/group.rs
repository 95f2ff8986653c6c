//! A VFIO group (`/dev/vfio/$N`): viability, attaching it to a container, and getting a device
//! file descriptor out of it.

use super::container::{ioctl_error, open_node, Container};
use super::ioctls;
use crate::error::HalError;
use crate::pci::address::PciAddress;
use crate::pci::paths::SysPaths;
use crate::pci::sysfs::not_viable_error;
use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use vfio_bindings::bindings::vfio::{vfio_group_status, VFIO_GROUP_FLAGS_VIABLE};

/// An open VFIO group.
#[derive(Debug)]
pub struct Group {
    file: File,
    number: u32,
}

impl Group {
    /// Opens `/dev/vfio/$number` (under `paths`).
    pub fn open(paths: &SysPaths, number: u32) -> Result<Self, HalError> {
        Ok(Group {
            file: open_node(&paths.vfio_group(number))?,
            number,
        })
    }

    /// Opens the no-IOMMU group node `/dev/vfio/noiommu-$number` (under `paths`), which VFIO
    /// makes for a device bound to vfio-pci while `enable_unsafe_noiommu_mode` is on.
    pub fn open_noiommu(paths: &SysPaths, number: u32) -> Result<Self, HalError> {
        Ok(Group {
            file: open_node(&crate::pci::noiommu::noiommu_group_node(paths, number))?,
            number,
        })
    }

    /// The group number.
    pub fn number(&self) -> u32 {
        self.number
    }

    /// Fails with [`HalError::GroupNotViable`] (naming the blocking device found in sysfs) unless
    /// every device of the group is bound to vfio-pci or to no driver.
    pub fn check_viable(&self, paths: &SysPaths) -> Result<(), HalError> {
        let mut status = vfio_group_status {
            argsz: std::mem::size_of::<vfio_group_status>() as u32,
            flags: 0,
        };
        // SAFETY: `status` is a valid vfio_group_status with argsz set; the kernel writes flags.
        unsafe { ioctls::vfio_group_get_status(self.fd(), &mut status) }
            .map_err(|e| ioctl_error("GROUP_GET_STATUS", e))?;
        if status.flags & VFIO_GROUP_FLAGS_VIABLE == 0 {
            return Err(not_viable_error(paths, self.number));
        }
        Ok(())
    }

    /// Attaches the group to `container`.
    pub fn set_container(&self, container: &Container) -> Result<(), HalError> {
        let fd = container.fd();
        // SAFETY: VFIO_GROUP_SET_CONTAINER reads one int (the container fd) through the pointer.
        unsafe { ioctls::vfio_group_set_container(self.fd(), &fd) }
            .map_err(|e| ioctl_error("GROUP_SET_CONTAINER", e))?;
        Ok(())
    }

    /// Opens the device `addr` of this group (the group must be in a container with an IOMMU).
    pub fn device_file(&self, addr: &PciAddress) -> Result<File, HalError> {
        let name = CString::new(addr.to_string()).map_err(|_| HalError::BadPciAddress {
            text: addr.to_string(),
        })?;
        // SAFETY: VFIO_GROUP_GET_DEVICE_FD reads a NUL-terminated name; `name` outlives the call.
        let fd = unsafe { ioctls::vfio_group_get_device_fd(self.fd(), name.as_ptr()) }
            .map_err(|e| ioctl_error("GROUP_GET_DEVICE_FD", e))?;
        // SAFETY: on success the ioctl returns a new fd that nothing else owns.
        Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The group's file descriptor.
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}
