//! DMA memory: hugepage-backed regions, each mapped into the IOMMU once and carved into buffers.
//!
//! A [`DmaBuffer`] is owned: while the driver holds it for an I/O, safe code can't touch it.
//! Dropping it returns the chunk to its pool; regions are unmapped when the pool and every
//! buffer from it are gone.
//!
//! Every region is carved into chunks of one size class, and keeps one atomic per chunk: the
//! length of the live allocation that starts there (0 while the chunk is free). From any
//! address, [`DmaPool::allocation_of`] and [`DmaRegion::span`] find the allocation that
//! contains it in O(1) and without locks, so borrowed memory (the C ABI) is checked against the
//! buffer the caller asked for, and a freed buffer fails the check.

use crate::error::HalError;
use crate::iommu::{Addressing, Iommu};
use memmap2::{MmapMut, MmapOptions};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// The page size backing DMA regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageSize {
    /// 4 KiB pages: the fallback when no hugepages are reserved.
    Small4K,
    /// 2 MiB hugepages (the default).
    Huge2M,
    /// 1 GiB hugepages, on request.
    Huge1G,
}

impl PageSize {
    /// The page size in bytes.
    pub fn bytes(self) -> usize {
        match self {
            PageSize::Small4K => 4096,
            PageSize::Huge2M => 2 << 20,
            PageSize::Huge1G => 1 << 30,
        }
    }
    /// The next smaller page size to fall back to (1 GiB → 2 MiB → 4 KiB).
    fn smaller(self) -> PageSize {
        match self {
            PageSize::Huge1G => PageSize::Huge2M,
            _ => PageSize::Small4K,
        }
    }
    fn huge_shift(self) -> Option<u8> {
        match self {
            PageSize::Small4K => None,
            PageSize::Huge2M => Some(21),
            PageSize::Huge1G => Some(30),
        }
    }
}

/// Most regions a pool can hold; translation scans this table without locks.
const MAX_REGIONS: usize = 1024;
/// The smallest chunk handed out.
const MIN_CHUNK: usize = 4096;

/// One entry of the lock-free translation table.
struct RegionSlot {
    va: AtomicUsize,
    len: AtomicUsize,
    iova: AtomicU64,
    /// The region's chunks and their allocations; set once, before the slot is published.
    chunks: OnceLock<Chunks>,
}

/// The chunks of one region: all of one size class, each with the length of the live
/// allocation that starts there.
#[derive(Debug)]
struct Chunks {
    /// log2 of the chunk size.
    shift: u32,
    /// Per chunk: the requested length of its live allocation, 0 while the chunk is free.
    live: Arc<[AtomicU32]>,
}

impl Chunks {
    /// The cell of the chunk at byte offset `off` of the region.
    #[inline(always)]
    fn cell(&self, off: usize) -> Option<&AtomicU32> {
        self.live.get(off >> self.shift)
    }
}

struct Region {
    map: MmapMut,
    iova: u64,
}

struct PoolInner {
    iommu: Arc<dyn Iommu>,
    page: Mutex<PageSize>,
    slots: Box<[RegionSlot]>,
    published: AtomicUsize,
    regions: Mutex<Vec<Region>>,
    /// Free chunks (address, IOVA, region index), indexed by size class (log2 of the chunk
    /// size).
    free: Mutex<Vec<Vec<(usize, u64, usize)>>>,
    /// How many times [`DmaPool::leak`] was called.
    leaks: AtomicUsize,
}

impl PoolInner {
    /// The live-length cell of the chunk at `va` in region `region`.
    fn live_cell(&self, region: usize, va: usize) -> Option<&AtomicU32> {
        let slot = self.slots.get(region)?;
        let chunks = slot.chunks.get()?;
        chunks.cell(va.wrapping_sub(slot.va.load(Ordering::Relaxed)))
    }
}

/// A source of DMA buffers: hugepage regions mapped once into an IOMMU.
///
/// Cloning is cheap and shares the pool. Allocation locks; it is a control-path operation.
/// [`DmaPool::translate`] is lock-free.
#[derive(Clone)]
pub struct DmaPool {
    inner: Arc<PoolInner>,
}

impl std::fmt::Debug for DmaPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaPool")
            .field("regions", &self.inner.published.load(Ordering::Acquire))
            .finish()
    }
}

