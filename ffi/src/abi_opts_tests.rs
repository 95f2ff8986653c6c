//! Host tests of the options structs' `size` field through every function that takes one:
//! size 0 and a size below the first version's struct are refused with a message that says
//! what to set; NULL and `Default` (size = sizeof) work.

use crate::ctrl::{vfnvme_ctrl_close, vfnvme_ctrl_open};
use crate::error::vfnvme_last_error;
use crate::model::{vfnvme_ctrl_open_model, ModelOpts};
use crate::mp::channel::{vfnvme_channel_close, vfnvme_channel_open};
use crate::mp::model::{vfnvme_subsys_open_model, ModelSubsysOpts};
use crate::mp::open::vfnvme_subsys_open;
use crate::mp::subsys::vfnvme_subsys_close;
use crate::mp::types::{ChannelOpts, SubsysOpts};
use crate::qpair::{vfnvme_qpair_alloc_opts, vfnvme_qpair_free};
use crate::types::{CtrlOpts, QpairOpts};
use crate::Status;
use std::ffi::CStr;
use std::ptr::{null, null_mut};

const OK: i32 = 0;
const INVALID: i32 = Status::VfnvmeErrInvalidArgument as i32;

fn last_error() -> String {
    // SAFETY: never NULL, NUL-terminated.
    unsafe { CStr::from_ptr(vfnvme_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// Checks that the call was refused for `arg`'s size and told what to set.
fn refused(rc: i32, arg: &str, c_name: &str) {
    let msg = last_error();
    assert_eq!(rc, INVALID, "{msg}");
    let set = format!("set {arg}->size = sizeof(struct {c_name})");
    assert!(msg.contains(&set), "{msg}");
}

#[test]
fn model_and_qpair_options_need_their_size() {
    let mut ctrl = null_mut();
    let zero = ModelOpts {
        size: 0,
        ..ModelOpts::default()
    };
    // SAFETY: valid pointers.
    refused(
        unsafe { vfnvme_ctrl_open_model(&zero, &mut ctrl) },
        "opts",
        "vfnvme_model_opts",
    );
    assert!(ctrl.is_null());
    // SAFETY: valid pointers.
    let rc = unsafe { vfnvme_ctrl_open_model(&ModelOpts::default(), &mut ctrl) };
    assert_eq!(rc, OK, "{}", last_error());
    let mut qp = null_mut();
    for size in [0, 4, 7] {
        let q = QpairOpts {
            size,
            ..QpairOpts::default()
        };
        // SAFETY: valid pointers.
        let rc = unsafe { vfnvme_qpair_alloc_opts(ctrl, &q, &mut qp) };
        refused(rc, "opts", "vfnvme_qpair_opts");
    }
    let q = QpairOpts {
        depth: 8,
        ..QpairOpts::default()
    };
    // SAFETY: valid pointers; the queue pair is freed before the controller is closed.
    unsafe {
        assert_eq!(
            vfnvme_qpair_alloc_opts(ctrl, &q, &mut qp),
            OK,
            "{}",
            last_error()
        );
        assert_eq!(vfnvme_qpair_free(qp), OK);
        assert_eq!(vfnvme_ctrl_close(ctrl), OK);
    }
}

#[test]
fn controller_options_are_checked_before_the_device_is_touched() {
    let zero = CtrlOpts {
        size: 0,
        ..CtrlOpts::default()
    };
    let mut ctrl = null_mut();
    // SAFETY: valid pointers.
    let rc = unsafe { vfnvme_ctrl_open(c"0000:ff:1f.7".as_ptr(), &zero, &mut ctrl) };
    refused(rc, "opts", "vfnvme_ctrl_opts");
    let addrs = [c"0000:ff:1f.6".as_ptr(), c"0000:ff:1f.7".as_ptr()];
    let mut s = null_mut();
    // SAFETY: valid pointers; `addrs` holds 2 strings.
    let rc = unsafe { vfnvme_subsys_open(addrs.as_ptr(), 2, &zero, null(), &mut s) };
    refused(rc, "ctrl_opts", "vfnvme_ctrl_opts");
}

#[test]
fn subsystem_and_channel_options_need_their_size() {
    let mut s = null_mut();
    let mo = ModelSubsysOpts {
        size: 3,
        ..ModelSubsysOpts::default()
    };
    // SAFETY: valid pointers.
    let rc = unsafe { vfnvme_subsys_open_model(&mo, null(), &mut s) };
    refused(rc, "opts", "vfnvme_model_subsys_opts");
    let so = SubsysOpts {
        size: 0,
        ..SubsysOpts::default()
    };
    // SAFETY: valid pointers.
    let rc = unsafe { vfnvme_subsys_open_model(null(), &so, &mut s) };
    refused(rc, "sopts", "vfnvme_subsys_opts");
    // SAFETY: valid pointers.
    let rc = unsafe { vfnvme_subsys_open_model(null(), &SubsysOpts::default(), &mut s) };
    assert_eq!(rc, OK, "{}", last_error());
    let mut ch = null_mut();
    let co = ChannelOpts {
        size: 0,
        ..ChannelOpts::default()
    };
    // SAFETY: valid pointers.
    let rc = unsafe { vfnvme_channel_open(s, 1, &co, &mut ch) };
    refused(rc, "opts", "vfnvme_channel_opts");
    // SAFETY: valid pointers; the channel is closed before the subsystem.
    unsafe {
        let rc = vfnvme_channel_open(s, 1, &ChannelOpts::default(), &mut ch);
        assert_eq!(rc, OK, "{}", last_error());
        assert_eq!(vfnvme_channel_close(ch), OK);
        assert_eq!(vfnvme_subsys_close(s), OK);
    }
}
