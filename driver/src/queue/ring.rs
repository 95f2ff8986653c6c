//! One submission/completion ring pair in DMA memory, with its doorbells (MMIO or shadow).

use crate::platform::{Doorbell, RegisterIo};
use crate::spec::registers::{doorbell_index_offset, doorbell_offset};
use crate::spec::{Command, Completion};
use std::sync::Arc;
use vfnvme_hal::mem::barrier::{dma_mb, dma_rmb, dma_wmb};
use vfnvme_hal::{DmaBuffer, DmaPool, HalError};

/// Size of a submission queue entry.
pub const SQE_SIZE: usize = 64;
/// Size of a completion queue entry.
pub const CQE_SIZE: usize = 16;

/// The two pages of Doorbell Buffer Config: shadow doorbells and EventIdx values, laid out
/// like the doorbell registers (stride `4 << CAP.DSTRD`).
#[derive(Debug)]
pub struct ShadowBuffers {
    /// Shadow doorbell page (written by the driver).
    pub doorbells: DmaBuffer,
    /// EventIdx page (written by the controller).
    pub event_idx: DmaBuffer,
}

/// The virtio/NVMe EventIdx rule: whether moving a doorbell from `old` to `new` passed the
/// controller's `event_idx`, so that an MMIO doorbell write is needed.
#[inline(always)]
pub fn need_event(event_idx: u16, new: u16, old: u16) -> bool {
    new.wrapping_sub(event_idx).wrapping_sub(1) < new.wrapping_sub(old)
}

/// A queue's slots in the shadow pages.
#[derive(Debug)]
struct ShadowSlot {
    buffers: Arc<ShadowBuffers>,
    offset: usize,
}

impl ShadowSlot {
    /// Zeroes the queue's shadow doorbell and EventIdx, as for a queue that never ran. Must
    /// happen before the queue is created on the controller: a queue id used before (queue
    /// pair dropped, then a new one created) otherwise inherits the old queue's values, and a
    /// stale EventIdx makes [`need_event`] skip the MMIO doorbell the controller waits for
    /// (QEMU then never looks at the queue), while a stale CQ head makes the CQ look full.
    fn reset(&self) {
        // SAFETY: as in `update`; the controller does not touch the slots of a queue that does
        // not exist yet.
        unsafe {
            let db = self.buffers.doorbells.as_ptr().add(self.offset) as *mut u32;
            std::ptr::write_volatile(db, 0);
            let ei = self.buffers.event_idx.as_ptr().add(self.offset) as *mut u32;
            std::ptr::write_volatile(ei, 0);
        }
        // Visible to the controller before the Create I/O queue commands that follow.
        dma_mb();
    }

    /// Writes the shadow value; returns whether the MMIO doorbell must be written too.
    #[inline(always)]
    fn update(&self, new: u32, old: u32) -> bool {
        // SAFETY: `offset + 4` is within both 4 KiB pages (checked at construction), the
        // offset is 4-byte aligned, and only the owner of this queue writes this slot; the
        // pages live as long as `buffers`.
        let event_idx = unsafe {
            let db = self.buffers.doorbells.as_ptr().add(self.offset) as *mut u32;
            std::ptr::write_volatile(db, new);
            // The shadow write must reach the controller before the EventIdx read (store-load
            // order, as SPDK's spdk_mb).
            dma_mb();
            let ei = self.buffers.event_idx.as_ptr().add(self.offset) as *const u32;
            std::ptr::read_volatile(ei)
        };
        need_event(event_idx as u16, new as u16, old as u16)
    }
}

/// Doorbell updates of one queue pair since it was created: plain counters owned by the
/// queue pair's thread (no atomics on the I/O path), kept only with the `doorbell-stats`
/// feature (they cost 2 instructions per I/O at QD1, where `io_path` has no room left).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DoorbellStats {
    /// SQ tail doorbell writes over MMIO.
    pub sq_mmio: u64,
    /// SQ tail updates written to the shadow doorbell (some also needed an MMIO write).
    pub sq_shadow: u64,
    /// CQ head doorbell writes over MMIO.
    pub cq_mmio: u64,
    /// CQ head updates written to the shadow doorbell (some also needed an MMIO write).
    pub cq_shadow: u64,
}