impl DmaPool {
    /// Whether `other` is this same pool (a clone of it): buffers of one are mapped for the
    /// devices of the other (multipath paths must share their DMA address space).
    pub fn same_pool(&self, other: &DmaPool) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// A pool that maps its regions into `iommu`, backed by pages of `page` size when the system
    /// has them reserved (falling back to 4 KiB pages with a warning otherwise).
    pub fn new(iommu: Arc<dyn Iommu>, page: PageSize) -> Self {
        let slots = (0..MAX_REGIONS)
            .map(|_| RegionSlot {
                va: AtomicUsize::new(0),
                len: AtomicUsize::new(0),
                iova: AtomicU64::new(0),
                chunks: OnceLock::new(),
            })
            .collect();
        DmaPool {
            inner: Arc::new(PoolInner {
                iommu,
                page: Mutex::new(page),
                slots,
                published: AtomicUsize::new(0),
                regions: Mutex::new(Vec::new()),
                free: Mutex::new(vec![Vec::new(); 64]),
                leaks: AtomicUsize::new(0),
            }),
        }
    }

    /// The IOMMU this pool maps into.
    pub fn iommu(&self) -> &Arc<dyn Iommu> {
        &self.inner.iommu
    }

    /// The page size regions are currently backed by (4 KiB after a fallback).
    pub fn page_size(&self) -> PageSize {
        *self.inner.page.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Allocates a zeroed buffer of at least `len` bytes, aligned to 4 KiB (and to its own
    /// power-of-two size, up to the page size).
    pub fn alloc(&self, len: usize) -> Result<DmaBuffer, HalError> {
        const MAX: usize = 1 << 30;
        if len == 0 || len > MAX {
            return Err(HalError::BadBufferSize { len, max: MAX });
        }
        let chunk = len.next_power_of_two().max(MIN_CHUNK);
        let class = chunk.trailing_zeros() as usize;
        let popped = self.inner.free.lock().unwrap_or_else(|e| e.into_inner())[class].pop();
        let (va, iova, region) = match popped {
            Some(c) => c,
            None => self.refill(class, chunk)?,
        };
        // SAFETY: `va` points to `chunk` bytes inside a live mapped region owned by the pool,
        // which outlives the buffer through the Arc the buffer holds; the chunk was on no free
        // list, so no other buffer aliases it.
        unsafe { std::ptr::write_bytes(va as *mut u8, 0, chunk) };
        let buf = DmaBuffer {
            // A region address is never null.
            ptr: NonNull::new(va as *mut u8).ok_or(HalError::BadBufferSize { len, max: MAX })?,
            len,
            // Both fit 32 bits: a class is below 64, a region index below MAX_REGIONS.
            class: class as u32,
            region: region as u32,
            iova,
            pool: self.inner.clone(),
        };
        // Live from here on (`len <= MAX` fits 32 bits): the zeroing above happens before.
        buf.publish_len(len);
        Ok(buf)
    }

    /// Maps a new region and splits it into chunks of `chunk` bytes; returns one of them.
    fn refill(&self, class: usize, chunk: usize) -> Result<(usize, u64, usize), HalError> {
        let (va, iova, region_len, region) = self.map_region(chunk)?;
        let mut free = self.inner.free.lock().unwrap_or_else(|e| e.into_inner());
        let mut off = chunk;
        while off + chunk <= region_len {
            free[class].push((va + off, iova + off as u64, region));
            off += chunk;
        }
        // Keep the pop order ascending, which makes address patterns easier to read.
        free[class].reverse();
        Ok((va, iova, region))
    }

    /// Memory for a region of at least `min_len` bytes over an IOMMU: pages of the pool's
    /// size, falling back to smaller ones (with a warning) when the system has none free.
    fn map_translated(&self, min_len: usize) -> Result<(MmapMut, PageSize), HalError> {
        // Miri supports only plain private anonymous mappings (no hugepages, no MAP_POPULATE).
        let mut page = if cfg!(miri) {
            PageSize::Small4K
        } else {
            self.page_size()
        };
        loop {
            let len = min_len
                .max(page.bytes().max(2 << 20))
                .next_multiple_of(page.bytes());
            match anon_map(len, page) {
                Ok(m) => return Ok((m, page)),
                Err(e) if page != PageSize::Small4K => {
                    let next = page.smaller();
                    log::warn!(
                        "{}",
                        fallback_warning(
                            page,
                            next,
                            len,
                            crate::mem::hugepages::status(page).ok().flatten(),
                            &e
                        )
                    );
                    page = next;
                    *self.inner.page.lock().unwrap_or_else(|e| e.into_inner()) = page;
                }
                Err(source) => return Err(HalError::Allocation { len, source }),
            }
        }
    }

    /// Memory for a region without an IOMMU: exactly one hugepage (the largest memory whose
    /// physical address is contiguous and fixed), never 4 KiB pages.
    fn map_physical(&self, chunk: usize) -> Result<(MmapMut, PageSize), HalError> {
        let page = match self.page_size() {
            PageSize::Small4K => PageSize::Huge2M,
            p => p,
        };
        let len = page.bytes();
        if chunk > len {
            return Err(HalError::NoIommuBufferTooLarge {
                len: chunk,
                page: len,
            });
        }
        let map =
            anon_map(len, page).map_err(|source| HalError::NoIommuHugepages { len, source })?;
        Ok((map, page))
    }

    /// Maps a region of at least `chunk` bytes for chunks of `chunk` bytes (a power of two);
    /// returns its address, IOVA, length and index in the translation table.
    fn map_region(&self, chunk: usize) -> Result<(usize, u64, usize, usize), HalError> {
        let physical = self.inner.iommu.addressing() == Addressing::Physical;
        let (map, page) = if physical {
            self.map_physical(chunk)?
        } else {
            self.map_translated(chunk)?
        };
        let len = map.len();
        let align = (page.bytes() as u64)
            .max(2 << 20)
            .min(len.next_power_of_two() as u64);
        let va = map.as_ptr() as usize;
        let ptr = NonNull::new(va as *mut u8).ok_or(HalError::IovaExhausted { len: len as u64 })?;
        // SAFETY: the mapping is stored in `regions` below and lives until the pool drops,
        // where it is unmapped from the IOMMU before the memory is released.
        let iova = unsafe { self.inner.iommu.map_region(ptr, len as u64, align)? };
        let mut regions = self.inner.regions.lock().unwrap_or_else(|e| e.into_inner());
        let idx = self.inner.published.load(Ordering::Relaxed);
        if idx >= MAX_REGIONS {
            let _ = self.inner.iommu.unmap(iova, len as u64);
            return Err(HalError::IovaExhausted { len: len as u64 });
        }
        let slot = &self.inner.slots[idx];
        slot.va.store(va, Ordering::Relaxed);
        slot.len.store(len, Ordering::Relaxed);
        slot.iova.store(iova, Ordering::Relaxed);
        let chunks = Chunks {
            shift: chunk.trailing_zeros(),
            live: (0..len.div_ceil(chunk))
                .map(|_| AtomicU32::new(0))
                .collect(),
        };
        // The slot is unpublished, so nothing set it before; an error cannot happen.
        let _ = slot.chunks.set(chunks);
        self.inner.published.store(idx + 1, Ordering::Release);
        regions.push(Region { map, iova });
        Ok((va, iova, len, idx))
    }

    /// The live allocation of this pool that contains `addr` (None if `addr` is outside the
    /// pool's regions or its chunk is free). Lock-free, O(1) once the region is known (regions
    /// are few: one per size class and growth step).
    pub fn allocation_of(&self, addr: *const u8) -> Option<Allocation> {
        let r = self.region_of(addr)?;
        let off = (addr as usize).wrapping_sub(r.va);
        let len = r
            .live
            .as_ref()?
            .get(off >> r.shift)?
            .load(Ordering::Acquire) as usize;
        if len == 0 {
            return None;
        }
        let start = off >> r.shift << r.shift;
        Some(Allocation {
            va: r.va + start,
            iova: r.iova + start as u64,
            len,
            capacity: 1 << r.shift,
        })
    }

    /// The `len` bytes at `addr` as a [`DmaSpan`], if they lie inside one live allocation of
    /// this pool (within the length it was allocated with). Lock-free.
    pub fn span(&self, addr: *const u8, len: usize) -> Option<DmaSpan> {
        self.region_of(addr)?.span(addr, len)
    }

    /// Translates an address inside any region of this pool to its IOVA. Lock-free.
    pub fn translate(&self, addr: *const u8) -> Option<u64> {
        self.region_of(addr)
            .map(|r| r.iova + (addr as usize - r.va) as u64)
    }

    /// Translates the `len` bytes at `addr` to the IOVA of the first byte, if they all lie in
    /// one region of this pool (one lookup). Lock-free.
    pub fn translate_range(&self, addr: *const u8, len: usize) -> Option<u64> {
        self.region_of(addr)?.translate_range(addr, len)
    }

    /// The region of this pool that contains `addr`. Regions stay mapped until the pool and
    /// every buffer from it are gone, so a caller may cache the answer that long (it keeps the
    /// region's allocation table alive, not its memory). Lock-free.
    pub fn region_of(&self, addr: *const u8) -> Option<DmaRegion> {
        let a = addr as usize;
        let n = self.inner.published.load(Ordering::Acquire);
        self.inner.slots[..n].iter().find_map(|s| {
            let va = s.va.load(Ordering::Relaxed);
            let len = s.len.load(Ordering::Relaxed);
            (a.wrapping_sub(va) < len).then(|| DmaRegion {
                va,
                len,
                iova: s.iova.load(Ordering::Relaxed),
                shift: s.chunks.get().map_or(0, |c| c.shift),
                live: s.chunks.get().map(|c| c.live.clone()),
            })
        })
    }
}

/// Live allocations and leaks: what a device model checks every access against.
impl DmaPool {
    /// Whether the `len` bytes at device address `iova` lie inside one live allocation
    /// (allocated and not given back; a leaked one stays live), within the length it was
    /// allocated with: the spare bytes of its chunk are not the caller's buffer (as for
    /// [`DmaRegion::span`]). Lock-free: one scan of the region table by IOVA and one atomic
    /// load.
    pub fn is_live_iova_range(&self, iova: u64, len: u64) -> bool {
        let n = self.inner.published.load(Ordering::Acquire);
        self.inner.slots[..n].iter().any(|s| {
            let off = iova.wrapping_sub(s.iova.load(Ordering::Relaxed));
            if off >= s.len.load(Ordering::Relaxed) as u64 {
                return false;
            }
            let Some(chunks) = s.chunks.get() else {
                return false;
            };
            // The allocation's requested length; 0 (a free chunk) refuses everything.
            let live = chunks
                .cell(off as usize)
                .map_or(0, |c| u64::from(c.load(Ordering::Acquire)));
            // Offset inside the allocation (which starts at its chunk's start).
            let inner = off & ((1u64 << chunks.shift) - 1);
            inner < live && len <= live - inner
        })
    }

    /// How many allocations are live (a scan of every chunk: for checks and tests).
    pub fn live_allocations(&self) -> usize {
        let n = self.inner.published.load(Ordering::Acquire);
        self.inner.slots[..n]
            .iter()
            .filter_map(|s| s.chunks.get())
            .flat_map(|c| c.live.iter())
            .filter(|l| l.load(Ordering::Acquire) != 0)
            .count()
    }

    /// Leaks `what` on purpose: its buffers are never given back, reused or unmapped, so a
    /// device that may still reach them can't hit memory that has another use. Counted in
    /// [`leaks`](Self::leaks).
    pub fn leak<T>(&self, what: T) {
        std::mem::forget(what);
        self.inner.leaks.fetch_add(1, Ordering::Relaxed);
    }

    /// How many times [`leak`](Self::leak) was called on this pool.
    pub fn leaks(&self) -> usize {
        self.inner.leaks.load(Ordering::Relaxed)
    }

    /// A handle that doesn't keep the pool alive (for an IOMMU model that checks accesses
    /// against the pool that maps into it).
    pub fn downgrade(&self) -> WeakDmaPool {
        WeakDmaPool(Arc::downgrade(&self.inner))
    }
}

/// A [`DmaPool`] handle that doesn't keep the pool alive.
#[derive(Clone)]
pub struct WeakDmaPool(Weak<PoolInner>);

impl WeakDmaPool {
    /// The pool, if it (or a buffer from it) is still alive.
    pub fn upgrade(&self) -> Option<DmaPool> {
        self.0.upgrade().map(|inner| DmaPool { inner })
    }
}

impl std::fmt::Debug for WeakDmaPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WeakDmaPool")
    }
}

