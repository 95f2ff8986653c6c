//! `vfnvme`: set up, list, identify and benchmark NVMe controllers, and run commands in a QEMU guest.
fn main() {}
