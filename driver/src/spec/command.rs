//! The 64-byte submission queue entry and typed builders for the commands the driver issues.

/// Admin command opcodes.
pub mod admin_opcode {
    /// Delete I/O Submission Queue.
    pub const DELETE_IO_SQ: u8 = 0x00;
    /// Create I/O Submission Queue.
    pub const CREATE_IO_SQ: u8 = 0x01;
    /// Get Log Page.
    pub const GET_LOG_PAGE: u8 = 0x02;
    /// Delete I/O Completion Queue.
    pub const DELETE_IO_CQ: u8 = 0x04;
    /// Create I/O Completion Queue.
    pub const CREATE_IO_CQ: u8 = 0x05;
    /// Identify.
    pub const IDENTIFY: u8 = 0x06;
    /// Abort.
    pub const ABORT: u8 = 0x08;
    /// Set Features.
    pub const SET_FEATURES: u8 = 0x09;
    /// Get Features.
    pub const GET_FEATURES: u8 = 0x0a;
    /// Asynchronous Event Request.
    pub const ASYNC_EVENT_REQUEST: u8 = 0x0c;
    /// Namespace Attachment.
    pub const NAMESPACE_ATTACHMENT: u8 = 0x15;
    /// Doorbell Buffer Config.
    pub const DOORBELL_BUFFER_CONFIG: u8 = 0x7c;
    /// Format NVM.
    pub const FORMAT_NVM: u8 = 0x80;
}

/// NVM command set I/O opcodes.
pub mod io_opcode {
    /// Flush.
    pub const FLUSH: u8 = 0x00;
    /// Write.
    pub const WRITE: u8 = 0x01;
    /// Read.
    pub const READ: u8 = 0x02;
    /// Write Zeroes.
    pub const WRITE_ZEROES: u8 = 0x08;
    /// Dataset Management.
    pub const DATASET_MANAGEMENT: u8 = 0x09;
}

/// Identify CNS values.
pub mod cns {
    /// Identify Namespace (NVM command set).
    pub const NAMESPACE: u8 = 0x00;
    /// Identify Controller.
    pub const CONTROLLER: u8 = 0x01;
    /// Active Namespace ID list.
    pub const ACTIVE_NS_LIST: u8 = 0x02;
    /// Namespace Identification Descriptor list.
    pub const NS_ID_DESCRIPTORS: u8 = 0x03;
    /// I/O command set specific Identify Namespace.
    pub const CSI_NAMESPACE: u8 = 0x05;
    /// I/O command set specific Identify Controller.
    pub const CSI_CONTROLLER: u8 = 0x06;
}

/// Feature identifiers.
pub mod feature_id {
    /// Number of Queues.
    pub const NUMBER_OF_QUEUES: u8 = 0x07;
    /// Asynchronous Event Configuration.
    pub const ASYNC_EVENT_CONFIG: u8 = 0x0b;
}

/// A submission queue entry, laid out exactly as the controller reads it (64 bytes, little
/// endian on the platforms vfnvme supports).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Command {
    /// CDW0: opcode (7:0), fused (9:8), PSDT (15:14), command identifier (31:16).
    pub cdw0: u32,
    /// Namespace ID.
    pub nsid: u32,
    /// CDW2.
    pub cdw2: u32,
    /// CDW3.
    pub cdw3: u32,
    /// Metadata pointer.
    pub mptr: u64,
    /// PRP entry 1.
    pub prp1: u64,
    /// PRP entry 2 (or PRP list pointer).
    pub prp2: u64,
    /// CDW10.
    pub cdw10: u32,
    /// CDW11.
    pub cdw11: u32,
    /// CDW12.
    pub cdw12: u32,
    /// CDW13.
    pub cdw13: u32,
    /// CDW14.
    pub cdw14: u32,
    /// CDW15.
    pub cdw15: u32,
}

const _: () = assert!(std::mem::size_of::<Command>() == 64);
const _: () = assert!(std::mem::align_of::<Command>() <= 64);

