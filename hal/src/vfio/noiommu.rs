//! VFIO's no-IOMMU mode (kernels with CONFIG_VFIO_NOIOMMU and `enable_unsafe_noiommu_mode`
//! on): a device bound to vfio-pci gets a group node `/dev/vfio/noiommu-N`; the group joins a
//! container whose IOMMU model is `VFIO_NOIOMMU_IOMMU`, which maps nothing. The device fd, its
//! BAR0 and config regions and its request interrupt work as with type1, and DMA addresses are
//! physical: they come from a [`PhysicalMapper`], as with uio_pci_generic.
//!
//! No Debian kernel (6.1, 6.12, 7.3) has CONFIG_VFIO_NOIOMMU, so the ioctls here run only on
//! kernels built with it; the host tests cover the choice of node, the refusals and the error
//! path of a node that is not VFIO's.

use super::container::Container;
use super::group::Group;
use crate::error::HalError;
use crate::iommu::physical::PhysicalMapper;
use crate::pci::address::PciAddress;
use std::fs::File;
use std::sync::Arc;

/// A VFIO container in the no-IOMMU model with its groups, and the mapper that gives the
/// devices' DMA addresses (physical).
#[derive(Debug)]
pub struct NoIommuContainer {
    // The groups before the container: a group leaves its container when its fd closes.
    groups: Vec<Group>,
    container: Container,
    mapper: Arc<PhysicalMapper>,
}

impl NoIommuContainer {
    /// Checks the container's API and no-IOMMU support, attaches every group (each opened with
    /// [`Group::open_noiommu`]) and sets the no-IOMMU model.
    pub fn attach(
        container: Container,
        groups: Vec<Group>,
        mapper: Arc<PhysicalMapper>,
    ) -> Result<Self, HalError> {
        container.check_api_noiommu()?;
        for g in &groups {
            g.set_container(&container)?;
        }
        container.set_iommu_noiommu()?;
        Ok(NoIommuContainer {
            groups,
            container,
            mapper,
        })
    }

    /// The device fd of `addr`, whose group is `group` (attached here).
    pub fn device_file(&self, group: u32, addr: &PciAddress) -> Result<File, HalError> {
        let g = self
            .groups
            .iter()
            .find(|g| g.number() == group)
            .ok_or(HalError::NoIommuGroup {
                address: addr.to_string(),
            })?;
        g.device_file(addr)
    }

    /// The numbers of the attached groups.
    pub fn group_numbers(&self) -> Vec<u32> {
        self.groups.iter().map(Group::number).collect()
    }

    /// The mapper of the devices' DMA memory (physical addresses).
    pub fn mapper(&self) -> &Arc<PhysicalMapper> {
        &self.mapper
    }

    /// The container.
    pub fn container(&self) -> &Container {
        &self.container
    }
}
