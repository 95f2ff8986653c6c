//! DMA memory: the pool of IOMMU-mapped buffers, hugepages, and the barriers that order
//! memory the device reads or writes.

pub mod barrier;
pub mod hugepages;
pub mod pool;

#[cfg(test)]
mod physical_tests;
