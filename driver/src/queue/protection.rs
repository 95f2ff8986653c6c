//! Metadata and end-to-end protection information on the one request path.
//!
//! A namespace formatted with metadata (Identify Namespace FLBAS/LBAF MS) moves it either in the
//! data buffer after each block (extended LBAs, FLBAS bit 4) or in a buffer of its own pointed to
//! by MPTR. With protection information (DPS type 1, 2 or 3) eight bytes of it are PI: a guard
//! (CRC-16 T10-DIF of the block), an application tag and a reference tag. A plain request
//! ([`Request::read`], [`Request::write`]) moves no metadata and is refused on such a namespace;
//! [`Request::with_metadata`] and [`Request::borrowed_with_metadata`] make one that does, checked
//! once here (state, range, both lengths, the PI options against the format). The request
//! carries the fields its commands need ([`Protection`]); the queue writes them into each
//! command (MPTR, CDW12 PRINFO, CDW14 reference tag, CDW15 application tag and mask), advancing
//! MPTR and the reference tag when it splits the request at MDTS.

use super::request::{not_rw, Data, Op, Request, Target};
use crate::error::{SubmitError, SubmitErrorKind};
use crate::namespace::{Namespace, NamespaceState};
use crate::spec::Command;
use vfnvme_hal::{DmaBuffer, DmaSpan};

pub use vfnvme_hal::pi::PiChecks;

/// How a request uses its namespace's protection information.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PiOptions {
    /// PRACT: the controller inserts the PI on writes and checks and strips it on reads. With
    /// 8 bytes of metadata (PI only) no metadata moves at all; with more, the host's metadata
    /// moves and the controller writes the PI part.
    pub act: bool,
    /// What the controller checks (PRCHK).
    pub check: PiChecks,
    /// The application tag written (with [`act`](Self::act)) or expected.
    pub app_tag: u16,
    /// Which bits of the application tag are compared.
    pub app_mask: u16,
    /// The reference tag of the first block: `None` takes the LBA's low 32 bits, which type 1
    /// requires; type 2 takes any value (it counts up per block), type 3 ignores it.
    pub ref_tag: Option<u32>,
}

/// The fields that a request with metadata or protection information adds to its commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MetadataFields {
    /// Bytes per block in the data buffer (the block, plus its metadata for extended LBAs).
    pub(crate) elem: u32,
    /// Device address of the separate metadata (MPTR); 0 when none moves separately.
    pub(crate) mptr: u64,
    /// Separate metadata bytes per block (0 when none moves separately).
    pub(crate) md_per_block: u16,
    /// PRINFO: PRACT (bit 3) and PRCHK guard, application, reference (bits 2:0).
    pub(crate) prinfo: u8,
    /// Application tag (CDW15 bits 15:0).
    pub(crate) app_tag: u16,
    /// Application tag mask (CDW15 bits 31:16).
    pub(crate) app_mask: u16,
    /// Reference tag of the first block (CDW14).
    pub(crate) ref_tag: u32,
    /// The reference tag counts up per block (types 1 and 2).
    pub(crate) ref_steps: bool,
}

impl MetadataFields {
    /// Writes the fields into `cmd`, the command of a request that starts `done` blocks into
    /// it (a split advances MPTR and the reference tag of types 1 and 2).
    pub(crate) fn apply(&self, cmd: &mut Command, done: u32) {
        cmd.cdw12 |= u32::from(self.prinfo) << 26;
        if self.mptr != 0 {
            cmd.mptr = self.mptr + u64::from(done) * u64::from(self.md_per_block);
        }
        cmd.cdw14 = if self.ref_steps {
            self.ref_tag.wrapping_add(done)
        } else {
            self.ref_tag
        };
        cmd.cdw15 = u32::from(self.app_tag) | u32::from(self.app_mask) << 16;
    }
}

/// Metadata and protection information of a request: nothing for a plain one (the common case,
/// which costs the submission nothing), or the fields its commands carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Protection {
    pub(crate) fields: Option<MetadataFields>,
}

impl Protection {
    /// Whether the request moves metadata or uses protection information.
    pub fn is_set(&self) -> bool {
        self.fields.is_some()
    }
    /// PRINFO as CDW12 bits 29:26 carry it (0 for a plain request).
    pub fn prinfo(&self) -> u8 {
        self.fields.map_or(0, |f| f.prinfo)
    }
    /// The device address of the separate metadata (0: none).
    pub fn mptr(&self) -> u64 {
        self.fields.map_or(0, |f| f.mptr)
    }
}

