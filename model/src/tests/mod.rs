//! Model-level tests: they drive the register file and queues directly with hand-built SQE
//! bytes (not the driver), so they check the model against the specification on their own.

mod admin_tests;
mod ana_tests;
mod event_tests;
mod fault_tests;
mod io_tests;
mod pi_tests;
mod queue_tests;
mod register_tests;
mod robustness_tests;
mod sgl_tests;

use super::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform, ModelRegs};
use std::sync::Arc;
use vfnvme_hal::platform::{Platform, RegisterIo};
use vfnvme_hal::DmaBuffer;

pub(crate) const CC_READY_BITS: u32 = 1 | 6 << 16 | 4 << 20;

// Register writes from these tests. The tests own their `ModelPlatform` and every live
// allocation of its pool (nothing else allocates from it), and the model copies only inside
// mappings of its IOMMU (that pool's regions) and refuses, and records, any access outside a
// live allocation. So whatever a test writes (bad addresses, stale tails, random values in
// the robustness tests), the model touches no memory but what the test itself allocated.

/// Writes the 32-bit register at `offset` of the model.
pub(crate) fn poke32(r: &ModelRegs, offset: usize, value: u32) {
    // SAFETY: see above: the model reaches only this test's live allocations.
    unsafe { r.write32(offset, value) }
}

/// Writes the 64-bit register at `offset` of the model.
pub(crate) fn poke64(r: &ModelRegs, offset: usize, value: u64) {
    // SAFETY: as in `poke32`.
    unsafe { r.write64(offset, value) }
}

/// A decoded completion queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cqe {
    pub dw0: u32,
    pub sqhd: u16,
    pub sqid: u16,
    pub cid: u16,
    /// Status Code | Status Code Type << 8.
    pub status: u16,
    pub dnr: bool,
}

/// Builds a 64-byte SQE by the spec's offsets.
pub(crate) fn sqe(
    opcode: u8,
    cid: u16,
    nsid: u32,
    prp1: u64,
    prp2: u64,
    cdw: [u32; 6],
) -> [u8; 64] {
    let mut b = [0u8; 64];
    b[0] = opcode;
    b[2..4].copy_from_slice(&cid.to_le_bytes());
    b[4..8].copy_from_slice(&nsid.to_le_bytes());
    b[24..32].copy_from_slice(&prp1.to_le_bytes());
    b[32..40].copy_from_slice(&prp2.to_le_bytes());
    for (i, d) in cdw.iter().enumerate() {
        b[40 + 4 * i..44 + 4 * i].copy_from_slice(&d.to_le_bytes());
    }
    b
}

/// A submission/completion queue pair driven by hand.
pub(crate) struct Ring {
    pub qid: u16,
    pub sq: DmaBuffer,
    pub cq: DmaBuffer,
    pub size: u32,
    pub tail: u32,
    pub head: u32,
    pub phase: bool,
    /// Write the CQ head doorbell after each reaped entry.
    pub ack: bool,
}

impl Ring {
    pub fn new(p: &ModelPlatform, qid: u16, size: u32) -> Ring {
        Ring {
            qid,
            sq: p.dma().alloc(64 * size as usize).unwrap(),
            cq: p.dma().alloc(16 * size as usize).unwrap(),
            size,
            tail: 0,
            head: 0,
            phase: true,
            ack: true,
        }
    }
    /// Writes an entry at the tail (no doorbell).
    pub fn put(&mut self, e: [u8; 64]) {
        let at = 64 * self.tail as usize;
        self.sq.as_mut_slice()[at..at + 64].copy_from_slice(&e);
        self.tail = (self.tail + 1) % self.size;
    }
    /// Rings the SQ tail doorbell.
    pub fn ring(&self, p: &ModelPlatform) {
        poke32(p.regs(), 0x1000 + 8 * usize::from(self.qid), self.tail);
    }
    pub fn submit(&mut self, p: &ModelPlatform, e: [u8; 64]) {
        self.put(e);
        self.ring(p);
    }
    /// Takes the next CQE if the model posted one (after `before_poll`).
    pub fn reap(&mut self, p: &ModelPlatform) -> Option<Cqe> {
        p.before_poll(self.qid);
        let at = 16 * self.head as usize;
        let b = &self.cq.as_slice()[at..at + 16];
        let dw =
            |i: usize| u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
        let dw3 = dw(3);
        if (dw3 >> 16) & 1 != u32::from(self.phase) {
            return None;
        }
        let status = (dw3 >> 17) as u16;
        let c = Cqe {
            dw0: dw(0),
            sqhd: dw(2) as u16,
            sqid: (dw(2) >> 16) as u16,
            cid: dw3 as u16,
            status: status & 0x7FF,
            dnr: status & (1 << 14) != 0,
        };
        self.head += 1;
        if self.head == self.size {
            self.head = 0;
            self.phase = !self.phase;
        }
        if self.ack {
            self.ack_head(p);
        }
        Some(c)
    }
    pub fn ack_head(&self, p: &ModelPlatform) {
        poke32(p.regs(), 0x1000 + 8 * usize::from(self.qid) + 4, self.head);
    }
    /// Polls (advancing virtual time) until a CQE arrives.
    pub fn wait(&mut self, p: &ModelPlatform) -> Cqe {
        for _ in 0..10_000 {
            if let Some(c) = self.reap(p) {
                return c;
            }
            p.relax();
        }
        panic!("no completion on queue {}", self.qid);
    }
    /// Submits and waits for one command.
    pub fn run(&mut self, p: &ModelPlatform, e: [u8; 64]) -> Cqe {
        self.submit(p, e);
        self.wait(p)
    }
}

