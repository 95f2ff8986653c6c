//! Reads and writes of namespaces formatted with protection information, as QEMU 7.2's NVMe
//! device does them (`hw/nvme/dif.c`): CDW12 PRINFO (PRACT bit 29, PRCHK guard/app/ref bits
//! 28:26), the expected initial reference tag in CDW14, the application tag and mask in
//! CDW15.
//!
//! - PRACT=1 with 8 metadata bytes: no metadata moves; writes generate the PI, reads check it
//!   (per PRCHK) and strip it.
//! - PRACT=1 with more: the host's metadata moves; on writes its PI part is replaced by
//!   generated PI.
//! - PRACT=0: the metadata moves as given; writes and reads check the PI per PRCHK.
//! - Type 1 with the reference check needs CDW14 = the starting LBA's low 32 bits (else
//!   Invalid Protection Information, DNR); failed checks complete with 2h/82h, 83h, 84h
//!   (no DNR), before any data is stored (writes) or transferred (reads).
//! - Blocks never written (or deallocated) read back with PI all FFh, so checks skip them.
//!
//! The data and metadata go through a bounce buffer per command, as in QEMU.

use super::dma_engine;
use super::dptr;
use super::iommu::ModelIommu;
use super::media::Media;
use super::sqe::{media, Sqe, Status};
use super::storage::SparseStore;
use vfnvme_hal::pi::{self, Pi, PiChecks, PiError, PiExpected, PiFormat, PiType, PI_BYTES};

/// A command's PRINFO and tags (CDW12 bits 29:26, CDW14, CDW15).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PrInfo {
    /// PRACT: the controller inserts and strips PI.
    pub pract: bool,
    /// The PRCHK checks.
    pub checks: PiChecks,
    /// The expected tags.
    pub expected: PiExpected,
}

impl PrInfo {
    /// The PRINFO of an NVM read, write or Write Zeroes.
    pub fn of(sqe: &Sqe) -> PrInfo {
        let prinfo = (sqe.cdw(12) >> 26) & 0xF;
        let cdw15 = sqe.cdw(15);
        PrInfo {
            pract: prinfo & 0b1000 != 0,
            checks: PiChecks::from_prchk((prinfo & 0b111) as u8),
            expected: PiExpected {
                app_tag: cdw15 as u16,
                app_mask: (cdw15 >> 16) as u16,
                ref_tag: sqe.cdw(14),
            },
        }
    }

    /// Type 1 with the reference check: CDW14 must be the starting LBA's low 32 bits.
    pub fn check_type1(&self, ty: PiType, slba: u64) -> Result<(), Status> {
        if ty == PiType::Type1 && self.checks.reference && slba as u32 != self.expected.ref_tag {
            return Err(Status::INVALID_PROTECTION_INFO);
        }
        Ok(())
    }
}

/// Whether metadata moves between host and device: not with PRACT and 8-byte metadata.
pub(crate) fn metadata_moves(ms: u16, pract: bool) -> bool {
    !(pract && usize::from(ms) == PI_BYTES)
}

/// The status of a PI failure.
fn status_of(e: PiError) -> Status {
    match e.status() {
        Some(s) => media(s as u8),
        None => Status::INTERNAL_ERROR,
    }
}

/// Checks the PI of the bounce buffers per PRCHK. As QEMU: a guard error on the first block of
/// a command at LBA 0 whose data is all zeroes is taken for an unwritten block (its PI set to
/// all FFh) and passes.
fn check(
    format: &PiFormat,
    data: &[u8],
    md: &mut [u8],
    slba: u64,
    info: &PrInfo,
) -> Result<(), Status> {
    let run = |md: &[u8]| pi::verify_separate(format, data, md, slba, info.checks, info.expected);
    match run(md) {
        Ok(()) => Ok(()),
        Err(PiError::Guard { lba: 0, .. })
            if slba == 0
                && data
                    .get(..format.block_size as usize)
                    .is_some_and(|d| d.iter().all(|&b| b == 0)) =>
        {
            let at = format.pi_offset();
            if let Some(pi) = md.get_mut(at..at + PI_BYTES) {
                pi.fill(0xFF);
            }
            run(md).map_err(status_of)
        }
        Err(e) => Err(status_of(e)),
    }
}

/// Gives unwritten blocks PI all FFh (QEMU's `nvme_dif_mangle_mdata`).
fn mangle_unwritten(store: &SparseStore, format: &PiFormat, slba: u64, md: &mut [u8]) {
    let ms = usize::from(format.ms);
    let mut written = vec![0u8; md.len() / ms];
    Media::written(store, slba, &mut written);
    let at = format.pi_offset();
    for (m, w) in md.chunks_exact_mut(ms).zip(&written) {
        if *w == 0 {
            Pi::ALL_ONES.write_to(&mut m[at..]);
        }
    }
}