/// A doorbell moving from `old` to `new`: the shadow value written if the queue has one, and
/// whether the MMIO doorbell must be written too (always without a shadow). `counts` (shadow,
/// MMIO) are counted with the `doorbell-stats` feature.
#[inline(always)]
fn needs_mmio(
    shadow: Option<&ShadowSlot>,
    new: u32,
    old: u32,
    counts: (&mut u64, &mut u64),
) -> bool {
    let mmio = match shadow {
        Some(s) => {
            if cfg!(feature = "doorbell-stats") {
                *counts.0 += 1;
            }
            s.update(new, old)
        }
        None => true,
    };
    if mmio && cfg!(feature = "doorbell-stats") {
        *counts.1 += 1;
    }
    mmio
}

/// A submission ring and its completion ring.
#[derive(Debug)]
pub struct Rings {
    sq: DmaBuffer,
    cq: DmaBuffer,
    depth: u32,
    sq_tail: u32,
    /// The SQ tail value last written to the doorbell.
    sq_rung: u32,
    cq_head: u32,
    /// The CQ head value last written to the doorbell.
    cq_rung: u32,
    /// The phase tag (0 or 1) of entries the controller posts on this pass of the ring.
    phase: u16,
    sq_db: Doorbell,
    cq_db: Doorbell,
    shadow_sq: Option<ShadowSlot>,
    shadow_cq: Option<ShadowSlot>,
    stats: DoorbellStats,
}

impl Rings {
    /// Allocates zeroed rings of `depth` entries for queue `qid`, with its doorbells in
    /// `regs` (stride `4 << dstrd`). Fails with [`HalError::BarOffset`] when a doorbell of `qid`
    /// lies outside the register file: checked here once, not on every ring.
    pub fn new<R: RegisterIo + ?Sized>(
        pool: &DmaPool,
        regs: &R,
        qid: u16,
        depth: u32,
        dstrd: u8,
        shadow: Option<&Arc<ShadowBuffers>>,
    ) -> Result<Self, HalError> {
        let sq_db = Doorbell::new(regs, doorbell_offset(qid, false, dstrd))?;
        let cq_db = Doorbell::new(regs, doorbell_offset(qid, true, dstrd))?;
        let sq = pool.alloc(depth as usize * SQE_SIZE)?;
        let cq = pool.alloc(depth as usize * CQE_SIZE)?;
        let slot = |is_cq: bool| {
            shadow.and_then(|b| {
                let offset = doorbell_index_offset(qid, is_cq, dstrd);
                (offset + 4 <= b.doorbells.len().min(b.event_idx.len())).then(|| ShadowSlot {
                    buffers: b.clone(),
                    offset,
                })
            })
        };
        let (shadow_sq, shadow_cq) = (slot(false), slot(true));
        for s in shadow_sq.iter().chain(shadow_cq.iter()) {
            s.reset();
        }
        Ok(Rings {
            sq,
            cq,
            depth,
            sq_tail: 0,
            sq_rung: 0,
            cq_head: 0,
            cq_rung: 0,
            phase: 1,
            sq_db,
            cq_db,
            shadow_sq,
            shadow_cq,
            stats: DoorbellStats::default(),
        })
    }

    /// Back to the state of a newly created queue, for its re-creation after a controller reset
    /// (the device stopped using the rings): indices 0, phase 1, the completion ring zeroed so
    /// that no old entry looks posted, shadow doorbell slots zeroed.
    pub fn reset(&mut self) {
        self.sq_tail = 0;
        self.sq_rung = 0;
        self.cq_head = 0;
        self.cq_rung = 0;
        self.phase = 1;
        self.cq.as_mut_slice().fill(0);
        for s in self.shadow_sq.iter().chain(self.shadow_cq.iter()) {
            s.reset();
        }
    }