/// Where the separate metadata of a request is, as a device address and a length.
#[derive(Debug, Clone, Copy)]
struct MetadataAt {
    iova: u64,
    len: usize,
}

impl<'a, T> Request<'a, T> {
    /// A read or write (`op`) of `blocks` blocks at `lba` of `ns`, a namespace formatted with
    /// metadata, on `buf`: the blocks (with their metadata after each one for extended LBAs),
    /// and, for a format with separate metadata, the metadata at `metadata_offset` of the same
    /// buffer (`blocks * ms` bytes, 4-byte aligned, after the data). `pi` says how the
    /// protection information is used. The buffer comes back in the completion or the error.
    #[allow(clippy::too_many_arguments)]
    pub fn with_metadata(
        op: Op,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        metadata_offset: Option<usize>,
        pi: PiOptions,
        tag: T,
    ) -> Result<Self, SubmitError> {
        let (iova, len) = (buf.iova(), buf.len());
        let md = match metadata_offset {
            None => None,
            Some(off) => {
                let data_bytes = data_bytes(ns, blocks, &pi);
                if (off as u64) < data_bytes || off > len {
                    let kind = SubmitErrorKind::MetadataBuffer {
                        needed: metadata_bytes(ns, blocks),
                        len: len.saturating_sub(off),
                        why: "the metadata offset must lie past the data, inside the buffer",
                    };
                    return Err(SubmitError::new(kind, Some(buf)));
                }
                Some(MetadataAt {
                    iova: iova + off as u64,
                    len: len - off,
                })
            }
        };
        // The data's length: up to the metadata when it shares the buffer.
        let data_len = metadata_offset.map_or(len, |o| o.min(len));
        metadata_rw(op, ns, lba, blocks, Data::Owned(buf), data_len, md, pi, tag)
    }

    /// [`with_metadata`](Self::with_metadata) on borrowed memory: the data in `span`, the
    /// separate metadata (if the format moves it for this request) in `metadata`.
    ///
    /// # Safety
    /// Both spans under the contract of [`Request::borrowed`]: from the pool of the controller
    /// (or subsystem) the request goes to, allocated and untouched until it completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn borrowed_with_metadata(
        op: Op,
        ns: &Namespace,
        lba: u64,
        blocks: u32,
        span: DmaSpan,
        metadata: Option<DmaSpan>,
        pi: PiOptions,
        tag: T,
    ) -> Result<Self, SubmitError> {
        let md = metadata.map(|m| MetadataAt {
            iova: m.iova(),
            len: m.len(),
        });
        metadata_rw(
            op,
            ns,
            lba,
            blocks,
            Data::Span(span),
            span.len(),
            md,
            pi,
            tag,
        )
    }
}

/// The bytes a request with metadata of `blocks` blocks on `ns` with `pi` moves: in its data
/// buffer (with extended LBAs' metadata), and in its separate metadata buffer (0 when none
/// moves separately). What [`Request::borrowed_with_metadata`] checks the spans against.
pub fn metadata_transfer(ns: &Namespace, blocks: u32, pi: &PiOptions) -> (u64, u64) {
    let id = ns.identity();
    let separate = !id.metadata_extended && metadata_moves(ns, pi);
    let md = if separate {
        metadata_bytes(ns, blocks)
    } else {
        0
    };
    (data_bytes(ns, blocks, pi), md)
}

/// Whether the metadata moves for a request with `pi` on `ns`: not with PRACT on a format whose
/// metadata is the PI alone (8 bytes).
fn metadata_moves(ns: &Namespace, pi: &PiOptions) -> bool {
    let id = ns.identity();
    !(pi.act && id.protection_type != 0 && id.metadata_size == 8)
}

/// Data bytes of `blocks` blocks of `ns` for a request with `pi`.
fn data_bytes(ns: &Namespace, blocks: u32, pi: &PiOptions) -> u64 {
    let id = ns.identity();
    let extra = if id.metadata_extended && metadata_moves(ns, pi) {
        u64::from(id.metadata_size)
    } else {
        0
    };
    u64::from(blocks) * ((1u64 << id.lba_shift.min(31)) + extra)
}

/// Separate metadata bytes of `blocks` blocks of `ns`.
fn metadata_bytes(ns: &Namespace, blocks: u32) -> u64 {
    u64::from(blocks) * u64::from(ns.identity().metadata_size)
}

fn invalid(what: &'static str) -> SubmitErrorKind {
    SubmitErrorKind::InvalidRequest { what }
}

