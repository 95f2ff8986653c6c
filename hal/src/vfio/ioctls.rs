//! The VFIO ioctls, with request numbers computed from the uapi's `VFIO_TYPE`/`VFIO_BASE` (from
//! `vfio-bindings`) plus each ioctl's documented offset. Every VFIO ioctl is `_IO` (no size or
//! direction is encoded: the structures carry `argsz` instead).

use nix::{
    ioctl_none, ioctl_readwrite_bad, ioctl_write_int_bad, ioctl_write_ptr_bad, request_code_none,
};
use vfio_bindings::bindings::vfio::{
    vfio_device_info, vfio_group_status, vfio_iommu_type1_dma_map, vfio_iommu_type1_dma_unmap,
    vfio_iommu_type1_info, vfio_irq_info, vfio_irq_set, vfio_region_info, VFIO_BASE, VFIO_TYPE,
};

// Offsets from VFIO_BASE, as linux/vfio.h defines them.
const GET_API_VERSION: u32 = VFIO_BASE;
const CHECK_EXTENSION: u32 = VFIO_BASE + 1;
const SET_IOMMU: u32 = VFIO_BASE + 2;
const GROUP_GET_STATUS: u32 = VFIO_BASE + 3;
const GROUP_SET_CONTAINER: u32 = VFIO_BASE + 4;
const GROUP_GET_DEVICE_FD: u32 = VFIO_BASE + 6;
const DEVICE_GET_INFO: u32 = VFIO_BASE + 7;
const DEVICE_GET_REGION_INFO: u32 = VFIO_BASE + 8;
const DEVICE_GET_IRQ_INFO: u32 = VFIO_BASE + 9;
const DEVICE_SET_IRQS: u32 = VFIO_BASE + 10;
const DEVICE_RESET: u32 = VFIO_BASE + 11;
const IOMMU_GET_INFO: u32 = VFIO_BASE + 12;
const IOMMU_MAP_DMA: u32 = VFIO_BASE + 13;
const IOMMU_UNMAP_DMA: u32 = VFIO_BASE + 14;

ioctl_none!(
    /// VFIO_GET_API_VERSION on the container: returns the API version.
    vfio_get_api_version,
    VFIO_TYPE,
    GET_API_VERSION
);
ioctl_write_int_bad!(
    /// VFIO_CHECK_EXTENSION on the container: > 0 when the extension is supported.
    vfio_check_extension,
    request_code_none!(VFIO_TYPE, CHECK_EXTENSION)
);
ioctl_write_int_bad!(
    /// VFIO_SET_IOMMU on the container, with the IOMMU type by value.
    vfio_set_iommu,
    request_code_none!(VFIO_TYPE, SET_IOMMU)
);
ioctl_readwrite_bad!(
    /// VFIO_GROUP_GET_STATUS on a group.
    vfio_group_get_status,
    request_code_none!(VFIO_TYPE, GROUP_GET_STATUS),
    vfio_group_status
);
ioctl_write_ptr_bad!(
    /// VFIO_GROUP_SET_CONTAINER on a group, with a pointer to the container fd.
    vfio_group_set_container,
    request_code_none!(VFIO_TYPE, GROUP_SET_CONTAINER),
    libc::c_int
);
ioctl_write_ptr_bad!(
    /// VFIO_GROUP_GET_DEVICE_FD on a group, with the device name as a C string; returns an fd.
    vfio_group_get_device_fd,
    request_code_none!(VFIO_TYPE, GROUP_GET_DEVICE_FD),
    libc::c_char
);
ioctl_readwrite_bad!(
    /// VFIO_DEVICE_GET_INFO on a device.
    vfio_device_get_info,
    request_code_none!(VFIO_TYPE, DEVICE_GET_INFO),
    vfio_device_info
);
ioctl_readwrite_bad!(
    /// VFIO_DEVICE_GET_REGION_INFO on a device (the buffer may extend past the struct for caps).
    vfio_device_get_region_info,
    request_code_none!(VFIO_TYPE, DEVICE_GET_REGION_INFO),
    vfio_region_info
);
ioctl_readwrite_bad!(
    /// VFIO_DEVICE_GET_IRQ_INFO on a device: how many interrupts an index has.
    vfio_device_get_irq_info,
    request_code_none!(VFIO_TYPE, DEVICE_GET_IRQ_INFO),
    vfio_irq_info
);
ioctl_write_ptr_bad!(
    /// VFIO_DEVICE_SET_IRQS on a device (the buffer extends past the struct for its data).
    vfio_device_set_irqs,
    request_code_none!(VFIO_TYPE, DEVICE_SET_IRQS),
    vfio_irq_set
);
ioctl_none!(
    /// VFIO_DEVICE_RESET on a device.
    vfio_device_reset,
    VFIO_TYPE,
    DEVICE_RESET
);
ioctl_readwrite_bad!(
    /// VFIO_IOMMU_GET_INFO on a type1 container (the buffer may extend past the struct for caps).
    vfio_iommu_get_info,
    request_code_none!(VFIO_TYPE, IOMMU_GET_INFO),
    vfio_iommu_type1_info
);
ioctl_write_ptr_bad!(
    /// VFIO_IOMMU_MAP_DMA on a type1 container.
    vfio_iommu_map_dma,
    request_code_none!(VFIO_TYPE, IOMMU_MAP_DMA),
    vfio_iommu_type1_dma_map
);
ioctl_readwrite_bad!(
    /// VFIO_IOMMU_UNMAP_DMA on a type1 container; the kernel writes back the unmapped size.
    vfio_iommu_unmap_dma,
    request_code_none!(VFIO_TYPE, IOMMU_UNMAP_DMA),
    vfio_iommu_type1_dma_unmap
);

/// The request number of an `_IO(VFIO_TYPE, nr)` ioctl, for tests.
#[cfg(test)]
pub(crate) fn code(nr: u32) -> nix::sys::ioctl::ioctl_num_type {
    request_code_none!(VFIO_TYPE, nr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_numbers_follow_the_io_encoding() {
        // _IO(type, nr) is (type << 8) | nr with no size or direction bits on x86 and arm64.
        let semicolon: nix::sys::ioctl::ioctl_num_type = b';'.into();
        assert_eq!(code(GET_API_VERSION), (semicolon << 8) | 100);
        assert_eq!(code(IOMMU_UNMAP_DMA), (semicolon << 8) | 114);
        assert_eq!(code(DEVICE_RESET), (semicolon << 8) | 111);
        assert_eq!(code(DEVICE_GET_IRQ_INFO), (semicolon << 8) | 109);
        assert_eq!(code(DEVICE_SET_IRQS), (semicolon << 8) | 110);
    }
}
