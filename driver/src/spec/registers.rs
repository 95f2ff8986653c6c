//! Controller registers (BAR0): offsets and bitfield accessors.

/// Controller Capabilities (64-bit).
pub const CAP: usize = 0x00;
/// Version (32-bit).
pub const VS: usize = 0x08;
/// Interrupt Mask Set.
pub const INTMS: usize = 0x0c;
/// Interrupt Mask Clear.
pub const INTMC: usize = 0x10;
/// Controller Configuration (32-bit).
pub const CC: usize = 0x14;
/// Controller Status (32-bit).
pub const CSTS: usize = 0x1c;
/// Admin Queue Attributes (32-bit).
pub const AQA: usize = 0x24;
/// Admin Submission Queue base address (64-bit).
pub const ASQ: usize = 0x28;
/// Admin Completion Queue base address (64-bit).
pub const ACQ: usize = 0x30;
/// The first doorbell register.
pub const DOORBELL_BASE: usize = 0x1000;

/// Byte offset of a doorbell (and of its shadow / EventIdx slot, relative to the buffer start
/// instead of BAR0) for queue `qid`: the SQ tail doorbell if `is_cq` is false, the CQ head
/// doorbell otherwise. Honours the doorbell stride CAP.DSTRD.
#[inline]
pub const fn doorbell_index_offset(qid: u16, is_cq: bool, dstrd: u8) -> usize {
    (2 * qid as usize + is_cq as usize) * (4usize << dstrd)
}

/// BAR0 offset of the SQ tail (`is_cq == false`) or CQ head doorbell of queue `qid`.
#[inline]
pub const fn doorbell_offset(qid: u16, is_cq: bool, dstrd: u8) -> usize {
    DOORBELL_BASE + doorbell_index_offset(qid, is_cq, dstrd)
}

#[inline]
const fn bits64(v: u64, lo: u32, width: u32) -> u64 {
    (v >> lo) & ((1u64 << width) - 1)
}

#[inline]
const fn bits32(v: u32, lo: u32, width: u32) -> u32 {
    (v >> lo) & ((1u32 << width) - 1)
}

/// CAP: Controller Capabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cap(pub u64);

impl Cap {
    /// Maximum Queue Entries Supported (0's based).
    pub const fn mqes(self) -> u16 {
        bits64(self.0, 0, 16) as u16
    }
    /// The largest queue depth (MQES + 1).
    pub const fn max_queue_entries(self) -> u32 {
        self.mqes() as u32 + 1
    }
    /// Contiguous Queues Required.
    pub const fn cqr(self) -> bool {
        bits64(self.0, 16, 1) != 0
    }
    /// Timeout, in 500 ms units: the worst-case time to wait for CSTS.RDY.
    pub const fn to(self) -> u8 {
        bits64(self.0, 24, 8) as u8
    }
    /// The CAP.TO timeout in nanoseconds (at least 500 ms).
    pub const fn timeout_ns(self) -> u64 {
        let units = if self.to() == 0 { 1 } else { self.to() as u64 };
        units * 500_000_000
    }
    /// Doorbell Stride: doorbells are `4 << dstrd` bytes apart.
    pub const fn dstrd(self) -> u8 {
        bits64(self.0, 32, 4) as u8
    }
    /// NVM Subsystem Reset Supported.
    pub const fn nssrs(self) -> bool {
        bits64(self.0, 36, 1) != 0
    }
    /// Command Sets Supported (bit 0: NVM, bit 6: I/O command sets, bit 7: admin only).
    pub const fn css(self) -> u8 {
        bits64(self.0, 37, 8) as u8
    }
    /// Memory Page Size Minimum: pages are `4096 << mpsmin` bytes at least.
    pub const fn mpsmin(self) -> u8 {
        bits64(self.0, 48, 4) as u8
    }
    /// Memory Page Size Maximum.
    pub const fn mpsmax(self) -> u8 {
        bits64(self.0, 52, 4) as u8
    }
}

/// VS: the specification version the controller implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version(pub u32);

impl Version {
    /// Major version.
    pub const fn major(self) -> u16 {
        (self.0 >> 16) as u16
    }
    /// Minor version.
    pub const fn minor(self) -> u8 {
        (self.0 >> 8) as u8
    }
    /// Tertiary version.
    pub const fn tertiary(self) -> u8 {
        self.0 as u8
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major(), self.minor(), self.tertiary())
    }
}

/// CC: Controller Configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cc(pub u32);