/// A live allocation of a [`DmaPool`], as [`DmaPool::allocation_of`] finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// Process address of the first byte.
    pub va: usize,
    /// Device address of the first byte.
    pub iova: u64,
    /// The length asked for at allocation (or set since with [`DmaBuffer::set_len`]): the
    /// bound that borrowed-memory checks enforce.
    pub len: usize,
    /// The chunk size behind it (at least `len`).
    pub capacity: usize,
}

/// `len` bytes inside one live allocation of a [`DmaPool`], checked when the span was made
/// (only [`DmaPool::span`], [`DmaRegion::span`] and [`DmaBuffer::span`] make one): what the raw
/// submission path takes. The span does not own the memory: whoever submits it must keep the
/// allocation alive until the device is done with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaSpan {
    iova: u64,
    len: usize,
}

impl DmaSpan {
    /// Device address of the first byte.
    #[inline(always)]
    pub fn iova(&self) -> u64 {
        self.iova
    }
    /// Length in bytes.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the span is empty.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// One mapped region of a [`DmaPool`] and its allocation table, as [`DmaPool::region_of`]
/// finds it; cache it to check many addresses of the same region with one load each.
#[derive(Debug, Clone, Default)]
pub struct DmaRegion {
    va: usize,
    len: usize,
    iova: u64,
    /// log2 of the region's chunk size.
    shift: u32,
    /// The region's allocation table (see [`Chunks`]).
    live: Option<Arc<[AtomicU32]>>,
}

impl DmaRegion {
    /// Process address of the first byte.
    pub fn va(&self) -> usize {
        self.va
    }
    /// Length in bytes (0 for the empty default, which contains nothing).
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the region is the empty default.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Device address of the first byte.
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// Whether `addr` lies inside this region (live allocation or not).
    #[inline(always)]
    pub fn contains(&self, addr: *const u8) -> bool {
        (addr as usize).wrapping_sub(self.va) < self.len
    }

