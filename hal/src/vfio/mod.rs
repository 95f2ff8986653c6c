//! VFIO type1 device access: container, group, IOMMU, device, BAR mapping.
//!
//! The flow ([`VfioDevice::open`]): the device must be bound to vfio-pci and its IOMMU group
//! viable; a container is opened (`/dev/vfio/vfio`), its API version and the type1v2 extension
//! checked; the group (`/dev/vfio/$N`) is attached to it; the type1v2 IOMMU is set; the device
//! fd is taken from the group. [`VfioDevice::open_shared`] opens several devices in one
//! container: every group joins it before anything is mapped (the first sets the IOMMU), so one
//! DMA pool serves them all. In VFIO's no-IOMMU mode ([`VfioDevice::open_noiommu_shared_with`],
//! [`noiommu`]) the groups are `/dev/vfio/noiommu-N` and the container maps nothing. The ioctls are exercised for real only inside the QEMU guest; the
//! host tests cover sysfs logic, error paths and the parsing of kernel answers.

pub mod bar;
pub mod caps;
pub mod container;
pub mod device;
pub mod group;
mod info_query;
mod ioctls;
pub mod noiommu;
pub mod removal;
pub mod sigbus;
pub mod type1;

pub use bar::{Bar, MmioDoorbell};
pub use container::Container;
pub use device::{Region, VfioDevice};
pub use group::Group;
pub use noiommu::NoIommuContainer;
pub use removal::RemovalNotice;
pub use type1::Type1Iommu;