impl Cc {
    /// Enable.
    pub const fn en(self) -> bool {
        self.0 & 1 != 0
    }
    /// I/O Command Set Selected.
    pub const fn css(self) -> u8 {
        bits32(self.0, 4, 3) as u8
    }
    /// Memory Page Size (`4096 << mps`).
    pub const fn mps(self) -> u8 {
        bits32(self.0, 7, 4) as u8
    }
    /// Shutdown Notification.
    pub const fn shn(self) -> u8 {
        bits32(self.0, 14, 2) as u8
    }
    /// I/O Submission Queue Entry Size (log2).
    pub const fn iosqes(self) -> u8 {
        bits32(self.0, 16, 4) as u8
    }
    /// I/O Completion Queue Entry Size (log2).
    pub const fn iocqes(self) -> u8 {
        bits32(self.0, 20, 4) as u8
    }
    /// Sets Enable.
    pub const fn with_en(self, en: bool) -> Self {
        Cc((self.0 & !1) | en as u32)
    }
    /// Sets the command set (0 = NVM, 6 = all supported I/O command sets).
    pub const fn with_css(self, css: u8) -> Self {
        Cc((self.0 & !(0x7 << 4)) | ((css as u32 & 0x7) << 4))
    }
    /// Sets the memory page size (`4096 << mps`).
    pub const fn with_mps(self, mps: u8) -> Self {
        Cc((self.0 & !(0xf << 7)) | ((mps as u32 & 0xf) << 7))
    }
    /// Sets the shutdown notification (1 = normal, 2 = abrupt).
    pub const fn with_shn(self, shn: u8) -> Self {
        Cc((self.0 & !(0x3 << 14)) | ((shn as u32 & 0x3) << 14))
    }
    /// Sets the I/O SQ entry size (log2; 6 = 64 bytes).
    pub const fn with_iosqes(self, v: u8) -> Self {
        Cc((self.0 & !(0xf << 16)) | ((v as u32 & 0xf) << 16))
    }
    /// Sets the I/O CQ entry size (log2; 4 = 16 bytes).
    pub const fn with_iocqes(self, v: u8) -> Self {
        Cc((self.0 & !(0xf << 20)) | ((v as u32 & 0xf) << 20))
    }
}

/// CC.SHN value for a normal shutdown.
pub const SHN_NORMAL: u8 = 0b01;

/// CSTS: Controller Status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Csts(pub u32);

impl Csts {
    /// Ready.
    pub const fn rdy(self) -> bool {
        self.0 & 1 != 0
    }
    /// Controller Fatal Status.
    pub const fn cfs(self) -> bool {
        self.0 & 2 != 0
    }
    /// Shutdown Status (0 normal, 1 in progress, 2 complete).
    pub const fn shst(self) -> u8 {
        bits32(self.0, 2, 2) as u8
    }
    /// Whether every bit is set: the register read failed (device gone).
    pub const fn is_all_ones(self) -> bool {
        self.0 == u32::MAX
    }
}

/// CSTS.SHST value: shutdown processing complete.
pub const SHST_COMPLETE: u8 = 0b10;

/// AQA: Admin Queue Attributes from queue depths (not 0's based; 2..=4096 each).
pub const fn aqa(sq_depth: u16, cq_depth: u16) -> u32 {
    ((sq_depth as u32 - 1) & 0xfff) | (((cq_depth as u32 - 1) & 0xfff) << 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_fields() {
        // MQES=1023, CQR=1, TO=20, DSTRD=2, CSS=0x41, MPSMIN=0, MPSMAX=4.
        let v: u64 = 1023 | (1 << 16) | (20 << 24) | (2 << 32) | (0x41 << 37) | (4 << 52);
        let c = Cap(v);
        assert_eq!(c.mqes(), 1023);
        assert_eq!(c.max_queue_entries(), 1024);
        assert!(c.cqr());
        assert_eq!(c.to(), 20);
        assert_eq!(c.timeout_ns(), 10_000_000_000);
        assert_eq!(c.dstrd(), 2);
        assert_eq!(c.css(), 0x41);
        assert_eq!(c.mpsmin(), 0);
        assert_eq!(c.mpsmax(), 4);
        assert_eq!(Cap(0).timeout_ns(), 500_000_000);
    }

    #[test]
    fn cc_builders_roundtrip() {
        let cc = Cc(0)
            .with_en(true)
            .with_css(0)
            .with_mps(0)
            .with_iosqes(6)
            .with_iocqes(4);
        assert_eq!(cc.0, 1 | (6 << 16) | (4 << 20));
        assert!(cc.en());
        assert_eq!(cc.iosqes(), 6);
        assert_eq!(cc.iocqes(), 4);
        let sh = cc.with_shn(SHN_NORMAL);
        assert_eq!(sh.shn(), 1);
        assert_eq!(sh.0 & (3 << 14), 1 << 14);
        assert!(!sh.with_en(false).en());
        assert_eq!(Cc(0).with_css(6).css(), 6);
        assert_eq!(Cc(0).with_mps(3).0, 3 << 7);
    }

    #[test]
    fn csts_and_aqa() {
        assert!(Csts(1).rdy());
        assert!(Csts(2).cfs());
        assert_eq!(Csts(0b1000).shst(), SHST_COMPLETE);
        assert_eq!(aqa(32, 64), 31 | (63 << 16));
    }

    #[test]
    fn doorbells_honour_stride() {
        assert_eq!(doorbell_offset(0, false, 0), 0x1000);
        assert_eq!(doorbell_offset(0, true, 0), 0x1004);
        assert_eq!(doorbell_offset(3, false, 0), 0x1018);
        assert_eq!(doorbell_offset(3, true, 0), 0x101c);
        assert_eq!(doorbell_offset(1, true, 2), 0x1000 + 3 * 16);
    }
}
