//! The model's IOMMU: records IOVA → process address mappings so that the model's DMA engine can
//! translate every device address, and refuse the ones nobody mapped.

use super::sharded::ShardedRw;
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLockReadGuard};
use vfnvme_hal::{DmaPool, DmaRegion, HalError, Iommu, IovaAllocator, IovaRange, WeakDmaPool};

/// Where the model's IOVA space starts (1 TiB). Together with [`MODEL_IOVA_END`] it lies between
/// where x86-64 Linux puts program text (low addresses) and where it puts the heap of PIE
/// programs (0x55..) and mmaps (0x7f..), so an IOVA is never accidentally a process address of
/// the same buffer, and a process address passed as an IOVA is not mapped.
pub const MODEL_IOVA_START: u64 = 1 << 40;
/// The last usable IOVA of the model (64 TiB - 1).
pub const MODEL_IOVA_END: u64 = (1 << 46) - 1;

/// One mapping: `len` bytes at process address `vaddr`.
#[derive(Debug, Clone)]
pub(crate) struct Mapping {
    pub vaddr: usize,
    pub len: u64,
    /// The watched pool's region behind this mapping, looked up on the first device access
    /// (`None` if it is not one of that pool's regions). It holds the region's allocation
    /// table, not the pool, so that checking an access touches no reference count shared by
    /// every thread (upgrading the pool's `Weak` did, 2-3 times per I/O). Shared by every
    /// shard's copy of the table.
    region: Arc<OnceLock<Option<DmaRegion>>>,
}

/// An IOMMU that only records mappings (keyed by IOVA).
///
/// Once [`watch`](Self::watch) gave it the pool that maps into it, every device access must also
/// lie inside one *live* allocation of that pool, within the length it was allocated with: an
/// access to memory the driver gave back (or never allocated, or past the end of the buffer it
/// asked for, even inside the pool chunk behind it) is refused like an IOMMU fault and recorded
/// as a violation.
#[derive(Debug)]
pub struct ModelIommu {
    alloc: IovaAllocator,
    maps: ShardedRw<BTreeMap<u64, Mapping>>,
    pool: OnceLock<WeakDmaPool>,
    violations: Mutex<Vec<String>>,
    faults: AtomicU64,
    last_fault: AtomicU64,
}

impl Default for ModelIommu {
    fn default() -> Self {
        Self::new()
    }
}

impl ModelIommu {
    /// An empty IOMMU over the model's IOVA range.
    pub fn new() -> Self {
        ModelIommu {
            alloc: IovaAllocator::new(vec![IovaRange {
                start: MODEL_IOVA_START,
                end: MODEL_IOVA_END,
            }]),
            maps: ShardedRw::new(BTreeMap::new()),
            pool: OnceLock::new(),
            violations: Mutex::new(Vec::new()),
            faults: AtomicU64::new(0),
            last_fault: AtomicU64::new(0),
        }
    }

    /// Checks every later device access against `pool`'s live allocations (the first pool
    /// given wins).
    pub fn watch(&self, pool: &DmaPool) {
        let _ = self.pool.set(pool.downgrade());
    }

