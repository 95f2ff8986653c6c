//! Handles of the wrong kind: one registry of live handles (`mp/registry.rs`) holds both
//! subsystem and channel pointers, each with its type, so that a channel passed where a
//! `vfnvme_subsys *` is expected (or the reverse) is refused before anything reads one type's
//! memory as the other's (or frees it as such).
//!
//! Were the gate to let the wrong kind through, the confused call would be undefined
//! behaviour, so these tests assert on the registry gate first, without dereferencing
//! anything, and make the ABI call only once the gate refuses the wrong kind; they then check
//! the ABI's answer and that the handle passed by mistake still works.

use crate::error::vfnvme_last_error;
use crate::mp::channel::*;
use crate::mp::model::*;
use crate::mp::registry;
use crate::mp::subsys::*;
use crate::mp::types::*;
use crate::Status;
use std::ffi::CStr;
use std::ptr::{null, null_mut};

const OK: i32 = 0;

/// The thread's last error message.
fn last_error() -> String {
    // SAFETY: never NULL, NUL-terminated.
    unsafe { CStr::from_ptr(vfnvme_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// A model subsystem of two controllers and one namespace, and a channel on namespace 1.
fn open() -> (*mut Subsys, *mut Channel) {
    let opts = ModelSubsysOpts {
        controllers: 2,
        namespaces: 1,
        blocks: 4096,
        ..ModelSubsysOpts::default()
    };
    let mut s = null_mut();
    // SAFETY: valid pointers.
    let rc = unsafe { vfnvme_subsys_open_model(&opts, null(), &mut s) };
    assert_eq!(rc, OK, "{}", last_error());
    let mut ch = null_mut();
    // SAFETY: a live subsystem and valid pointers.
    let rc = unsafe { vfnvme_channel_open(s, 1, null(), &mut ch) };
    assert_eq!(rc, OK, "{}", last_error());
    (s, ch)
}

/// Closes `ch`, then `s`, both of the right kind.
fn close(s: *mut Subsys, ch: *mut Channel) {
    // SAFETY: live handles of the right kind, closed once.
    assert_eq!(unsafe { vfnvme_channel_close(ch) }, OK, "{}", last_error());
    // SAFETY: as above.
    assert_eq!(unsafe { vfnvme_subsys_close(s) }, OK, "{}", last_error());
}

/// A channel passed as a `vfnvme_subsys *`: `vfnvme_subsys_info` (and so `vfnvme_subsys_close`,
/// which would free the channel as a subsystem) must fail with VFNVME_ERR_INVALID_ARGUMENT and
/// leave the channel usable.
#[test]
fn a_channel_is_not_accepted_as_a_subsystem() {
    let (s, ch) = open();
    let as_subsys = ch.cast::<Subsys>().cast_const();
    let gate = registry::check(as_subsys, "subsys");
    assert!(
        gate.is_err(),
        "the live-handle registry accepts channel {ch:p} as a subsystem: vfnvme_subsys_info would read a Channel as a Subsys and vfnvme_subsys_close would free it as one (the call is not made here: undefined behaviour)"
    );
    let mut nqn = [0 as std::ffi::c_char; 64];
    // SAFETY: after the gate above refused the wrong kind, the call must not dereference it.
    let rc = unsafe { vfnvme_subsys_info(as_subsys, nqn.as_mut_ptr(), nqn.len()) };
    assert_eq!(
        rc,
        Status::VfnvmeErrInvalidArgument.code(),
        "{}",
        last_error()
    );
    // SAFETY: as above.
    let rc = unsafe { vfnvme_subsys_close(ch.cast::<Subsys>()) };
    assert_eq!(
        rc,
        Status::VfnvmeErrInvalidArgument.code(),
        "{}",
        last_error()
    );
    let mut stats = ChannelStats::default();
    // SAFETY: the channel, still open.
    let rc = unsafe { vfnvme_channel_stats(ch, &mut stats) };
    assert_eq!(rc, OK, "the channel still works: {}", last_error());
    close(s, ch);
}

/// A subsystem passed as a `vfnvme_channel *`: `vfnvme_channel_close` must fail with
/// VFNVME_ERR_INVALID_ARGUMENT and leave the subsystem usable. (Before handles carried
/// their kind, only the channel's magic value, read out of the subsystem's memory, stopped it.)
#[test]
fn a_subsystem_is_not_accepted_as_a_channel() {
    let (s, ch) = open();
    let as_channel = s.cast::<Channel>();
    let gate = registry::check(as_channel.cast_const(), "channel");
    assert!(
        gate.is_err(),
        "the live-handle registry accepts subsystem {s:p} as a channel: vfnvme_channel_close then reads the Subsys as a Channel (only its magic value stops it; the call is not made here)"
    );
    // SAFETY: after the gate above refused the wrong kind, the call must not dereference it.
    let rc = unsafe { vfnvme_channel_close(as_channel) };
    assert_eq!(
        rc,
        Status::VfnvmeErrInvalidArgument.code(),
        "{}",
        last_error()
    );
    let mut nqn = [0 as std::ffi::c_char; 64];
    // SAFETY: the subsystem, still open, and a buffer of its length.
    let rc = unsafe { vfnvme_subsys_info(s, nqn.as_mut_ptr(), nqn.len()) };
    assert_eq!(rc, 2, "the subsystem still works: {}", last_error());
    close(s, ch);
}

/// The right kinds pass the gate (the tests above would prove nothing if nothing did).
#[test]
fn handles_of_the_right_kind_pass_the_registry() {
    let (s, ch) = open();
    assert!(registry::check(s.cast_const(), "subsys").is_ok());
    assert!(registry::check(ch.cast_const(), "channel").is_ok());
    close(s, ch);
}