/// A command's transfer: the namespace geometry and what moves.
pub(crate) struct Transfer<'a> {
    /// The namespace's store.
    pub store: &'a SparseStore,
    /// The bounce buffers' format (separate layout).
    pub format: PiFormat,
    /// The host's buffer is extended (data and metadata interleaved).
    pub extended: bool,
    /// Metadata moves between host and device.
    pub md_moves: bool,
    /// The first LBA.
    pub slba: u64,
    /// The memory page size.
    pub page: u64,
}

impl Transfer<'_> {
    /// The bytes the host's data buffer (PRP1/PRP2) holds for `nlb` blocks.
    pub fn host_len(&self, nlb: u64) -> u64 {
        let ms = if self.extended && self.md_moves {
            u64::from(self.format.ms)
        } else {
            0
        };
        nlb * (u64::from(self.format.block_size) + ms)
    }

    /// Fetches the host's data and metadata into the bounce buffers.
    fn fetch(
        &self,
        iommu: &ModelIommu,
        sqe: &Sqe,
        data: &mut [u8],
        md: &mut [u8],
    ) -> Result<(), Status> {
        let page = self.page;
        if self.extended && self.md_moves {
            let mut host = vec![0u8; data.len() + md.len()];
            dptr::read_in(iommu, sqe, page, &mut host)?;
            let (bs, ms) = self.sizes();
            let blocks = data.chunks_mut(bs).zip(md.chunks_mut(ms));
            for (element, (d, m)) in host.chunks(bs + ms).zip(blocks) {
                d.copy_from_slice(&element[..bs]);
                m.copy_from_slice(&element[bs..]);
            }
            return Ok(());
        }
        dptr::read_in(iommu, sqe, page, data)?;
        if self.md_moves {
            dma_engine::read(iommu, sqe.mptr(), md).map_err(|_| Status::DATA_TRANSFER_ERROR)?;
        }
        Ok(())
    }

    /// Delivers the bounce buffers to the host.
    fn deliver(&self, iommu: &ModelIommu, sqe: &Sqe, data: &[u8], md: &[u8]) -> Result<(), Status> {
        let page = self.page;
        if self.extended && self.md_moves {
            let (bs, ms) = self.sizes();
            let mut host = Vec::with_capacity(data.len() + md.len());
            for (d, m) in data.chunks(bs).zip(md.chunks(ms)) {
                host.extend_from_slice(d);
                host.extend_from_slice(m);
            }
            return dptr::write_out(iommu, sqe, page, &host);
        }
        dptr::write_out(iommu, sqe, page, data)?;
        if self.md_moves {
            dma_engine::write(iommu, sqe.mptr(), md).map_err(|_| Status::DATA_TRANSFER_ERROR)?;
        }
        Ok(())
    }

    /// Data and metadata bytes per block.
    fn sizes(&self) -> (usize, usize) {
        (self.format.block_size as usize, usize::from(self.format.ms))
    }

    /// The bounce buffers for `nlb` blocks.
    fn bounce(&self, nlb: u64) -> (Vec<u8>, Vec<u8>) {
        let (bs, ms) = self.sizes();
        (vec![0u8; nlb as usize * bs], vec![0u8; nlb as usize * ms])
    }

    /// Executes a write of `nlb` blocks: fetch, generate (PRACT) or check, store.
    pub fn write(
        &self,
        iommu: &ModelIommu,
        sqe: &Sqe,
        nlb: u64,
        info: &PrInfo,
    ) -> Result<(), Status> {
        let (mut data, mut md) = self.bounce(nlb);
        self.fetch(iommu, sqe, &mut data, &mut md)?;
        info.check_type1(self.ty(), self.slba)?;
        if info.pract {
            pi::insert_separate(
                &self.format,
                &data,
                &mut md,
                info.expected.app_tag,
                info.expected.ref_tag,
            )
            .map_err(status_of)?;
        } else {
            check(&self.format, &data, &mut md, self.slba, info)?;
        }
        let media = self.media();
        media.save(self.store, self.slba, &data, &md);
        Media::mark_written(self.store, self.slba, nlb);
        Ok(())
    }

    /// Executes a read of `nlb` blocks: load, check per PRCHK, deliver (without the PI when
    /// PRACT strips 8-byte metadata). Nothing is delivered if a check fails.
    pub fn read(
        &self,
        iommu: &ModelIommu,
        sqe: &Sqe,
        nlb: u64,
        info: &PrInfo,
    ) -> Result<(), Status> {
        info.check_type1(self.ty(), self.slba)?;
        let (mut data, mut md) = self.bounce(nlb);
        self.media().load(self.store, self.slba, &mut data, &mut md);
        mangle_unwritten(self.store, &self.format, self.slba, &mut md);
        check(&self.format, &data, &mut md, self.slba, info)?;
        self.deliver(iommu, sqe, &data, &md)
    }

    /// The PI type of the format.
    fn ty(&self) -> PiType {
        self.format.pi.map_or(PiType::Type1, |(t, _)| t)
    }

    /// The store geometry.
    fn media(&self) -> Media {
        Media {
            block: u64::from(self.format.block_size),
            ms: u64::from(self.format.ms),
            extended: self.extended,
        }
    }
}