    /// Device accesses that hit no live allocation of the watched pool, in order.
    pub fn violations(&self) -> Vec<String> {
        self.violations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether the device may access `iova..iova+len` (`what`: "read" or "write"): inside a
    /// live allocation of the watched pool, within its requested length
    /// ([`DmaPool::is_live_iova_range`]), if there is a watched pool. Records a violation
    /// otherwise.
    pub(crate) fn allowed(&self, hit: Hit<'_>, iova: u64, len: u64, what: &str) -> bool {
        let Some(weak) = self.pool.get() else {
            return true;
        };
        let region = hit.mapping.region.get_or_init(|| {
            weak.upgrade()
                .and_then(|pool| pool.region_of(hit.mapping.vaddr as *const u8))
                .filter(|r| r.va() == hit.mapping.vaddr && r.iova() == hit.start)
        });
        let live = match region {
            // One atomic load of the region's allocation table.
            Some(r) => r.span(hit.addr as *const u8, len as usize).is_some(),
            // Not a region of the pool as mapped (or the pool is gone): the pool decides.
            None => match weak.upgrade() {
                Some(pool) => pool.is_live_iova_range(iova, len),
                None => true,
            },
        };
        if live {
            return true;
        }
        let v = format!(
            "device {what} of {len} bytes at IOVA {iova:#x} outside every live DMA allocation (freed, never allocated, or past the length allocated)"
        );
        log::error!("model: {v}");
        self.violations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(v);
        false
    }

    /// The number of live mappings.
    pub fn mapping_count(&self) -> usize {
        self.read().len()
    }

    /// Device accesses that hit no mapping so far (what a real IOMMU logs as DMA faults, e.g.
    /// Linux's `DMAR: [DMA Read] ... fault addr`).
    pub fn fault_count(&self) -> u64 {
        self.faults.load(Ordering::Relaxed)
    }

    /// The IOVA of the latest fault (0 if none, or if the fault was at address 0).
    pub fn last_fault_iova(&self) -> u64 {
        self.last_fault.load(Ordering::Relaxed)
    }

    /// Records a device access to `iova` that hit no mapping.
    pub(crate) fn fault(&self, iova: u64) -> super::dma_engine::DmaFault {
        self.faults.fetch_add(1, Ordering::Relaxed);
        self.last_fault.store(iova, Ordering::Relaxed);
        super::dma_engine::DmaFault
    }

    /// The mapping table, locked for reading: while the guard lives no mapping can be removed.
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, BTreeMap<u64, Mapping>> {
        self.maps.read()
    }
}

/// A device address found in a mapping.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hit<'a> {
    /// The process address.
    pub addr: usize,
    /// The mapping's first IOVA.
    start: u64,
    mapping: &'a Mapping,
}

/// Finds the process address of `iova..iova+len` if one mapping covers all of it.
pub(crate) fn lookup(maps: &BTreeMap<u64, Mapping>, iova: u64, len: u64) -> Option<Hit<'_>> {
    let (&start, m) = maps.range(..=iova).next_back()?;
    let off = iova - start;
    let end = off.checked_add(len)?;
    (end <= m.len).then(|| Hit {
        addr: m.vaddr + off as usize,
        start,
        mapping: m,
    })
}

fn io_error(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, what.to_string())
}

impl Iommu for ModelIommu {
    fn reserve_iova(&self, len: u64, align: u64) -> Result<u64, HalError> {
        self.alloc.reserve(len, align)
    }

    unsafe fn map(&self, vaddr: NonNull<u8>, len: u64, iova: u64) -> Result<(), HalError> {
        self.maps.write(|maps| {
            let end = iova.checked_add(len);
            let overlaps = end.is_none()
                || len == 0
                || maps
                    .range(..end.unwrap_or(u64::MAX))
                    .next_back()
                    .is_some_and(|(&s, m)| s + m.len > iova);
            if overlaps {
                return Err(HalError::MapFailed {
                    iova,
                    len,
                    source: io_error("empty or overlapping mapping"),
                    hint: ": reserve IOVA space with reserve_iova before mapping",
                });
            }
            maps.insert(
                iova,
                Mapping {
                    vaddr: vaddr.as_ptr() as usize,
                    len,
                    region: Arc::default(),
                },
            );
            Ok(())
        })
    }

    fn unmap(&self, iova: u64, len: u64) -> Result<(), HalError> {
        self.maps.write(|maps| match maps.get(&iova) {
            Some(m) if m.len == len => {
                maps.remove(&iova);
                Ok(())
            }
            _ => Err(HalError::UnmapFailed {
                iova,
                len,
                source: io_error("no such mapping"),
            }),
        })
    }

    fn iova_ranges(&self) -> Vec<IovaRange> {
        self.alloc.ranges().to_vec()
    }
}