    /// Device address of the submission ring.
    pub fn sq_iova(&self) -> u64 {
        self.sq.iova()
    }
    /// Device address of the completion ring.
    pub fn cq_iova(&self) -> u64 {
        self.cq.iova()
    }
    /// Number of entries in each ring.
    pub fn depth(&self) -> u32 {
        self.depth
    }
    /// The current SQ tail (next slot to fill).
    pub fn sq_tail(&self) -> u32 {
        self.sq_tail
    }
    /// Rolls the SQ tail back to `tail` (to un-queue entries not yet made visible).
    pub fn rewind_sq(&mut self, tail: u32) {
        self.sq_tail = if self.depth == 0 {
            0
        } else {
            tail % self.depth
        };
    }
    /// Whether shadow doorbells are in use.
    pub fn uses_shadow(&self) -> bool {
        self.shadow_sq.is_some()
    }

    /// Doorbell updates so far, if the `doorbell-stats` feature counts them.
    pub fn doorbell_stats(&self) -> Option<DoorbellStats> {
        cfg!(feature = "doorbell-stats").then_some(self.stats)
    }

    /// Copies `cmd` into the next SQ slot. The caller guarantees a free slot (outstanding
    /// commands < depth).
    ///
    /// The entry is written as eight 8-byte volatile stores straight from the command's
    /// fields (no modulo, no intermediate 64-byte copy); the write barrier in
    /// [`Rings::ring_sq`] orders them before the doorbell.
    #[inline(always)]
    pub fn push(&mut self, cmd: &Command) {
        // `sq_tail < depth` always holds: it starts at 0 and only `push` (wrapping at
        // `depth`), `rewind_sq` (reducing modulo `depth`) and `reset` (to 0) change it.
        let slot = self.sq_tail;
        let next = slot + 1;
        self.sq_tail = if next == self.depth { 0 } else { next };
        let q = cmd.to_qwords();
        // SAFETY: `slot < depth` (the invariant above) and the ring is `depth * 64` bytes,
        // 4 KiB aligned, so the eight 8-byte stores are in bounds and aligned; the controller
        // does not read this slot until the tail doorbell passes it.
        unsafe {
            let p = self.sq.as_ptr().add(slot as usize * SQE_SIZE) as *mut u64;
            for (i, v) in q.iter().enumerate() {
                std::ptr::write_volatile(p.add(i), *v);
            }
        }
    }

    /// The `k`-th entry queued since the last SQ doorbell (`k < sq_unrung()`; the controller
    /// has not been told about it, so it is as written).
    pub fn unrung_command(&self, k: u32) -> Command {
        let slot = (self.sq_rung + k) % self.depth.max(1);
        let mut q = [0u64; 8];
        // SAFETY: `slot < depth` and the ring is `depth * 64` bytes, 4 KiB aligned: the eight
        // 8-byte loads are in bounds and aligned; volatile, as for the stores of `push`.
        unsafe {
            let p = self.sq.as_ptr().add(slot as usize * SQE_SIZE) as *const u64;
            for (i, v) in q.iter_mut().enumerate() {
                *v = std::ptr::read_volatile(p.add(i));
            }
        }
        Command::from_qwords(q)
    }

    /// Whether SQ entries were queued since the last doorbell.
    #[inline(always)]
    pub fn sq_pending(&self) -> bool {
        self.sq_tail != self.sq_rung
    }

    /// SQ entries queued since the last doorbell.
    #[inline(always)]
    pub fn sq_unrung(&self) -> u32 {
        // Both are below `depth`: no division needed.
        if self.sq_tail >= self.sq_rung {
            self.sq_tail - self.sq_rung
        } else {
            self.sq_tail + self.depth - self.sq_rung
        }
    }

