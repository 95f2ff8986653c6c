//! Protection information computed on the host, for callers that send PRACT=0 requests
//! (`vfnvme_qpair_write_md` with PI of their own) and check what `vfnvme_qpair_read_md` returns:
//! `vfnvme_pi_generate` and `vfnvme_pi_verify`, over `vfnvme_hal::pi` (the implementation the
//! driver and the model use: CRC-16 T10-DIF guard, application tag, reference tag).

use std::ffi::c_void;

use vfnvme::hal::pi::{self, PiChecks, PiError, PiExpected, PiFormat, PiLocation, PiType};

use crate::error::{guard, FfiError, FfiResult, Status};
use crate::types::{
    NsInfo, PiOpts, VFNVME_PI_CHECK_APP, VFNVME_PI_CHECK_GUARD, VFNVME_PI_CHECK_REF,
};

fn invalid(message: String) -> FfiError {
    FfiError::new(Status::VfnvmeErrInvalidArgument, message)
}

/// The PI geometry of the namespace `info` describes.
fn format_of(info: &NsInfo) -> FfiResult<PiFormat> {
    let ty = PiType::from_code(info.protection_type).ok_or_else(|| {
        invalid(format!(
            "namespace {} has no protection information (protection_type {}): nothing to generate or check",
            info.nsid, info.protection_type
        ))
    })?;
    let at = if info.protection_first {
        PiLocation::First
    } else {
        PiLocation::Last
    };
    PiFormat::new(
        info.lba_size,
        info.metadata_size,
        info.metadata_extended,
        Some((ty, at)),
    )
    .map_err(|e| invalid(format!("namespace {}: {e}", info.nsid)))
}

/// A failure of the PI functions as an ABI error: a failed check is VFNVME_ERR_PI_CHECK, the
/// rest (lengths, layout) an invalid argument.
fn pi_error(e: PiError) -> FfiError {
    let status = if e.status().is_some() {
        Status::VfnvmeErrPiCheck
    } else {
        Status::VfnvmeErrInvalidArgument
    };
    FfiError::new(status, e.to_string())
}

/// The caller's buffer as a slice (`len` 0: empty, whatever the pointer).
///
/// # Safety
/// `p` is valid for reads of `len` bytes when `len` > 0.
unsafe fn slice<'a>(p: *const c_void, len: usize, what: &str) -> FfiResult<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(invalid(format!("{what} is NULL with a length of {len}")));
    }
    // SAFETY: non-NULL and valid for `len` bytes (the caller's contract).
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// [`slice`] for writing.
///
/// # Safety
/// `p` is valid for reads and writes of `len` bytes when `len` > 0, and not aliased.
unsafe fn slice_mut<'a>(p: *mut c_void, len: usize, what: &str) -> FfiResult<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(invalid(format!("{what} is NULL with a length of {len}")));
    }
    // SAFETY: non-NULL, valid for `len` bytes and not aliased (the caller's contract).
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) })
}

/// The namespace geometry at `info` and the PI options at `pi` (NULL: the defaults).
///
/// # Safety
/// `info` is NULL or a valid `struct vfnvme_ns_info`; `pi` NULL or a valid
/// `struct vfnvme_pi_opts`.
unsafe fn inputs(info: *const NsInfo, pi: *const PiOpts) -> FfiResult<(PiFormat, PiOpts)> {
    if info.is_null() {
        return Err(invalid(
            "info is NULL: pass the namespace's vfnvme_ns_info".into(),
        ));
    }
    // SAFETY: non-NULL and valid (the caller's contract).
    let info = unsafe { &*info };
    let format = format_of(info)?;
    // SAFETY: NULL or a valid options struct (the caller's contract).
    let opts: PiOpts = unsafe { crate::opts::read(pi, "pi") }?;
    let all = VFNVME_PI_CHECK_GUARD | VFNVME_PI_CHECK_APP | VFNVME_PI_CHECK_REF;
    if opts.check & !all != 0 {
        return Err(invalid(format!(
            "pi->check is {:#x}: combine VFNVME_PI_CHECK_GUARD, VFNVME_PI_CHECK_APP and VFNVME_PI_CHECK_REF",
            opts.check
        )));
    }
    Ok((format, opts))
}

