//! `vfnvme_pi_generate` and `vfnvme_pi_verify` through the ABI: the PI they write is what
//! `vfnvme_hal::pi` computes (guard = CRC-16 T10-DIF, reference tag = LBA for type 1), a spoiled
//! field fails its check at its block with the controller's status, and malformed arguments
//! are refused with a message.

use std::ffi::{c_void, CStr};
use std::ptr;

use vfnvme::hal::pi::{crc16_t10dif, Pi};

use crate::error::Status;
use crate::pi::{vfnvme_pi_generate, vfnvme_pi_verify};
use crate::types::{NsInfo, PiOpts, VFNVME_PI_CHECK_APP, VFNVME_PI_CHECK_GUARD};

fn info(lba_size: u32, ms: u16, extended: bool, ty: u8, first: bool) -> NsInfo {
    NsInfo {
        nsid: 1,
        lba_size,
        blocks: 1 << 20,
        metadata_size: ms,
        protection_type: ty,
        metadata_extended: extended,
        io_supported: false,
        protection_first: first,
    }
}

fn last_error() -> String {
    // SAFETY: vfnvme_last_error returns a valid NUL-terminated string of this thread.
    unsafe { CStr::from_ptr(crate::error::vfnvme_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + 3) as u8).collect()
}

#[test]
fn generated_pi_is_the_crc_and_the_lba_and_verifies() {
    let ns = info(512, 8, true, 1, false);
    let mut buf = pattern(4 * 520);
    let opts = PiOpts {
        app_tag: 0x1234,
        ..PiOpts::default()
    };
    // SAFETY: valid structs and buffers of the lengths given.
    let rc = unsafe {
        vfnvme_pi_generate(
            &ns,
            buf.as_mut_ptr().cast(),
            buf.len(),
            ptr::null_mut(),
            0,
            77,
            &opts,
        )
    };
    assert_eq!(rc, 0, "{}", last_error());
    for b in 0..4 {
        let e = &buf[b * 520..(b + 1) * 520];
        let pi = Pi::read_from(&e[512..]).unwrap();
        assert_eq!(pi.guard, crc16_t10dif(&e[..512]));
        assert_eq!(pi.app, 0x1234);
        assert_eq!(pi.reference, 77 + b as u32);
    }
    let check = PiOpts {
        check: VFNVME_PI_CHECK_GUARD | VFNVME_PI_CHECK_APP,
        app_tag: 0x1234,
        app_mask: 0xffff,
        ..PiOpts::default()
    };
    let (mut at, mut st) = (0u64, 0u16);
    // SAFETY: as above; the out-pointers are valid.
    let rc = unsafe {
        vfnvme_pi_verify(
            &ns,
            buf.as_ptr().cast(),
            buf.len(),
            ptr::null(),
            0,
            77,
            &check,
            &mut at,
            &mut st,
        )
    };
    assert_eq!(rc, 0, "{}", last_error());
    // Spoil block 2's guard: a guard failure at LBA 79, status 0x0282.
    buf[2 * 520 + 512] ^= 1;
    // SAFETY: as above.
    let rc = unsafe {
        vfnvme_pi_verify(
            &ns,
            buf.as_ptr().cast(),
            buf.len(),
            ptr::null(),
            0,
            77,
            &check,
            &mut at,
            &mut st,
        )
    };
    assert_eq!(rc, Status::VfnvmeErrPiCheck.code());
    assert_eq!((at, st), (79, 0x0282));
    assert!(last_error().contains("guard"), "{}", last_error());
    // NULL options: the guard is checked too.
    // SAFETY: as above, NULL options and out-pointers allowed.
    let rc = unsafe {
        vfnvme_pi_verify(
            &ns,
            buf.as_ptr().cast(),
            buf.len(),
            ptr::null(),
            0,
            77,
            ptr::null(),
            ptr::null_mut(),
            ptr::null_mut(),
        )
    };
    assert_eq!(rc, Status::VfnvmeErrPiCheck.code());
}

#[test]
fn separate_metadata_type_2_first_with_the_callers_reference_tag() {
    let ns = info(4096, 16, false, 2, true);
    let mut data = pattern(3 * 4096);
    let mut md = vec![0xeeu8; 3 * 16];
    let opts = PiOpts {
        app_tag: 7,
        app_mask: 0xffff,
        has_ref_tag: true,
        ref_tag: 0x100,
        check: VFNVME_PI_CHECK_GUARD | VFNVME_PI_CHECK_APP | crate::types::VFNVME_PI_CHECK_REF,
        ..PiOpts::default()
    };
    // SAFETY: valid structs and buffers of the lengths given.
    let rc = unsafe {
        vfnvme_pi_generate(
            &ns,
            data.as_mut_ptr().cast(),
            data.len(),
            md.as_mut_ptr().cast(),
            md.len(),
            5,
            &opts,
        )
    };
    assert_eq!(rc, 0, "{}", last_error());
    for b in 0..3 {
        let m = &md[b * 16..(b + 1) * 16];
        let pi = Pi::read_from(m).unwrap();
        assert_eq!(pi.guard, crc16_t10dif(&data[b * 4096..(b + 1) * 4096]));
        assert_eq!(pi.reference, 0x100 + b as u32);
        assert_eq!(&m[8..], &[0xee; 8], "only the PI bytes are written");
    }
    let mut st = 0u16;
    md[16 + 7] ^= 1;
    // SAFETY: as above.
    let rc = unsafe {
        vfnvme_pi_verify(
            &ns,
            data.as_ptr().cast(),
            data.len(),
            md.as_ptr().cast(),
            md.len(),
            5,
            &opts,
            ptr::null_mut(),
            &mut st,
        )
    };
    assert_eq!(rc, Status::VfnvmeErrPiCheck.code());
    assert_eq!(st, 0x0284);
}

#[test]
fn malformed_arguments_are_refused_with_a_message() {
    let mut buf = pattern(520);
    let p = buf.as_mut_ptr().cast::<c_void>();
    let call = |ns: &NsInfo, len: usize, md_len: usize, opts: *const PiOpts| {
        // SAFETY: `buf` holds 520 bytes and lengths never exceed it; md NULL with md_len > 0
        // is refused before use.
        unsafe { vfnvme_pi_generate(ns, p, len, ptr::null_mut(), md_len, 0, opts) }
    };
    let bad = Status::VfnvmeErrInvalidArgument.code();
    assert_eq!(
        call(&info(512, 8, true, 0, false), 520, 0, ptr::null()),
        bad
    );
    assert!(last_error().contains("no protection information"));
    assert_eq!(
        call(&info(512, 8, true, 1, false), 500, 0, ptr::null()),
        bad
    );
    assert_eq!(
        call(&info(512, 4, true, 1, false), 516, 0, ptr::null()),
        bad
    );
    assert_eq!(
        call(&info(512, 8, true, 1, false), 520, 8, ptr::null()),
        bad
    );
    assert_eq!(
        call(&info(512, 8, false, 1, false), 512, 8, ptr::null()),
        bad
    );
    assert!(last_error().contains("md is NULL"), "{}", last_error());
    let odd = PiOpts {
        check: 0x10,
        ..PiOpts::default()
    };
    assert_eq!(call(&info(512, 8, true, 1, false), 520, 0, &odd), bad);
    // SAFETY: NULL info is refused before anything is read.
    let rc = unsafe { vfnvme_pi_generate(ptr::null(), p, 520, ptr::null_mut(), 0, 0, ptr::null()) };
    assert_eq!(rc, bad);
}