    /// Makes queued SQ entries visible and writes the tail doorbell (or only its shadow when
    /// the controller's EventIdx says it does not need the MMIO write).
    #[inline(always)]
    pub fn ring_sq<R: RegisterIo>(&mut self, regs: &R) {
        // SQEs (and PRP lists) must reach the controller before the doorbell (or its shadow).
        dma_wmb();
        let new = self.sq_tail;
        let counts = (&mut self.stats.sq_shadow, &mut self.stats.sq_mmio);
        if needs_mmio(self.shadow_sq.as_ref(), new, self.sq_rung, counts) {
            // SAFETY: the new tail exposes the entries `push` wrote since the last doorbell
            // (`sq_rung..sq_tail`; `rewind_sq` only takes back unrung ones), none older. The
            // queue's owners push only commands whose addresses name DMA memory held until
            // the completion (trackers, parked admin buffers) or promised by the caller of an
            // `unsafe` submission (`submit_raw`, `submit_single`, `admin_sync_raw`,
            // `admin_sync_owned`). `sq_db` was made from the register file of this queue's
            // controller, the one every caller passes, and the ring stays allocated until the
            // queue is deleted or the controller disabled (or is leaked).
            unsafe { regs.ring(&self.sq_db, new) };
        }
        self.sq_rung = new;
    }

    /// The completion at the CQ head, if the controller has posted it (phase matches).
    #[inline(always)]
    pub fn peek_cq(&self) -> Option<Completion> {
        // SAFETY: `cq_head < depth` and the ring is `depth * 16` bytes, 4 KiB aligned; the
        // controller writes it concurrently, hence the volatile read.
        let status = unsafe {
            let p = self.cq.as_ptr().add(self.cq_head as usize * CQE_SIZE) as *const Completion;
            std::ptr::read_volatile(std::ptr::addr_of!((*p).status_phase))
        };
        if status & 1 != self.phase {
            return None;
        }
        // The rest of the entry must be read after the phase bit.
        dma_rmb();
        // SAFETY: as above.
        Some(unsafe {
            std::ptr::read_volatile(
                self.cq.as_ptr().add(self.cq_head as usize * CQE_SIZE) as *const Completion
            )
        })
    }