/// Generates the protection information of the blocks in `buf` (`len` bytes), the first of
/// them at `lba`, for the namespace `info` describes, as a PRACT=0 write needs it: the guard
/// (CRC-16 T10-DIF of each block's data, and of the metadata before the PI when the PI is last),
/// the application tag `pi->app_tag`, the reference tag (type 1: the LBA's low 32 bits; type 2:
/// `pi->ref_tag` if `has_ref_tag`, else the LBA's, counting up per block; type 3: the same for
/// every block). Extended LBAs: `buf` holds `lba_size + metadata_size` bytes per block and `md`
/// is NULL (`md_len` 0); separate metadata: `buf` holds the data and `md` exactly
/// `metadata_size` bytes per block. Only the PI bytes of the metadata are written. `pi` NULL:
/// application tag 0. Any memory (not only DMA buffers).
///
/// Returns VFNVME_OK, or VFNVME_ERR_INVALID_ARGUMENT (a namespace without PI, lengths that are
/// not whole blocks or don't match, a NULL buffer; the message says which).
///
/// Thread safety: thread-safe; no allocation, lock or syscall.
///
/// # Safety
/// `info` and `pi` (NULL allowed) valid structs; `buf` valid for `len` bytes and `md` for
/// `md_len` bytes, neither read nor written by anyone else during the call.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_pi_generate(
    info: *const NsInfo,
    buf: *mut c_void,
    len: usize,
    md: *mut c_void,
    md_len: usize,
    lba: u64,
    pi: *const PiOpts,
) -> i32 {
    guard("vfnvme_pi_generate", || {
        // SAFETY: the caller's contract, passed on.
        let (format, o) = unsafe { inputs(info, pi) }?;
        // SAFETY: `buf` valid for `len` bytes (the caller's contract).
        let data = unsafe { slice_mut(buf, len, "buf") }?;
        let first_ref = if o.has_ref_tag { o.ref_tag } else { lba as u32 };
        if format.extended {
            if md_len != 0 {
                return Err(invalid(
                    "extended LBAs carry the metadata in buf: pass md NULL and md_len 0".into(),
                ));
            }
            pi::generate_extended(&format, data, lba, o.app_tag, first_ref)
        } else {
            // SAFETY: `md` valid for `md_len` bytes, apart from `buf` (the caller's contract).
            let meta = unsafe { slice_mut(md, md_len, "md") }?;
            pi::generate_separate(&format, data, meta, lba, o.app_tag, first_ref)
        }
        .map_err(pi_error)?;
        Ok(0)
    })
}

/// Checks the protection information of the blocks in `buf` (and `md`, laid out as for
/// vfnvme_pi_generate), the first of them at `lba`, as a PRACT=0 read's caller does: the
/// fields `pi->check` names (VFNVME_PI_CHECK_GUARD, _APP under `app_mask`, _REF; the reference
/// tag expected as vfnvme_pi_generate writes it), skipping blocks whose application tag is
/// FFFFh (and, type 3, reference tag FFFFFFFFh) as a controller does. `pi` NULL: the guard and
/// (types 1 and 2) the reference tag.
///
/// Returns VFNVME_OK; VFNVME_ERR_PI_CHECK at the first block that fails, with its LBA in
/// `*bad_lba` and the status a controller would report in `*status` (0x0282 guard, 0x0283
/// application tag, 0x0284 reference tag; either pointer may be NULL) and the values in
/// vfnvme_last_error(); VFNVME_ERR_INVALID_ARGUMENT as vfnvme_pi_generate.
///
/// Thread safety: thread-safe; no allocation, lock or syscall on success.
///
/// # Safety
/// As vfnvme_pi_generate (the buffers only read); `bad_lba` and `status` NULL or valid.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn vfnvme_pi_verify(
    info: *const NsInfo,
    buf: *const c_void,
    len: usize,
    md: *const c_void,
    md_len: usize,
    lba: u64,
    pi: *const PiOpts,
    bad_lba: *mut u64,
    status: *mut u16,
) -> i32 {
    guard("vfnvme_pi_verify", || {
        // SAFETY: the caller's contract, passed on.
        let (format, o) = unsafe { inputs(info, pi) }?;
        let check = if pi.is_null() {
            let reference = !matches!(format.pi, Some((PiType::Type3, _)));
            VFNVME_PI_CHECK_GUARD | if reference { VFNVME_PI_CHECK_REF } else { 0 }
        } else {
            o.check
        };
        let expected = PiExpected {
            app_tag: o.app_tag,
            app_mask: o.app_mask,
            ref_tag: if o.has_ref_tag { o.ref_tag } else { lba as u32 },
        };
        let checks = PiChecks::from_prchk(check);
        // SAFETY: `buf` valid for `len` bytes (the caller's contract).
        let data = unsafe { slice(buf, len, "buf") }?;
        let result = if format.extended {
            if md_len != 0 {
                return Err(invalid(
                    "extended LBAs carry the metadata in buf: pass md NULL and md_len 0".into(),
                ));
            }
            pi::verify_extended(&format, data, lba, checks, expected)
        } else {
            // SAFETY: `md` valid for `md_len` bytes (the caller's contract).
            let meta = unsafe { slice(md, md_len, "md") }?;
            pi::verify_separate(&format, data, meta, lba, checks, expected)
        };
        if let Err(e) = result {
            if let (Some(st), Some(at)) = (e.status(), e.lba()) {
                if !bad_lba.is_null() {
                    // SAFETY: non-NULL and valid (the caller's contract).
                    unsafe { bad_lba.write(at) };
                }
                if !status.is_null() {
                    // SAFETY: non-NULL and valid (the caller's contract).
                    unsafe { status.write(st) };
                }
            }
            return Err(pi_error(e));
        }
        Ok(0)
    })
}
