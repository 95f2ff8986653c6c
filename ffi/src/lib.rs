//! The C ABI of vfnvme.
