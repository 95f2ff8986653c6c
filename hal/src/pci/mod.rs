//! PCI: addresses, the sysfs tree, and the driver a device is bound to.

pub mod address;
pub mod bind;
pub mod paths;
pub mod sysfs;
#[cfg(test)]
pub(crate) mod test_sysfs;
