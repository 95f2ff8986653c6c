//! Raw admin and I/O commands, identify data and enumeration through the ABI, on the model:
//! what they return matches the driver's view, the controller's failures come back as NVMe
//! statuses, and misuse is refused with a message.

use std::ffi::{c_void, CStr};
use std::ptr::null_mut;

use crate::ctrl::{vfnvme_ctrl_close, vfnvme_ctrl_namespace, Ctrl};
use crate::model::{vfnvme_ctrl_open_model, ModelOpts};
use crate::passthru::{
    vfnvme_ctrl_admin_passthru, vfnvme_ctrl_identify, vfnvme_ctrl_io_passthru, vfnvme_enumerate,
};
use crate::passthru_cmd::{
    PassthruCmd, VFNVME_DATA_FROM_DEVICE, VFNVME_DATA_NONE, VFNVME_DATA_TO_DEVICE,
};
use crate::types::NsInfo;

fn last_error() -> String {
    // SAFETY: vfnvme_last_error returns a valid NUL-terminated string of this thread.
    unsafe { CStr::from_ptr(crate::error::vfnvme_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn model() -> *mut Ctrl {
    let opts = ModelOpts {
        namespaces: 1,
        lba_size: 512,
        blocks: 1 << 16,
        ..ModelOpts::default()
    };
    let mut ctrl = null_mut();
    // SAFETY: valid pointers.
    let rc = unsafe { vfnvme_ctrl_open_model(&opts, &mut ctrl) };
    assert_eq!(rc, 0, "{}", last_error());
    ctrl
}

fn io(ctrl: *mut Ctrl, opcode: u8, lba: u64, blocks: u16, buf: &mut [u8], dir: u8) -> i32 {
    let cmd = PassthruCmd {
        opcode,
        nsid: 1,
        cdw10: lba as u32,
        cdw11: (lba >> 32) as u32,
        cdw12: u32::from(blocks - 1),
        ..PassthruCmd::default()
    };
    // SAFETY: `ctrl` is open, `buf` is valid for its length.
    unsafe {
        vfnvme_ctrl_io_passthru(
            ctrl,
            &cmd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            dir,
            null_mut(),
        )
    }
}

#[test]
fn identify_admin_and_io_passthru_on_the_model() {
    let ctrl = model();
    let mut id = vec![0u8; 4096];
    // SAFETY: `ctrl` is open; `id` is 4096 bytes.
    let rc = unsafe { vfnvme_ctrl_identify(ctrl, 1, 0, id.as_mut_ptr().cast(), id.len()) };
    assert_eq!(rc, 0, "{}", last_error());
    assert_eq!(u16::from_le_bytes([id[0], id[1]]), 0x1b36, "VID");
    assert!(
        id[4..24].iter().any(|&c| c.is_ascii_alphanumeric()),
        "a serial"
    );
    // Identify Namespace 1: NSZE equals what vfnvme_ctrl_namespace says.
    let mut ns = vec![0u8; 4096];
    let mut info = NsInfo::default();
    // SAFETY: as above; `info` is writable.
    unsafe {
        assert_eq!(
            vfnvme_ctrl_identify(ctrl, 0, 1, ns.as_mut_ptr().cast(), 4096),
            0
        );
        assert_eq!(
            vfnvme_ctrl_namespace(ctrl, 1, &mut info),
            0,
            "{}",
            last_error()
        );
    }
    assert_eq!(
        u64::from_le_bytes(ns[0..8].try_into().unwrap()),
        info.blocks
    );
    // A short buffer is refused.
    // SAFETY: as above.
    let rc = unsafe { vfnvme_ctrl_identify(ctrl, 1, 0, id.as_mut_ptr().cast(), 100) };
    assert!(
        rc < 0 && last_error().contains("4096"),
        "{rc} {}",
        last_error()
    );

    // Get Features, Number of Queues: no data, dword 0 back.
    let cmd = PassthruCmd {
        opcode: 0x0a,
        cdw10: 0x07,
        ..PassthruCmd::default()
    };
    let mut cdw0 = 0u32;
    // SAFETY: valid pointers; no data.
    let rc = unsafe {
        vfnvme_ctrl_admin_passthru(ctrl, &cmd, null_mut(), 0, VFNVME_DATA_NONE, &mut cdw0)
    };
    assert_eq!(rc, 0, "{}", last_error());
    // An opcode the controller doesn't have: its status (Invalid Command Opcode, > 0).
    let bad = PassthruCmd {
        opcode: 0xc0,
        ..PassthruCmd::default()
    };
    // SAFETY: as above.
    let rc = unsafe {
        vfnvme_ctrl_admin_passthru(ctrl, &bad, null_mut(), 0, VFNVME_DATA_NONE, null_mut())
    };
    assert_eq!(rc, 0x01, "{}", last_error());
    // One the driver owns (Fabrics on PCIe) is refused as the safe admin API refuses it.
    let owned = PassthruCmd {
        opcode: 0x7f,
        ..PassthruCmd::default()
    };
    // SAFETY: as above.
    let rc = unsafe {
        vfnvme_ctrl_admin_passthru(ctrl, &owned, null_mut(), 0, VFNVME_DATA_NONE, null_mut())
    };
    assert!(
        rc < 0 && last_error().contains("driver issues it"),
        "{rc}: {}",
        last_error()
    );
    // Misuse: reserved bytes, a length without direction, a bad direction, NULL command.
    let junk = PassthruCmd {
        reserved: [1, 0, 0],
        ..cmd
    };
    // SAFETY: valid pointers (and a deliberate NULL, which the ABI refuses).
    unsafe {
        assert!(vfnvme_ctrl_admin_passthru(ctrl, &junk, null_mut(), 0, 0, null_mut()) < 0);
        let mut b = [0u8; 8];
        let p = b.as_mut_ptr().cast::<c_void>();
        assert!(vfnvme_ctrl_admin_passthru(ctrl, &cmd, p, 8, VFNVME_DATA_NONE, null_mut()) < 0);
        assert!(vfnvme_ctrl_admin_passthru(ctrl, &cmd, p, 8, 9, null_mut()) < 0);
        assert!(last_error().contains("direction 9"), "{}", last_error());
        assert!(vfnvme_ctrl_admin_passthru(ctrl, std::ptr::null(), p, 8, 1, null_mut()) < 0);
    }

    // I/O: write two blocks, read them back.
    let mut data: Vec<u8> = (0..1024).map(|i| (i * 13 + 5) as u8).collect();
    let want = data.clone();
    assert_eq!(
        io(ctrl, 0x01, 40, 2, &mut data, VFNVME_DATA_TO_DEVICE),
        0,
        "{}",
        last_error()
    );
    let mut back = vec![0u8; 1024];
    assert_eq!(
        io(ctrl, 0x02, 40, 2, &mut back, VFNVME_DATA_FROM_DEVICE),
        0,
        "{}",
        last_error()
    );
    assert_eq!(back, want);
    // Past the end of the namespace: the controller's LBA Out of Range (sct 0, sc 0x80).
    assert_eq!(
        io(
            ctrl,
            0x02,
            1 << 16,
            1,
            &mut back[..512],
            VFNVME_DATA_FROM_DEVICE
        ),
        0x80
    );
    // More blocks than the buffer holds: refused before anything is sent.
    assert!(io(ctrl, 0x02, 0, 4, &mut back, VFNVME_DATA_FROM_DEVICE) < 0);
    // SAFETY: `ctrl` is open and closed once.
    assert_eq!(unsafe { vfnvme_ctrl_close(ctrl) }, 0);
}

#[test]
fn enumeration_counts_and_checks_its_array() {
    // SAFETY: cap 0 with NULL is allowed.
    let n = unsafe { vfnvme_enumerate(null_mut(), 0) };
    assert!(n >= 0, "{n}: {}", last_error());
    // SAFETY: NULL with cap > 0 is refused, not written.
    assert!(unsafe { vfnvme_enumerate(null_mut(), 4) } < 0);
}