    /// The IOVA of `addr` if the `len` bytes from `addr` lie inside this region (whether or
    /// not they are allocated: use [`DmaRegion::span`] for data the device will touch).
    #[inline]
    pub fn translate_range(&self, addr: *const u8, len: usize) -> Option<u64> {
        let off = (addr as usize).wrapping_sub(self.va);
        (off < self.len && len <= self.len - off).then(|| self.iova + off as u64)
    }

    /// The `len` bytes at `addr` as a [`DmaSpan`] if they lie inside one live allocation of
    /// this region, within the length it was allocated with (not its chunk's capacity: the
    /// buffer the caller asked for). One atomic load.
    #[inline(always)]
    pub fn span(&self, addr: *const u8, len: usize) -> Option<DmaSpan> {
        let off = (addr as usize).wrapping_sub(self.va);
        if off >= self.len {
            return None;
        }
        let live = self.live.as_ref()?.get(off >> self.shift)?;
        let live = live.load(Ordering::Acquire) as usize;
        // Offset inside the allocation; a free chunk (0) refuses everything.
        let inner = off & ((1usize << self.shift) - 1);
        (inner < live && len <= live - inner).then(|| DmaSpan {
            iova: self.iova + off as u64,
            len,
        })
    }
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        let regions = std::mem::take(self.regions.get_mut().unwrap_or_else(|e| e.into_inner()));
        for r in regions {
            if let Err(e) = self.iommu.unmap(r.iova, r.map.len() as u64) {
                log::error!("{e}");
            }
            drop(r.map);
        }
    }
}

