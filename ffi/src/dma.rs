//! The DMA domain of a controller or a subsystem: its pool, the buffers C allocated from it,
//! the request marks of its queue pairs or channels, and the translation of C data pointers.
//! One type for both, so that `vfnvme_dma_*` and `vfnvme_subsys_dma_*` behave alike.

use crate::error::{FfiError, FfiResult, Status};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use vfnvme::hal::{DmaBuffer, DmaPool, DmaRegion, DmaSpan, HalError};

/// Where C buffers of one controller or subsystem come from.
pub(crate) struct DmaDomain {
    pool: DmaPool,
    bufs: Mutex<HashMap<usize, DmaBuffer>>,
    /// Per live queue pair or channel (and per closed one whose records are held for good),
    /// per request record: the data address of the request holding it (0: none). The free
    /// function refuses a buffer one of them points into.
    marks: Mutex<Vec<Arc<[AtomicUsize]>>>,
    /// The C function that allocates from this domain (named in messages).
    alloc_fn: &'static str,
    /// The C function that frees into this domain.
    free_fn: &'static str,
    /// The C function that delivers completions of this domain's requests.
    poll_fn: &'static str,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl DmaDomain {
    /// The domain of `pool`, whose C functions are `alloc_fn`, `free_fn` and `poll_fn`.
    pub(crate) fn new(pool: DmaPool, [alloc_fn, free_fn, poll_fn]: [&'static str; 3]) -> Self {
        DmaDomain {
            pool,
            bufs: Mutex::new(HashMap::new()),
            marks: Mutex::new(Vec::new()),
            alloc_fn,
            free_fn,
            poll_fn,
        }
    }

    /// Registers the request marks of a new queue pair or channel.
    pub(crate) fn track(&self, marks: Arc<[AtomicUsize]>) {
        lock(&self.marks).push(marks);
    }

    /// Forgets the marks of a closed queue pair or channel, unless some of its records are held
    /// for good (`held` > 0): their buffers then stay refused for the domain's life.
    pub(crate) fn untrack(&self, marks: &Arc<[AtomicUsize]>, held: usize) {
        if held == 0 {
            lock(&self.marks).retain(|m| !Arc::ptr_eq(m, marks));
        }
    }

    /// A zeroed buffer of `len` bytes: its address and device address.
    pub(crate) fn alloc(&self, len: usize) -> FfiResult<(*mut c_void, u64)> {
        let buf = self.pool.alloc(len).map_err(|e| {
            let status = match e {
                HalError::BadBufferSize { .. } => Status::VfnvmeErrInvalidArgument,
                _ => Status::VfnvmeErrNoMemory,
            };
            FfiError::new(status, format!("{}({len}): {e}", self.alloc_fn))
        })?;
        let out = (buf.as_ptr().cast(), buf.iova());
        lock(&self.bufs).insert(buf.as_ptr() as usize, buf);
        Ok(out)
    }

    /// Frees the buffer at `ptr` unless a request mark points into it.
    pub(crate) fn free(&self, ptr: *mut c_void) -> FfiResult<()> {
        if ptr.is_null() {
            return Ok(());
        }
        let mut bufs = lock(&self.bufs);
        let Some(buf) = bufs.get(&(ptr as usize)) else {
            return Err(FfiError::new(
                Status::VfnvmeErrBadBuffer,
                format!(
                    "{}({ptr:p}): not a buffer from {} of this controller or subsystem",
                    self.free_fn, self.alloc_fn
                ),
            ));
        };
        let start = buf.as_ptr() as usize;
        let in_use = marked(&lock(&self.marks), start, start.saturating_add(buf.len()));
        if in_use > 0 {
            return Err(FfiError::new(
                Status::VfnvmeErrBusy,
                format!("{}({ptr:p}): {in_use} request(s) using this buffer are in flight (poll them with {} first), or ended on a controller that could not be disabled and may still use it (then it is never freed)", self.free_fn, self.poll_fn),
            ));
        }
        bufs.remove(&start);
        Ok(())
    }

    /// The device address of `ptr`, inside a live buffer of this domain.
    pub(crate) fn translate(&self, ptr: *const c_void) -> FfiResult<u64> {
        self.pool
            .span(ptr.cast(), 1)
            .map(|s| s.iova())
            .ok_or_else(|| {
                FfiError::new(
                    Status::VfnvmeErrBadBuffer,
                    format!(
                        "{ptr:p} is not inside a live buffer from {}; allocate with it",
                        self.alloc_fn
                    ),
                )
            })
    }

    /// `len` bytes at `buf` as a device address range, if they lie inside one live buffer of
    /// this domain (within the length it was allocated with): one atomic load through `region`
    /// (the region of the last buffer), else one lookup in the pool, remembered in `region`.
    #[inline(always)]
    pub(crate) fn span(
        &self,
        region: &mut DmaRegion,
        buf: *const c_void,
        len: u64,
    ) -> FfiResult<DmaSpan> {
        if let Ok(l) = usize::try_from(len) {
            if let Some(span) = region.span(buf.cast(), l) {
                return Ok(span);
            }
        }
        self.span_new_region(region, buf, len)
    }

    #[cold]
    #[inline(never)]
    fn span_new_region(
        &self,
        region: &mut DmaRegion,
        buf: *const c_void,
        len: u64,
    ) -> FfiResult<DmaSpan> {
        let Ok(len) = usize::try_from(len) else {
            return Err(FfiError::new(
                Status::VfnvmeErrBadBuffer,
                format!("a transfer of {len} bytes does not fit this machine's address space"),
            ));
        };
        if !region.contains(buf.cast()) {
            if let Some(r) = self.pool.region_of(buf.cast()) {
                *region = r;
                if let Some(span) = region.span(buf.cast(), len) {
                    return Ok(span);
                }
            }
        }
        Err(self.bad_buffer(buf, len))
    }

    /// Why `len` bytes at `buf` are not a range of one live buffer of this domain.
    #[cold]
    fn bad_buffer(&self, buf: *const c_void, len: usize) -> FfiError {
        let alloc = self.alloc_fn;
        let msg = match self.pool.allocation_of(buf.cast()) {
            Some(a) => format!(
                "data buffer {buf:p} + {len} bytes runs past the end of its buffer ({} bytes at {:#x} from {alloc}); pass a buffer of at least blocks * lba_size bytes",
                a.len, a.va
            ),
            None if self.pool.region_of(buf.cast()).is_some() => format!(
                "data buffer {buf:p} was freed (or never allocated); allocate it with {alloc} and keep it until the completion"
            ),
            None => format!(
                "data buffer {buf:p} is not inside DMA memory of this controller or subsystem; allocate it with {alloc}"
            ),
        };
        FfiError::new(Status::VfnvmeErrBadBuffer, msg)
    }
}

/// How many marks in `marks` point into `start..end`.
fn marked(marks: &[Arc<[AtomicUsize]>], start: usize, end: usize) -> usize {
    marks
        .iter()
        .flat_map(|m| m.iter())
        .filter(|a| (start..end).contains(&a.load(Ordering::Acquire)))
        .count()
}

impl Drop for DmaDomain {
    /// Buffers that a request still marks (it ended while the controller could not be
    /// disabled: the device may still access them) are leaked (counted by the pool) for the
    /// life of the process; the rest go back.
    fn drop(&mut self) {
        let bufs = std::mem::take(self.bufs.get_mut().unwrap_or_else(|e| e.into_inner()));
        let marks = self.marks.get_mut().unwrap_or_else(|e| e.into_inner());
        for (start, buf) in bufs {
            if marked(marks, start, start + buf.len()) > 0 {
                // The driver logged once that the controller could not be disabled.
                self.pool.leak(buf);
            }
        }
    }
}