/// One range of a Dataset Management command (16 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DsmRange {
    /// Context attributes.
    pub attributes: u32,
    /// Length in logical blocks.
    pub blocks: u32,
    /// Starting LBA.
    pub slba: u64,
}

impl DsmRange {
    /// Size of one range entry in bytes.
    pub const SIZE: usize = 16;
    /// The 16-byte encoding.
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..4].copy_from_slice(&self.attributes.to_le_bytes());
        b[4..8].copy_from_slice(&self.blocks.to_le_bytes());
        b[8..16].copy_from_slice(&self.slba.to_le_bytes());
        b
    }
}

impl Command {
    /// A command with only the opcode set.
    #[inline]
    pub const fn new(opcode: u8) -> Self {
        Command {
            cdw0: opcode as u32,
            nsid: 0,
            cdw2: 0,
            cdw3: 0,
            mptr: 0,
            prp1: 0,
            prp2: 0,
            cdw10: 0,
            cdw11: 0,
            cdw12: 0,
            cdw13: 0,
            cdw14: 0,
            cdw15: 0,
        }
    }
    /// The opcode.
    #[inline]
    pub const fn opcode(&self) -> u8 {
        self.cdw0 as u8
    }
    /// The command identifier.
    #[inline]
    pub const fn cid(&self) -> u16 {
        (self.cdw0 >> 16) as u16
    }
    /// Sets the command identifier.
    #[inline]
    pub fn set_cid(&mut self, cid: u16) {
        self.cdw0 = (self.cdw0 & 0xffff) | ((cid as u32) << 16);
    }
    /// Sets the data pointer (PRP1/PRP2).
    #[inline]
    pub fn set_prps(&mut self, prp1: u64, prp2: u64) {
        self.prp1 = prp1;
        self.prp2 = prp2;
    }
    /// Sets the data pointer to one SGL descriptor (`addr`, `len`, SGL identifier `id`: type in
    /// bits 7:4, subtype in 3:0) and PSDT to 01b (SGLs for the data, MPTR a plain address).
    #[inline]
    pub fn set_sgl(&mut self, addr: u64, len: u32, id: u8) {
        self.cdw0 = (self.cdw0 & !(3 << 14)) | 1 << 14;
        self.prp1 = addr;
        self.prp2 = u64::from(len) | u64::from(id) << 56;
    }
    /// Builder form of [`Command::set_prps`] with PRP2 zero (a buffer within one page).
    pub fn with_data(mut self, iova: u64) -> Self {
        self.prp1 = iova;
        self
    }
    /// The entry as eight quadwords in memory order (what the SQ ring holds, written natively
    /// on the little-endian platforms vfnvme supports).
    #[inline(always)]
    pub const fn to_qwords(&self) -> [u64; 8] {
        const fn pair(lo: u32, hi: u32) -> u64 {
            lo as u64 | (hi as u64) << 32
        }
        [
            pair(self.cdw0, self.nsid),
            pair(self.cdw2, self.cdw3),
            self.mptr,
            self.prp1,
            self.prp2,
            pair(self.cdw10, self.cdw11),
            pair(self.cdw12, self.cdw13),
            pair(self.cdw14, self.cdw15),
        ]
    }
    /// The entry from eight quadwords in memory order (the inverse of
    /// [`Command::to_qwords`]).
    pub const fn from_qwords(q: [u64; 8]) -> Self {
        Command {
            cdw0: q[0] as u32,
            nsid: (q[0] >> 32) as u32,
            cdw2: q[1] as u32,
            cdw3: (q[1] >> 32) as u32,
            mptr: q[2],
            prp1: q[3],
            prp2: q[4],
            cdw10: q[5] as u32,
            cdw11: (q[5] >> 32) as u32,
            cdw12: q[6] as u32,
            cdw13: (q[6] >> 32) as u32,
            cdw14: q[7] as u32,
            cdw15: (q[7] >> 32) as u32,
        }
    }
    /// The 64 bytes as the controller reads them.
    pub fn to_bytes(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        let dws = [self.cdw0, self.nsid, self.cdw2, self.cdw3];
        for (i, d) in dws.iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&d.to_le_bytes());
        }
        b[16..24].copy_from_slice(&self.mptr.to_le_bytes());
        b[24..32].copy_from_slice(&self.prp1.to_le_bytes());
        b[32..40].copy_from_slice(&self.prp2.to_le_bytes());
        let hi = [
            self.cdw10, self.cdw11, self.cdw12, self.cdw13, self.cdw14, self.cdw15,
        ];
        for (i, d) in hi.iter().enumerate() {
            b[40 + i * 4..44 + i * 4].copy_from_slice(&d.to_le_bytes());
        }
        b
    }

    // ---- Admin commands ----

    /// Identify with the given CNS, CNTID, NSID and CSI; data goes to `iova` (4 KiB).
    pub fn identify(cns: u8, nsid: u32, cntid: u16, csi: u8, iova: u64) -> Self {
        let mut c = Command::new(admin_opcode::IDENTIFY);
        c.nsid = nsid;
        c.prp1 = iova;
        c.cdw10 = cns as u32 | ((cntid as u32) << 16);
        c.cdw11 = (csi as u32) << 24;
        c
    }
    /// Identify Controller (CNS 01h).
    pub fn identify_controller(iova: u64) -> Self {
        Self::identify(cns::CONTROLLER, 0, 0, 0, iova)
    }
    /// Identify Namespace (CNS 00h).
    pub fn identify_namespace(nsid: u32, iova: u64) -> Self {
        Self::identify(cns::NAMESPACE, nsid, 0, 0, iova)
    }
    /// Active Namespace ID list (CNS 02h): active nsids greater than `after_nsid`.
    pub fn identify_active_ns_list(after_nsid: u32, iova: u64) -> Self {
        Self::identify(cns::ACTIVE_NS_LIST, after_nsid, 0, 0, iova)
    }
    /// Namespace Identification Descriptor list (CNS 03h).
    pub fn identify_ns_descriptors(nsid: u32, iova: u64) -> Self {
        Self::identify(cns::NS_ID_DESCRIPTORS, nsid, 0, 0, iova)
    }
    /// I/O command set specific Identify Namespace (CNS 05h).
    pub fn identify_csi_namespace(nsid: u32, csi: u8, iova: u64) -> Self {
        Self::identify(cns::CSI_NAMESPACE, nsid, 0, csi, iova)
    }
    /// I/O command set specific Identify Controller (CNS 06h).
    pub fn identify_csi_controller(csi: u8, iova: u64) -> Self {
        Self::identify(cns::CSI_CONTROLLER, 0, 0, csi, iova)
    }
    /// Get Features for `fid`.
    pub fn get_features(fid: u8, cdw11: u32) -> Self {
        let mut c = Command::new(admin_opcode::GET_FEATURES);
        c.cdw10 = fid as u32;
        c.cdw11 = cdw11;
        c
    }
    /// Set Features for `fid` with value `cdw11`.
    pub fn set_features(fid: u8, cdw11: u32) -> Self {
        let mut c = Command::new(admin_opcode::SET_FEATURES);
        c.cdw10 = fid as u32;
        c.cdw11 = cdw11;
        c
    }
    /// Set Features, Number of Queues: ask for `sq`/`cq` I/O queues (not 0's based, ≥ 1).
    pub fn set_number_of_queues(sq: u16, cq: u16) -> Self {
        let nsqr = sq.saturating_sub(1) as u32;
        let ncqr = cq.saturating_sub(1) as u32;
        Self::set_features(feature_id::NUMBER_OF_QUEUES, nsqr | (ncqr << 16))
    }
    /// Create I/O Completion Queue (physically contiguous, interrupts disabled).
    pub fn create_io_cq(qid: u16, depth: u16, iova: u64) -> Self {
        let mut c = Command::new(admin_opcode::CREATE_IO_CQ);
        c.prp1 = iova;
        c.cdw10 = qid as u32 | ((depth as u32 - 1) << 16);
        c.cdw11 = 1; // PC=1, IEN=0, IV=0
        c
    }
    /// Create I/O Submission Queue bound to `cqid` (physically contiguous, priority urgent=0).
    pub fn create_io_sq(qid: u16, depth: u16, cqid: u16, iova: u64) -> Self {
        let mut c = Command::new(admin_opcode::CREATE_IO_SQ);
        c.prp1 = iova;
        c.cdw10 = qid as u32 | ((depth as u32 - 1) << 16);
        c.cdw11 = 1 | ((cqid as u32) << 16); // PC=1
        c
    }
    /// Delete I/O Submission Queue.
    pub fn delete_io_sq(qid: u16) -> Self {
        let mut c = Command::new(admin_opcode::DELETE_IO_SQ);
        c.cdw10 = qid as u32;
        c
    }
    /// Delete I/O Completion Queue.
    pub fn delete_io_cq(qid: u16) -> Self {
        let mut c = Command::new(admin_opcode::DELETE_IO_CQ);
        c.cdw10 = qid as u32;
        c
    }
    /// Get Log Page `lid` for `nsid`: `len` bytes (a multiple of 4, ≥ 4) from byte `offset`
    /// (a multiple of 4) into `iova`.
    pub fn get_log_page(lid: u8, nsid: u32, len: u32, offset: u64, rae: bool, iova: u64) -> Self {
        let numd = (len / 4).saturating_sub(1);
        let mut c = Command::new(admin_opcode::GET_LOG_PAGE);
        c.nsid = nsid;
        c.prp1 = iova;
        c.cdw10 = lid as u32 | ((rae as u32) << 15) | ((numd & 0xffff) << 16);
        c.cdw11 = numd >> 16;
        c.cdw12 = offset as u32;
        c.cdw13 = (offset >> 32) as u32;
        c
    }
    /// Abort command `cid` on submission queue `sqid`.
    pub fn abort(sqid: u16, cid: u16) -> Self {
        let mut c = Command::new(admin_opcode::ABORT);
        c.cdw10 = sqid as u32 | ((cid as u32) << 16);
        c
    }
    /// Asynchronous Event Request.
    pub fn async_event_request() -> Self {
        Command::new(admin_opcode::ASYNC_EVENT_REQUEST)
    }
    /// Doorbell Buffer Config: the shadow doorbell page and the EventIdx page.
    pub fn doorbell_buffer_config(shadow_iova: u64, eventidx_iova: u64) -> Self {
        let mut c = Command::new(admin_opcode::DOORBELL_BUFFER_CONFIG);
        c.prp1 = shadow_iova;
        c.prp2 = eventidx_iova;
        c
    }
    /// Namespace Attachment: attach (`attach == true`) or detach `nsid` to/from the
    /// controllers in the controller list at `iova`.
    pub fn namespace_attachment(nsid: u32, attach: bool, iova: u64) -> Self {
        let mut c = Command::new(admin_opcode::NAMESPACE_ATTACHMENT);
        c.nsid = nsid;
        c.prp1 = iova;
        c.cdw10 = if attach { 0 } else { 1 };
        c
    }

    // ---- NVM I/O commands ----

    fn rw(opcode: u8, nsid: u32, slba: u64, blocks: u16) -> Self {
        Self::rw_n(opcode, nsid, slba, blocks as u32)
    }
    /// A read/write-shaped command of `blocks` (1..=65536) blocks.
    #[inline(always)]
    pub(crate) fn rw_n(opcode: u8, nsid: u32, slba: u64, blocks: u32) -> Self {
        let mut c = Command::new(opcode);
        c.nsid = nsid;
        c.cdw10 = slba as u32;
        c.cdw11 = (slba >> 32) as u32;
        c.cdw12 = blocks.wrapping_sub(1) & 0xffff;
        c
    }
    /// Read `blocks` (1..=65536 is encoded as 0's based 16 bits; pass 1..=65535 here) from `slba`.
    #[inline]
    pub fn read(nsid: u32, slba: u64, blocks: u16) -> Self {
        Self::rw(io_opcode::READ, nsid, slba, blocks)
    }
    /// Write `blocks` at `slba`.
    #[inline]
    pub fn write(nsid: u32, slba: u64, blocks: u16) -> Self {
        Self::rw(io_opcode::WRITE, nsid, slba, blocks)
    }
    /// Sets Force Unit Access (reads and writes).
    pub fn with_fua(mut self) -> Self {
        self.cdw12 |= 1 << 30;
        self
    }
    /// Flush.
    #[inline]
    pub fn flush(nsid: u32) -> Self {
        let mut c = Command::new(io_opcode::FLUSH);
        c.nsid = nsid;
        c
    }
    /// Write Zeroes of `blocks` at `slba`; `deallocate` sets DEAC.
    #[inline]
    pub fn write_zeroes(nsid: u32, slba: u64, blocks: u16, deallocate: bool) -> Self {
        let mut c = Self::rw(io_opcode::WRITE_ZEROES, nsid, slba, blocks);
        c.cdw12 |= (deallocate as u32) << 25;
        c
    }
    /// Dataset Management, deallocate, with `ranges` (1..=256) range entries at `iova`.
    #[inline]
    pub fn deallocate(nsid: u32, ranges: u16, iova: u64) -> Self {
        let mut c = Command::new(io_opcode::DATASET_MANAGEMENT);
        c.nsid = nsid;
        c.prp1 = iova;
        c.cdw10 = ranges.saturating_sub(1) as u32 & 0xff;
        c.cdw11 = 1 << 2; // AD
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dw(b: &[u8; 64], i: usize) -> u32 {
        u32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().unwrap())
    }
    fn qw(b: &[u8; 64], off: usize) -> u64 {
        u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
    }

    #[test]
    fn layout_matches_spec_offsets() {
        assert_eq!(std::mem::offset_of!(Command, nsid), 4);
        assert_eq!(std::mem::offset_of!(Command, mptr), 16);
        assert_eq!(std::mem::offset_of!(Command, prp1), 24);
        assert_eq!(std::mem::offset_of!(Command, prp2), 32);
        assert_eq!(std::mem::offset_of!(Command, cdw10), 40);
        assert_eq!(std::mem::offset_of!(Command, cdw15), 60);
    }

    #[test]
    fn qwords_match_bytes() {
        let mut c = Command::read(3, 0x1_2345_6789, 8).with_fua();
        c.set_cid(0xbeef);
        c.set_prps(0x1111_2222_3333_4000, 0x5555_6666_7777_8000);
        c.mptr = 0x0102_0304_0506_0708;
        (c.cdw2, c.cdw3, c.cdw13, c.cdw14, c.cdw15) = (0xa, 0xb, 0xc, 0xd, 0xe);
        let mut b = [0u8; 64];
        for (i, q) in c.to_qwords().iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&q.to_le_bytes());
        }
        assert_eq!(b, c.to_bytes());
    }

    #[test]
    fn read_write_encoding() {
        let mut c = Command::read(3, 0x1_2345_6789, 8);
        c.set_cid(0xbeef);
        c.set_prps(0x1000, 0x2000);
        let b = c.to_bytes();
        assert_eq!(b[0], 0x02);
        assert_eq!(u16::from_le_bytes([b[2], b[3]]), 0xbeef);
        assert_eq!(dw(&b, 1), 3);
        assert_eq!(qw(&b, 24), 0x1000);
        assert_eq!(qw(&b, 32), 0x2000);
        assert_eq!(dw(&b, 10), 0x2345_6789);
        assert_eq!(dw(&b, 11), 1);
        assert_eq!(dw(&b, 12), 7);
        let w = Command::write(1, 0, 1).with_fua().to_bytes();
        assert_eq!(w[0], 0x01);
        assert_eq!(dw(&w, 12), 1 << 30);
        assert_eq!(Command::flush(9).to_bytes()[0], 0);
        let wz = Command::write_zeroes(1, 10, 4, true).to_bytes();
        assert_eq!(wz[0], 0x08);
        assert_eq!(dw(&wz, 12), 3 | (1 << 25));
        let d = Command::deallocate(1, 3, 0x5000).to_bytes();
        assert_eq!(d[0], 0x09);
        assert_eq!(dw(&d, 10), 2);
        assert_eq!(dw(&d, 11), 4);
        assert_eq!(qw(&d, 24), 0x5000);
    }

    #[test]
    fn admin_encoding() {
        let i = Command::identify_csi_namespace(5, 2, 0x3000).to_bytes();
        assert_eq!(i[0], 0x06);
        assert_eq!(dw(&i, 1), 5);
        assert_eq!(dw(&i, 10), 5);
        assert_eq!(dw(&i, 11), 2 << 24);
        assert_eq!(dw(&Command::identify_controller(0).to_bytes(), 10), 1);
        assert_eq!(
            dw(&Command::identify_active_ns_list(7, 0).to_bytes(), 10),
            2
        );
        assert_eq!(
            dw(&Command::identify_ns_descriptors(1, 0).to_bytes(), 10),
            3
        );
        assert_eq!(
            dw(&Command::identify_csi_controller(2, 0).to_bytes(), 10),
            6
        );
        let q = Command::set_number_of_queues(4, 8).to_bytes();
        assert_eq!(q[0], 0x09);
        assert_eq!(dw(&q, 10), 7);
        assert_eq!(dw(&q, 11), 3 | (7 << 16));
        let cq = Command::create_io_cq(2, 256, 0x8000).to_bytes();
        assert_eq!(cq[0], 0x05);
        assert_eq!(dw(&cq, 10), 2 | (255 << 16));
        assert_eq!(dw(&cq, 11), 1);
        let sq = Command::create_io_sq(2, 256, 2, 0x9000).to_bytes();
        assert_eq!(sq[0], 0x01);
        assert_eq!(dw(&sq, 11), 1 | (2 << 16));
        assert_eq!(qw(&sq, 24), 0x9000);
        assert_eq!(Command::delete_io_sq(2).to_bytes()[0], 0);
        assert_eq!(Command::delete_io_cq(2).to_bytes()[0], 4);
        // 1 MiB log from offset 8 GiB + 4: NUMD = 262143.
        let l =
            Command::get_log_page(0x0c, 0xffff_ffff, 1 << 20, (8 << 30) + 4, true, 0).to_bytes();
        assert_eq!(l[0], 0x02);
        assert_eq!(dw(&l, 10), 0x0c | (1 << 15) | (0xffff << 16));
        assert_eq!(dw(&l, 11), 3);
        assert_eq!(dw(&l, 12), 4);
        assert_eq!(dw(&l, 13), 2);
        let a = Command::abort(3, 17).to_bytes();
        assert_eq!(a[0], 0x08);
        assert_eq!(dw(&a, 10), 3 | (17 << 16));
        assert_eq!(Command::async_event_request().to_bytes()[0], 0x0c);
        let db = Command::doorbell_buffer_config(0x1000, 0x2000).to_bytes();
        assert_eq!(db[0], 0x7c);
        assert_eq!(qw(&db, 32), 0x2000);
        let na = Command::namespace_attachment(4, false, 0).to_bytes();
        assert_eq!(na[0], 0x15);
        assert_eq!(dw(&na, 10), 1);
    }

    #[test]
    fn dsm_range_bytes() {
        let r = DsmRange {
            attributes: 0,
            blocks: 8,
            slba: 0x1_0000_0002,
        }
        .to_bytes();
        assert_eq!(&r[4..8], &8u32.to_le_bytes());
        assert_eq!(&r[8..16], &0x1_0000_0002u64.to_le_bytes());
    }
}