/// An owned DMA buffer: process memory that the device reaches at [`DmaBuffer::iova`].
///
/// The buffer is `Send` but its contents are only reachable through `&`/`&mut self`, so a buffer
/// handed to the driver for I/O can't be read, written or freed until the driver gives it back.
pub struct DmaBuffer {
    ptr: NonNull<u8>,
    len: usize,
    /// Size class: log2 of the chunk size.
    class: u32,
    /// Index of the region (translation table slot) the chunk belongs to. (Two 32-bit fields
    /// keep the buffer at five words: it moves through the I/O path by value.)
    region: u32,
    iova: u64,
    pool: Arc<PoolInner>,
}

// SAFETY: the buffer exclusively owns its chunk; the pool it refers to is Sync.
unsafe impl Send for DmaBuffer {}
// SAFETY: shared access only gives `&[u8]`.
unsafe impl Sync for DmaBuffer {}

impl DmaBuffer {
    /// The length asked for at allocation.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the buffer is empty (never true for an allocated buffer).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The usable capacity (the chunk size, at least `len`).
    pub fn capacity(&self) -> usize {
        1 << self.class
    }
    /// The device address of the first byte.
    pub fn iova(&self) -> u64 {
        self.iova
    }
    /// The process address of the first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    /// The whole buffer (`len` bytes) as a [`DmaSpan`] for the raw submission path.
    pub fn span(&self) -> DmaSpan {
        DmaSpan {
            iova: self.iova,
            len: self.len,
        }
    }
    /// Records `len` (0: free) as the chunk's live allocation length.
    fn publish_len(&self, len: usize) {
        if let Some(cell) = self
            .pool
            .live_cell(self.region as usize, self.ptr.as_ptr() as usize)
        {
            cell.store(u32::try_from(len).unwrap_or(0), Ordering::Release);
        }
    }
    /// The contents.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the chunk is owned by this buffer and at least `len` bytes long; no DMA is in
        // flight on it while safe code can reach `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
    /// The contents, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
    /// Changes the length within the capacity.
    pub fn set_len(&mut self, len: usize) -> Result<(), HalError> {
        if len == 0 || len > self.capacity() {
            return Err(HalError::BadBufferSize {
                len,
                max: self.capacity(),
            });
        }
        self.len = len;
        self.publish_len(len);
        Ok(())
    }
}