    /// The command identifier, raw status field (phase in bit 0) and dword 0 of the completion
    /// at the CQ head, if the controller has posted it: what the I/O path needs, without
    /// reading the rest of the entry.
    #[inline(always)]
    pub fn peek_cq_cid_status(&self) -> Option<(u16, u16, u32)> {
        // SAFETY: `cq_head < depth` (it starts at 0 and only `advance_cq` moves it, wrapping
        // at `depth`) and the ring is `depth * 16` bytes, 4 KiB aligned; the controller writes
        // it concurrently, hence the volatile reads.
        let p =
            unsafe { self.cq.as_ptr().add(self.cq_head as usize * CQE_SIZE) as *const Completion };
        // SAFETY: as above; `p` points at a whole, aligned entry.
        let status = unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*p).status_phase)) };
        if status & 1 != self.phase {
            return None;
        }
        // The command identifier must be read after the phase bit.
        dma_rmb();
        // SAFETY: as above.
        let cid = unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*p).cid)) };
        // SAFETY: as above.
        let dw0 = unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*p).dw0)) };
        Some((cid, status, dw0))
    }

    /// Consumes the completion at the CQ head.
    #[inline(always)]
    pub fn advance_cq(&mut self) {
        self.cq_head += 1;
        if self.cq_head == self.depth {
            self.cq_head = 0;
            self.phase ^= 1;
        }
    }

    /// CQ entries consumed since the last CQ head doorbell write (the controller still
    /// counts them as occupied).
    #[inline(always)]
    pub fn cq_unrung(&self) -> u32 {
        // Both are below `depth`: no division needed.
        if self.cq_head >= self.cq_rung {
            self.cq_head - self.cq_rung
        } else {
            self.cq_head + self.depth - self.cq_rung
        }
    }

    /// Writes the CQ head doorbell if the head moved since the last write.
    #[inline(always)]
    pub fn ring_cq<R: RegisterIo>(&mut self, regs: &R) {
        if self.cq_head == self.cq_rung {
            return;
        }
        let new = self.cq_head;
        let counts = (&mut self.stats.cq_shadow, &mut self.stats.cq_mmio);
        if needs_mmio(self.shadow_cq.as_ref(), new, self.cq_rung, counts) {
            // SAFETY: the new head only gives back entries `advance_cq` consumed; the CQ ring
            // is this queue's and stays allocated until the queue is deleted or the
            // controller disabled (or is leaked). `cq_db` was made from the register file of
            // this queue's controller, the one every caller passes.
            unsafe { regs.ring(&self.cq_db, new) };
        }
        self.cq_rung = new;
    }

    /// Test support: writes a completion into CQ slot `slot` as the controller would.
    #[cfg(test)]
    pub fn inject_cqe(&mut self, slot: u32, cqe: Completion) {
        let off = slot as usize * CQE_SIZE;
        self.cq.as_mut_slice()[off..off + CQE_SIZE].copy_from_slice(&cqe.to_bytes());
    }

    /// Test support: reads SQ slot `slot`.
    #[cfg(test)]
    pub fn sqe_bytes(&self, slot: u32) -> [u8; 64] {
        let off = slot as usize * SQE_SIZE;
        self.sq.as_slice()[off..off + SQE_SIZE].try_into().unwrap()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::ptr::NonNull;
    use std::sync::Mutex;
    use vfnvme_hal::{Iommu, IovaAllocator, IovaRange, PageSize};

    /// An IOMMU that maps nothing (the test plays the device itself).
    pub struct NullIommu(IovaAllocator);
    impl Iommu for NullIommu {
        fn reserve_iova(&self, len: u64, align: u64) -> Result<u64, HalError> {
            self.0.reserve(len, align)
        }
        unsafe fn map(&self, _: NonNull<u8>, _: u64, _: u64) -> Result<(), HalError> {
            Ok(())
        }
        fn unmap(&self, _: u64, _: u64) -> Result<(), HalError> {
            Ok(())
        }
        fn iova_ranges(&self) -> Vec<IovaRange> {
            self.0.ranges().to_vec()
        }
    }

    pub fn test_pool() -> DmaPool {
        DmaPool::new(
            Arc::new(NullIommu(IovaAllocator::new(vec![IovaRange {
                start: 1 << 32,
                end: (1 << 40) - 1,
            }]))),
            PageSize::Small4K,
        )
    }

    /// Records doorbell writes.
    #[derive(Default)]
    pub struct Doorbells(pub Mutex<Vec<(usize, u32)>>);
    impl RegisterIo for Doorbells {
        fn read32(&self, _: usize) -> u32 {
            0
        }
        // Only records: no device behind it, so no value reaches memory.
        unsafe fn write32(&self, offset: usize, value: u32) {
            self.0.lock().unwrap().push((offset, value));
        }
        fn read64(&self, _: usize) -> u64 {
            0
        }
        unsafe fn write64(&self, _: usize, _: u64) {}
        fn size(&self) -> usize {
            0x2000
        }
    }

    fn cqe(cid: u16, phase: bool) -> Completion {
        Completion {
            cid,
            status_phase: phase as u16,
            ..Default::default()
        }
    }

    #[test]
    fn wraparound_and_phase_flip() {
        let pool = test_pool();
        let regs = Doorbells::default();
        let mut r = Rings::new(&pool, &regs, 1, 4, 0, None).unwrap();
        let mut phase = true;
        for round in 0..3u16 {
            for i in 0..4u16 {
                let slot = (round * 4 + i) as u32 % 4;
                assert!(r.peek_cq().is_none(), "nothing posted yet");
                assert!(r.peek_cq_cid_status().is_none());
                r.inject_cqe(slot, cqe(round * 4 + i, phase));
                let c = r.peek_cq().expect("posted");
                assert_eq!(c.cid, round * 4 + i);
                assert_eq!(
                    r.peek_cq_cid_status(),
                    Some((c.cid, c.status_phase, c.dw0)),
                    "the I/O path's narrow read agrees with the full entry"
                );
                r.advance_cq();
            }
            phase = !phase;
            // Old entries (stale phase) are not seen again.
            assert!(r.peek_cq().is_none());
        }
        r.ring_cq(&regs);
        r.ring_cq(&regs);
        assert_eq!(
            regs.0.lock().unwrap().len(),
            0,
            "head is back at 0: no write"
        );
        r.inject_cqe(0, cqe(99, phase));
        r.advance_cq();
        r.ring_cq(&regs);
        r.ring_cq(&regs);
        assert_eq!(*regs.0.lock().unwrap(), vec![(0x100c, 1)]);
    }

    #[test]
    fn sq_push_wraps_and_rings_once() {
        let pool = test_pool();
        let regs = Doorbells::default();
        let mut r = Rings::new(&pool, &regs, 2, 3, 0, None).unwrap();
        for i in 0..5u16 {
            let mut c = Command::flush(1);
            c.set_cid(i);
            r.push(&c);
        }
        assert_eq!(r.sq_tail(), 2);
        assert_eq!(
            u16::from_le_bytes([r.sqe_bytes(0)[2], r.sqe_bytes(0)[3]]),
            3
        );
        assert_eq!(
            u16::from_le_bytes([r.sqe_bytes(2)[2], r.sqe_bytes(2)[3]]),
            2
        );
        assert!(r.sq_pending());
        r.ring_sq(&regs);
        assert!(!r.sq_pending());
        assert_eq!(*regs.0.lock().unwrap(), vec![(0x1010, 2)]);
    }

    #[test]
    fn doorbells_outside_the_register_file_are_refused_at_creation() {
        let pool = test_pool();
        let regs = Doorbells::default(); // 0x2000 bytes: doorbells of queues 0..=511
        assert!(Rings::new(&pool, &regs, 511, 4, 0, None).is_ok());
        // Queue 512's SQ tail doorbell is at 0x2000: the queue can't be made, rather than
        // dropping every doorbell write later.
        let err = Rings::new(&pool, &regs, 512, 4, 0, None).unwrap_err();
        assert!(
            matches!(
                err,
                HalError::BarOffset {
                    bar: 0,
                    offset: 0x2000,
                    size: 0x2000
                }
            ),
            "{err:?}"
        );
        // A doorbell stride of 16 bytes moves queue 128's doorbells out as well.
        assert!(Rings::new(&pool, &regs, 127, 4, 2, None).is_ok());
        assert!(matches!(
            Rings::new(&pool, &regs, 128, 4, 2, None),
            Err(HalError::BarOffset { offset: 0x2000, .. })
        ));
        for bad in [0x2000, 0x1ffd, 0x1002, usize::MAX - 2] {
            assert!(
                matches!(
                    Doorbell::new(&regs, bad),
                    Err(HalError::BarOffset { offset, .. }) if offset == bad
                ),
                "{bad:#x}"
            );
        }
        let db = Doorbell::new(&regs, 0x1ffc).unwrap();
        assert_eq!(db.offset(), 0x1ffc);
        // SAFETY: `Doorbells` only records the write; there is no device to use the value.
        unsafe { regs.ring(&db, 9) };
        assert_eq!(*regs.0.lock().unwrap(), vec![(0x1ffc, 9)]);
    }

    #[test]
    fn need_event_rule() {
        // Controller asked to be told once the tail passes 5.
        assert!(need_event(5, 6, 4));
        assert!(need_event(5, 6, 5));
        assert!(!need_event(5, 5, 4));
        assert!(!need_event(5, 8, 6));
        // Wrapping 16-bit arithmetic.
        assert!(need_event(0xffff, 1, 0xfffe));
    }

    #[test]
    fn shadow_doorbell_skips_mmio_until_event_idx() {
        let pool = test_pool();
        let regs = Doorbells::default();
        let shadow = Arc::new(ShadowBuffers {
            doorbells: pool.alloc(4096).unwrap(),
            event_idx: pool.alloc(4096).unwrap(),
        });
        let mut r = Rings::new(&pool, &regs, 1, 16, 0, Some(&shadow)).unwrap();
        assert!(r.uses_shadow());
        // EventIdx of SQ 1 = 0: the first move from 0 to 1 passes it.
        r.push(&Command::flush(1));
        r.ring_sq(&regs);
        assert_eq!(regs.0.lock().unwrap().len(), 1);
        assert_eq!(
            u32::from_le_bytes(shadow.doorbells.as_slice()[8..12].try_into().unwrap()),
            1
        );
        // The controller is still processing and has not moved EventIdx: no MMIO.
        r.push(&Command::flush(1));
        r.push(&Command::flush(1));
        r.ring_sq(&regs);
        assert_eq!(regs.0.lock().unwrap().len(), 1);
        assert_eq!(
            u32::from_le_bytes(shadow.doorbells.as_slice()[8..12].try_into().unwrap()),
            3
        );
    }

    #[test]
    fn doorbell_stats_count_mmio_and_shadow_updates() {
        let pool = test_pool();
        let regs = Doorbells::default();
        let shadow = Arc::new(ShadowBuffers {
            doorbells: pool.alloc(4096).unwrap(),
            event_idx: pool.alloc(4096).unwrap(),
        });
        let mut r = Rings::new(&pool, &regs, 1, 16, 0, Some(&shadow)).unwrap();
        for _ in 0..2 {
            r.push(&Command::flush(1));
            r.ring_sq(&regs);
        }
        let mut plain = Rings::new(&pool, &regs, 2, 16, 0, None).unwrap();
        plain.push(&Command::flush(1));
        plain.ring_sq(&regs);
        plain.ring_cq(&regs); // Head unmoved: no update.
        if cfg!(feature = "doorbell-stats") {
            // Two shadow updates, of which only the first passed EventIdx and needed MMIO.
            let d = r.doorbell_stats().unwrap();
            assert_eq!(
                (d.sq_shadow, d.sq_mmio, d.cq_shadow, d.cq_mmio),
                (2, 1, 0, 0)
            );
            let d = plain.doorbell_stats().unwrap();
            assert_eq!(
                (d.sq_shadow, d.sq_mmio, d.cq_shadow, d.cq_mmio),
                (0, 1, 0, 0)
            );
        } else {
            assert_eq!(r.doorbell_stats(), None);
        }
    }

    #[test]
    fn reused_queue_id_starts_from_clean_shadow_slots() {
        // Found on QEMU 7.2: a queue pair dropped and created again with the same qid hung,
        // because the new queue read the old queue's EventIdx and skipped the MMIO doorbell.
        let pool = test_pool();
        let regs = Doorbells::default();
        let mut bufs = ShadowBuffers {
            doorbells: pool.alloc(4096).unwrap(),
            event_idx: pool.alloc(4096).unwrap(),
        };
        // What an earlier queue 1 left behind: SQ tail and CQ head 7, EventIdx 6 for both.
        bufs.doorbells.as_mut_slice()[8..12].copy_from_slice(&7u32.to_le_bytes());
        bufs.doorbells.as_mut_slice()[12..16].copy_from_slice(&7u32.to_le_bytes());
        bufs.event_idx.as_mut_slice()[8..12].copy_from_slice(&6u32.to_le_bytes());
        bufs.event_idx.as_mut_slice()[12..16].copy_from_slice(&6u32.to_le_bytes());
        let shadow = Arc::new(bufs);
        let mut r = Rings::new(&pool, &regs, 1, 16, 0, Some(&shadow)).unwrap();
        let word = |b: &DmaBuffer, at: usize| {
            u32::from_le_bytes(b.as_slice()[at..at + 4].try_into().unwrap())
        };
        assert_eq!(word(&shadow.doorbells, 12), 0, "CQ head shadow reset");
        assert_eq!(word(&shadow.event_idx, 8), 0, "SQ EventIdx reset");
        assert_eq!(word(&shadow.event_idx, 12), 0, "CQ EventIdx reset");
        r.push(&Command::flush(1));
        r.ring_sq(&regs);
        assert_eq!(
            regs.0.lock().unwrap().len(),
            1,
            "the first doorbell of a new queue reaches the controller"
        );
        assert_eq!(word(&shadow.doorbells, 8), 1);
    }
}