/// A model with the admin queue enabled and ready.
pub(crate) struct Bench {
    pub p: Arc<ModelPlatform>,
    pub admin: Ring,
    next_cid: u16,
}

pub(crate) fn ram_ns(nsid: u32, blocks: u64, lba_size: u32) -> ModelNamespaceConfig {
    ModelNamespaceConfig {
        nsid,
        blocks,
        lba_size,
        backing: Backing::Ram,
    }
}

pub(crate) fn config() -> ModelConfig {
    ModelConfig {
        namespaces: vec![ram_ns(1, 1 << 20, 512)],
        io_latency_ns: 1_000,
        admin_latency_ns: 5_000,
        ..ModelConfig::default()
    }
}

/// Enables the controller and waits (on virtual time) for CSTS.RDY.
pub(crate) fn enable(p: &ModelPlatform, admin: &Ring) {
    let r = p.regs();
    poke32(r, 0x24, (admin.size - 1) << 16 | (admin.size - 1));
    poke64(r, 0x28, admin.sq.iova());
    poke64(r, 0x30, admin.cq.iova());
    poke32(r, 0x14, CC_READY_BITS);
    for _ in 0..100 {
        if r.read32(0x1C) & 1 == 1 {
            return;
        }
        p.relax();
    }
    panic!("controller never became ready");
}

impl Bench {
    pub fn new(cfg: ModelConfig) -> Bench {
        Bench::on(ModelPlatform::new(cfg).unwrap())
    }
    /// A bench on an existing controller (e.g. one of a subsystem).
    pub fn on(p: Arc<ModelPlatform>) -> Bench {
        let admin = Ring::new(&p, 0, 32);
        enable(&p, &admin);
        Bench {
            p,
            admin,
            next_cid: 1,
        }
    }
    pub fn cid(&mut self) -> u16 {
        self.next_cid = self.next_cid.wrapping_add(1);
        self.next_cid
    }
    /// Runs one admin command.
    pub fn admin(&mut self, opcode: u8, nsid: u32, prp1: u64, prp2: u64, cdw: [u32; 6]) -> Cqe {
        let cid = self.cid();
        let c = self
            .admin
            .run(&self.p, sqe(opcode, cid, nsid, prp1, prp2, cdw));
        assert_eq!(c.cid, cid);
        c
    }
    /// Creates I/O queue pair `qid` of `size` entries.
    pub fn qpair(&mut self, qid: u16, size: u32) -> Ring {
        let ring = Ring::new(&self.p, qid, size);
        let q = u32::from(qid) | (size - 1) << 16;
        let c = self.admin(0x05, 0, ring.cq.iova(), 0, [q, 1, 0, 0, 0, 0]);
        assert_eq!(c.status, 0, "create CQ");
        let c = self.admin(
            0x01,
            0,
            ring.sq.iova(),
            0,
            [q, 1 | u32::from(qid) << 16, 0, 0, 0, 0],
        );
        assert_eq!(c.status, 0, "create SQ");
        ring
    }
    /// Identify into a fresh 4 KiB buffer.
    pub fn identify(&mut self, cns: u32, nsid: u32) -> (Cqe, DmaBuffer) {
        let buf = self.p.dma().alloc(4096).unwrap();
        let c = self.admin(0x06, nsid, buf.iova(), 0, [cns, 0, 0, 0, 0, 0]);
        (c, buf)
    }
}

/// Status values as SC | SCT << 8.
pub(crate) mod sc {
    pub const INVALID_OPCODE: u16 = 0x01;
    pub const INVALID_FIELD: u16 = 0x02;
    pub const DATA_TRANSFER_ERROR: u16 = 0x04;
    pub const INVALID_NAMESPACE: u16 = 0x0B;
    pub const INVALID_PRP_OFFSET: u16 = 0x13;
    pub const LBA_OUT_OF_RANGE: u16 = 0x80;
    pub const CQ_INVALID: u16 = 0x100;
    pub const INVALID_QID: u16 = 0x101;
    pub const INVALID_QUEUE_SIZE: u16 = 0x102;
    pub const AER_LIMIT: u16 = 0x105;
    pub const INVALID_LOG_PAGE: u16 = 0x109;
    pub const INVALID_QUEUE_DELETION: u16 = 0x10C;
    pub const NS_ALREADY_ATTACHED: u16 = 0x118;
}