impl std::fmt::Debug for DmaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaBuffer")
            .field("len", &self.len)
            .field("iova", &format_args!("{:#x}", self.iova))
            .finish()
    }
}

impl Drop for DmaBuffer {
    fn drop(&mut self) {
        // Not live from here on: borrowed-memory checks refuse the chunk until its next
        // allocation.
        self.publish_len(0);
        let class = self.class as usize;
        self.pool.free.lock().unwrap_or_else(|e| e.into_inner())[class].push((
            self.ptr.as_ptr() as usize,
            self.iova,
            self.region as usize,
        ));
    }
}

/// A populated private anonymous mapping of `len` bytes backed by `page` pages.
fn anon_map(len: usize, page: PageSize) -> std::io::Result<MmapMut> {
    let mut opts = MmapOptions::new();
    opts.len(len);
    if !cfg!(miri) {
        opts.populate();
    }
    if let Some(shift) = page.huge_shift() {
        opts.huge(Some(shift));
    }
    opts.map_anon()
}

/// The warning when a region can't get hugepages of `page` and falls back to `next`: how many
/// pages the region needed and how many were free (`status`, when the kernel has the size).
fn fallback_warning(
    page: PageSize,
    next: PageSize,
    len: usize,
    status: Option<crate::mem::hugepages::HugepageStatus>,
    err: &std::io::Error,
) -> String {
    let needed = len.div_ceil(page.bytes());
    let pool = match status {
        Some(s) if s.total == 0 => format!("no {page:?} hugepages are reserved"),
        Some(s) => format!(
            "a DMA region needs {needed} {page:?} hugepages but only {} of the {} reserved are free",
            s.free, s.total
        ),
        None => format!("this kernel has no {page:?} hugepages"),
    };
    format!(
        "{pool} ({err}); falling back to {next:?} pages. Reserve more for speed: vfnvme setup --hugepages N (or echo N > /proc/sys/vm/nr_hugepages)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iommu::IovaRange;
    use crate::IovaAllocator;

    #[test]
    fn fallback_warning_says_how_many_are_free_and_needed() {
        use crate::mem::hugepages::HugepageStatus;
        let e = std::io::Error::from_raw_os_error(libc::ENOMEM);
        let some = HugepageStatus {
            size: PageSize::Huge2M,
            total: 256,
            free: 3,
        };
        let w = fallback_warning(PageSize::Huge2M, PageSize::Small4K, 8 << 20, Some(some), &e);
        assert!(
            w.contains("needs 4 Huge2M hugepages but only 3 of the 256 reserved are free"),
            "{w}"
        );
        let none = HugepageStatus {
            free: 0,
            total: 0,
            ..some
        };
        let w = fallback_warning(PageSize::Huge2M, PageSize::Small4K, 2 << 20, Some(none), &e);
        assert!(w.starts_with("no Huge2M hugepages are reserved"), "{w}");
    }

    /// An IOMMU that only records mappings.
    struct Recording {
        alloc: IovaAllocator,
        maps: Mutex<Vec<(usize, u64, u64)>>,
    }
    impl Iommu for Recording {
        fn reserve_iova(&self, len: u64, align: u64) -> Result<u64, HalError> {
            self.alloc.reserve(len, align)
        }
        unsafe fn map(&self, vaddr: NonNull<u8>, len: u64, iova: u64) -> Result<(), HalError> {
            self.maps
                .lock()
                .unwrap()
                .push((vaddr.as_ptr() as usize, len, iova));
            Ok(())
        }
        fn unmap(&self, iova: u64, _len: u64) -> Result<(), HalError> {
            self.maps.lock().unwrap().retain(|m| m.2 != iova);
            Ok(())
        }
        fn iova_ranges(&self) -> Vec<IovaRange> {
            self.alloc.ranges().to_vec()
        }
    }

    fn pool() -> (DmaPool, Arc<Recording>) {
        let rec = Arc::new(Recording {
            alloc: IovaAllocator::new(vec![IovaRange {
                start: 1 << 40,
                end: (1 << 41) - 1,
            }]),
            maps: Mutex::new(vec![]),
        });
        (DmaPool::new(rec.clone(), PageSize::Small4K), rec)
    }

    #[test]
    fn buffers_know_their_iova_and_translate() {
        let (p, rec) = pool();
        let mut a = p.alloc(4096).unwrap();
        let b = p.alloc(8192).unwrap();
        assert!(a.iova() >= 1 << 40, "IOVA is not the VA");
        assert_ne!(a.iova(), a.as_ptr() as u64);
        assert_eq!(p.translate(a.as_ptr()), Some(a.iova()));
        // SAFETY: 100 is inside the 4096-byte buffer.
        let inside = unsafe { b.as_ptr().add(100) };
        assert_eq!(p.translate(inside), Some(b.iova() + 100));
        assert_eq!(p.translate(std::ptr::null()), None);
        a.as_mut_slice()[0] = 7;
        assert_eq!(a.as_slice()[0], 7);
        assert_eq!(
            rec.maps.lock().unwrap().len(),
            2,
            "one region per size class"
        );
    }

    #[test]
    fn translate_range_stays_inside_one_region() {
        let (p, _) = pool();
        let a = p.alloc(4096).unwrap();
        let region = p.region_of(a.as_ptr()).unwrap();
        assert!(region.len() >= 4096);
        assert_eq!(p.translate_range(a.as_ptr(), 4096), Some(a.iova()));
        assert_eq!(region.translate_range(a.as_ptr(), 4096), Some(a.iova()));
        // SAFETY: 100 is inside the buffer.
        let inside = unsafe { a.as_ptr().add(100) };
        assert_eq!(p.translate_range(inside, 8), Some(a.iova() + 100));
        let end = region.va() + region.len();
        assert_eq!(
            p.translate_range((end - 4096) as *const u8, 4096),
            Some(region.iova() + (region.len() - 4096) as u64)
        );
        assert_eq!(
            p.translate_range((end - 4096) as *const u8, 4097),
            None,
            "runs past the region"
        );
        assert_eq!(p.translate_range(std::ptr::null(), 1), None);
        assert_eq!(p.translate_range(end as *const u8, 1), None);
        assert_eq!(DmaRegion::default().translate_range(a.as_ptr(), 1), None);
    }

    #[test]
    fn spans_stay_inside_one_live_allocation() {
        let (p, _) = pool();
        let a = p.alloc(4096).unwrap();
        let b = p.alloc(4096).unwrap();
        let region = p.region_of(a.as_ptr()).unwrap();
        assert!(region.contains(b.as_ptr()), "neighbours in one region");
        let span = region.span(a.as_ptr(), 4096).unwrap();
        assert_eq!((span.iova(), span.len()), (a.iova(), 4096));
        assert_eq!(p.span(a.as_ptr(), 4096), Some(span));
        assert_eq!(a.span(), span);
        // SAFETY: 512 is inside the buffer.
        let inside = unsafe { a.as_ptr().add(512) };
        assert_eq!(
            region.span(inside, 3584).map(|s| s.iova()),
            Some(a.iova() + 512)
        );
        assert_eq!(region.span(inside, 3585), None, "one byte too many");
        assert_eq!(
            region.span(a.as_ptr(), 9 * 512),
            None,
            "runs into the neighbour"
        );
        assert_eq!(p.span(a.as_ptr(), 64 << 10), None);
        assert_eq!(p.span(std::ptr::null(), 1), None);
        assert_eq!(DmaRegion::default().span(a.as_ptr(), 1), None);
        let b_ptr = b.as_ptr();
        drop(b);
        assert_eq!(region.span(b_ptr, 1), None, "a freed buffer is refused");
        assert_eq!(p.allocation_of(b_ptr), None);
        let c = p.alloc(4096).unwrap();
        assert_eq!(c.as_ptr(), b_ptr, "the chunk comes back");
        assert!(region.span(b_ptr, 4096).is_some(), "and is live again");
    }

    #[test]
    fn bound_is_the_requested_length_not_the_chunk() {
        let (p, _) = pool();
        let mut a = p.alloc(5000).unwrap();
        assert_eq!(a.capacity(), 8192);
        let alloc = p.allocation_of(a.as_ptr()).unwrap();
        assert_eq!(
            alloc,
            Allocation {
                va: a.as_ptr() as usize,
                iova: a.iova(),
                len: 5000,
                capacity: 8192
            }
        );
        // SAFETY: 4999 is inside the buffer.
        let last = unsafe { a.as_ptr().add(4999) };
        assert_eq!(p.allocation_of(last), Some(alloc));
        assert!(p.span(a.as_ptr(), 5000).is_some());
        assert_eq!(p.span(a.as_ptr(), 5001), None);
        // SAFETY: 6000 is inside the chunk, past the requested length.
        let past = unsafe { a.as_ptr().add(6000) };
        assert_eq!(p.span(past, 1), None, "the chunk's slack is not the buffer");
        a.set_len(8192).unwrap();
        assert!(p.span(past, 1).is_some(), "set_len moves the bound");
    }

    #[test]
    fn freed_chunks_are_reused_and_zeroed() {
        let (p, _) = pool();
        let mut a = p.alloc(4096).unwrap();
        a.as_mut_slice().fill(0xaa);
        let iova = a.iova();
        drop(a);
        let b = p.alloc(100).unwrap();
        assert_eq!(b.iova(), iova);
        assert!(b.as_slice().iter().all(|&x| x == 0));
    }

    #[test]
    fn rejects_bad_sizes() {
        let (p, _) = pool();
        assert!(matches!(p.alloc(0), Err(HalError::BadBufferSize { .. })));
        assert!(matches!(
            p.alloc(2 << 30),
            Err(HalError::BadBufferSize { .. })
        ));
    }

    #[test]
    fn pool_drop_unmaps() {
        let (p, rec) = pool();
        let a = p.alloc(4096).unwrap();
        drop(p);
        assert_eq!(
            rec.maps.lock().unwrap().len(),
            1,
            "a live buffer keeps its region"
        );
        drop(a);
        assert!(rec.maps.lock().unwrap().is_empty());
    }

    #[test]
    fn live_ranges_follow_allocations_and_leaks_stay_live() {
        let (p, _) = pool();
        let a = p.alloc(4096).unwrap();
        let b = p.alloc(100).unwrap();
        assert_eq!(p.live_allocations(), 2);
        assert!(p.is_live_iova_range(a.iova(), 4096));
        assert!(p.is_live_iova_range(a.iova() + 4000, 96));
        assert!(
            !p.is_live_iova_range(a.iova() + 4000, 97),
            "crosses the chunk's end"
        );
        assert!(p.is_live_iova_range(b.iova(), 100));
        assert!(p.is_live_iova_range(b.iova() + 99, 1));
        assert!(
            !p.is_live_iova_range(b.iova(), 101),
            "past the requested length, inside the chunk"
        );
        assert!(!p.is_live_iova_range(b.iova() + 100, 1));
        assert!(!p.is_live_iova_range(b.iova() + 4095, 1));
        let (ia, ib) = (a.iova(), b.iova());
        drop(a);
        assert!(!p.is_live_iova_range(ia, 1), "given back");
        assert!(p.is_live_iova_range(ib, 1));
        assert_eq!(p.live_allocations(), 1);
        let weak = p.downgrade();
        p.leak(b);
        assert_eq!(p.leaks(), 1);
        assert!(p.is_live_iova_range(ib, 1), "a leaked buffer stays live");
        assert!(weak.upgrade().is_some());
        let c = p.alloc(4096).unwrap();
        assert_ne!(c.iova(), ib, "a leaked chunk is never handed out again");
        drop(c);
        drop(p);
        assert!(
            weak.upgrade().is_some(),
            "the leaked buffer keeps the pool (and its mappings)"
        );
    }
}