/// The checks and the request of [`Request::with_metadata`] and
/// [`Request::borrowed_with_metadata`].
#[allow(clippy::too_many_arguments)]
fn metadata_rw<'a, T>(
    op: Op,
    ns: &Namespace,
    lba: u64,
    blocks: u32,
    data: Data<'a>,
    data_len: usize,
    md: Option<MetadataAt>,
    pi: PiOptions,
    tag: T,
) -> Result<Request<'a, T>, SubmitError> {
    match check(op, ns, lba, blocks, data_len, md, &pi) {
        Ok((target, fields)) => Ok(Request {
            op,
            lba_shift: target.lba_shift,
            nsid: target.nsid,
            lba,
            blocks,
            data,
            protection: Protection {
                fields: Some(fields),
            },
            tag,
        }),
        Err(kind) => Err(SubmitError::new(kind, data.into_buffer())),
    }
}

/// Every check of a request with metadata, once: the operation, the namespace's state and
/// format, the range, the data's and the metadata's lengths, the PI options.
fn check(
    op: Op,
    ns: &Namespace,
    lba: u64,
    blocks: u32,
    data_len: usize,
    md: Option<MetadataAt>,
    pi: &PiOptions,
) -> Result<(Target, MetadataFields), SubmitErrorKind> {
    if !matches!(op, Op::Read | Op::Write) {
        return Err(not_rw(op));
    }
    let state = ns.state();
    if state != NamespaceState::Active {
        return Err(SubmitErrorKind::NamespaceNotActive {
            nsid: ns.nsid(),
            state,
        });
    }
    let id = ns.identity();
    if id.metadata_size == 0 && id.protection_type == 0 {
        return Err(invalid(
            "this namespace's format has no metadata: use a plain read or write",
        ));
    }
    if id.lba_shift > 31 {
        return Err(invalid(
            "the namespace reports a block size this driver can't use",
        ));
    }
    let target = Target {
        nsid: ns.nsid(),
        blocks: ns.blocks(),
        lba_shift: id.lba_shift,
    };
    target.check_range(lba, u64::from(blocks))?;
    let needed = data_bytes(ns, blocks, pi);
    if (data_len as u64) < needed {
        return Err(SubmitErrorKind::BufferTooSmall {
            needed,
            len: data_len,
        });
    }
    let separate = !id.metadata_extended && metadata_moves(ns, pi);
    let (mptr, md_per_block) = match (separate, md) {
        (true, Some(m)) => {
            let needed = metadata_bytes(ns, blocks);
            if (m.len as u64) < needed {
                return Err(SubmitErrorKind::MetadataBuffer {
                    needed,
                    len: m.len,
                    why: "shorter than the blocks' metadata",
                });
            }
            if m.iova & 3 != 0 {
                return Err(SubmitErrorKind::MetadataBuffer {
                    needed,
                    len: m.len,
                    why: "MPTR must be 4-byte aligned",
                });
            }
            (m.iova, id.metadata_size)
        }
        (true, None) => {
            return Err(SubmitErrorKind::MetadataBuffer {
                needed: metadata_bytes(ns, blocks),
                len: 0,
                why: "this format keeps metadata in a buffer of its own: pass one",
            })
        }
        (false, Some(_)) => {
            return Err(invalid(
                "no separate metadata moves for this request (extended LBAs carry it in the data buffer; with PRACT and 8-byte metadata none moves): pass none",
            ))
        }
        (false, None) => (0, 0),
    };
    let pi_type = id.protection_type;
    let checks = pi.check.any();
    if pi_type == 0 && (pi.act || checks) {
        return Err(invalid(
            "this namespace's format has no protection information: PRACT and PRCHK need one",
        ));
    }
    if pi_type == 3 && pi.check.reference {
        return Err(invalid(
            "protection information type 3 has no reference tag to check",
        ));
    }
    let lba_tag = lba as u32;
    let ref_tag = match (pi_type, pi.ref_tag) {
        (1, Some(r)) if r != lba_tag => {
            return Err(invalid(
                "type 1's reference tag is the LBA's low 32 bits: pass None or that value",
            ))
        }
        (_, Some(r)) => r,
        (_, None) => lba_tag,
    };
    let prinfo = u8::from(pi.act) << 3
        | u8::from(pi.check.guard) << 2
        | u8::from(pi.check.app) << 1
        | u8::from(pi.check.reference);
    let elem = (needed / u64::from(blocks.max(1))) as u32;
    Ok((
        target,
        MetadataFields {
            elem,
            mptr,
            md_per_block,
            prinfo,
            app_tag: pi.app_tag,
            app_mask: pi.app_mask,
            ref_tag,
            ref_steps: matches!(pi_type, 1 | 2),
        },
    ))
}
