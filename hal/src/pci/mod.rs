//! PCI: addresses, the sysfs tree, the driver a device is bound to, and (no-IOMMU mode) the
//! device reached through sysfs alone.

pub mod address;
pub mod bind;
pub mod noiommu;
pub mod paths;
pub mod sysfs;
#[cfg(test)]
pub(crate) mod test_sysfs;
