//! Raw admin and I/O commands, the full identify data, and the enumeration of NVMe
//! controllers: the C forms of `vfnvme admin-passthru`, `io-passthru`, `id-ctrl`/`id-ns` and
//! `list`, through the same checks as the safe Rust API (a command's data length is read from
//! the command where the driver knows it; the driver builds the data pointer).

use crate::ctrl::{deref, Ctrl};
use crate::error::{guard, FfiError, FfiResult, Status};
use crate::passthru_cmd::{
    PassthruCmd, PassthruData, PassthruResult, VFNVME_DATA_FROM_DEVICE, VFNVME_DATA_NONE,
    VFNVME_DATA_TO_DEVICE,
};
use crate::types::copy_cstr;
use std::ffi::c_void;

/// One NVMe controller of the machine (PCI class 010802) as `vfnvme_enumerate` lists it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PciDevice {
    /// Its PCI address, e.g. "0000:01:00.0" (NUL-terminated).
    pub address: [u8; 16],
    /// PCI vendor ID.
    pub vendor: u16,
    /// PCI device ID.
    pub device: u16,
    /// The driver it is bound to ("" when none; NUL-terminated).
    pub driver: [u8; 32],
    /// Whether it is bound to vfio-pci (vfnvme_ctrl_open can open it).
    pub vfio: bool,
}

/// The caller's buffer for `direction`, checked.
///
/// # Safety
/// `data` is NULL or valid for `len` bytes (reads and writes) for the call.
unsafe fn data_of<'a>(data: *mut c_void, len: usize, direction: u8) -> FfiResult<PassthruData<'a>> {
    let bad = |m: String| FfiError::new(Status::VfnvmeErrInvalidArgument, m);
    match direction {
        VFNVME_DATA_NONE if len == 0 => Ok(PassthruData::None),
        VFNVME_DATA_NONE => Err(bad(format!(
            "len {len} with VFNVME_DATA_NONE: give the direction the data moves, or len 0"
        ))),
        VFNVME_DATA_FROM_DEVICE | VFNVME_DATA_TO_DEVICE if data.is_null() || len == 0 => {
            Err(bad(format!(
                "data {data:?} with len {len}: a command that moves data needs a buffer of at least 1 byte"
            )))
        }
        VFNVME_DATA_FROM_DEVICE => {
            // SAFETY: non-NULL and valid for `len` bytes (caller contract above).
            Ok(PassthruData::FromDevice(unsafe {
                std::slice::from_raw_parts_mut(data.cast::<u8>(), len)
            }))
        }
        VFNVME_DATA_TO_DEVICE => {
            // SAFETY: as above.
            Ok(PassthruData::ToDevice(unsafe {
                std::slice::from_raw_parts(data.cast::<u8>(), len)
            }))
        }
        d => Err(bad(format!(
            "direction {d}: give VFNVME_DATA_NONE, VFNVME_DATA_FROM_DEVICE or VFNVME_DATA_TO_DEVICE"
        ))),
    }
}

/// Runs a passthrough and turns its result into the ABI's: 0, or the NVMe status (> 0).
fn finish(r: FfiResult<PassthruResult>, cdw0: *mut u32) -> FfiResult<i32> {
    let r = r?;
    // SAFETY: NULL or a writable u32 (header contract).
    if let Some(out) = unsafe { cdw0.as_mut() } {
        *out = r.cdw0;
    }
    Ok(i32::from(r.status))
}

fn command(cmd: *const PassthruCmd) -> FfiResult<PassthruCmd> {
    let c = *deref(cmd, "cmd")?;
    if c.reserved != [0; 3] {
        return Err(FfiError::new(
            Status::VfnvmeErrInvalidArgument,
            "cmd->reserved must be zero".to_string(),
        ));
    }
    Ok(c)
}

/// The one body of vfnvme_ctrl_admin_passthru and vfnvme_ctrl_io_passthru (`io`).
///
/// # Safety
/// Their contract.
#[allow(clippy::too_many_arguments)]
unsafe fn passthru(
    name: &'static str,
    io: bool,
    ctrl: *const Ctrl,
    cmd: *const PassthruCmd,
    data: *mut c_void,
    len: usize,
    direction: u8,
    cdw0: *mut u32,
) -> i32 {
    guard(name, || {
        let ctrl = deref(ctrl, "ctrl")?;
        let cmd = command(cmd)?;
        // SAFETY: the caller's contract, passed on.
        let data = unsafe { data_of(data, len, direction) }?;
        let done = if io {
            ctrl.ops.io_passthru(&cmd, data)
        } else {
            ctrl.ops.admin_passthru(&cmd, data)
        };
        finish(done, cdw0)
    })
}

/// Sends one admin command and waits for it. `direction` says which way `len` bytes of
/// `data` move (VFNVME_DATA_NONE with `data` NULL and `len` 0, VFNVME_DATA_FROM_DEVICE or
/// VFNVME_DATA_TO_DEVICE); the driver checks the length against what the opcode moves where
/// it knows it (Identify 4096 bytes, Get Log Page its NUMD, ...) and refuses commands it
/// handles itself (queue creation and deletion, Abort, Asynchronous Event Request, Doorbell
/// Buffer Config). Returns 0 on success, the completion's status (`sct << 8 | sc`, > 0) when
/// the controller failed the command, or a negative vfnvme_status; `*cdw0` (if not NULL)
/// receives dword 0 of the completion.
///
/// Thread safety: thread-safe (the admin queue's lock).
///
/// # Safety
/// `ctrl` and `cmd` are valid; `data` is NULL or valid for `len` bytes; `cdw0` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_ctrl_admin_passthru(
    ctrl: *const Ctrl,
    cmd: *const PassthruCmd,
    data: *mut c_void,
    len: usize,
    direction: u8,
    cdw0: *mut u32,
) -> i32 {
    // SAFETY: the caller's contract above, passed on.
    unsafe {
        passthru(
            "vfnvme_ctrl_admin_passthru",
            false,
            ctrl,
            cmd,
            data,
            len,
            direction,
            cdw0,
        )
    }
}

/// Sends one NVM I/O command to namespace `cmd->nsid` on a queue pair of its own and waits
/// for it. The driver reads the length the command moves from it (NLB of Read, Write and
/// Compare; NR of Dataset Management) and refuses other opcodes with data and namespaces with
/// metadata; `len` must cover that length. Returns as vfnvme_ctrl_admin_passthru.
///
/// Thread safety: thread-safe (it uses an I/O queue of its own for the command's duration;
/// VFNVME_ERR_BUSY when the controller has no queue left).
///
/// # Safety
/// As vfnvme_ctrl_admin_passthru.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_ctrl_io_passthru(
    ctrl: *const Ctrl,
    cmd: *const PassthruCmd,
    data: *mut c_void,
    len: usize,
    direction: u8,
    cdw0: *mut u32,
) -> i32 {
    // SAFETY: the caller's contract above, passed on.
    unsafe {
        passthru(
            "vfnvme_ctrl_io_passthru",
            true,
            ctrl,
            cmd,
            data,
            len,
            direction,
            cdw0,
        )
    }
}

/// Copies the full Identify data of CNS `cns` (e.g. 1 = controller, 0 = namespace `nsid`)
/// into `out`, which must hold 4096 bytes (`len` ≥ 4096). Returns 0, the NVMe status (> 0)
/// when the controller failed the command, or a negative vfnvme_status.
///
/// Thread safety: thread-safe.
///
/// # Safety
/// `ctrl` is valid; `out` is valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_ctrl_identify(
    ctrl: *const Ctrl,
    cns: u8,
    nsid: u32,
    out: *mut c_void,
    len: usize,
) -> i32 {
    guard("vfnvme_ctrl_identify", || {
        let ctrl = deref(ctrl, "ctrl")?;
        if len < 4096 {
            return Err(FfiError::new(
                Status::VfnvmeErrInvalidArgument,
                format!("len {len}: Identify data is 4096 bytes; pass a buffer that large"),
            ));
        }
        let cmd = PassthruCmd {
            opcode: 0x06,
            nsid,
            cdw10: u32::from(cns),
            ..PassthruCmd::default()
        };
        // SAFETY: the caller's contract above (4096 of its `len` bytes are used).
        let data = unsafe { data_of(out, 4096, VFNVME_DATA_FROM_DEVICE) }?;
        finish(ctrl.ops.admin_passthru(&cmd, data), std::ptr::null_mut())
    })
}

/// Lists the machine's NVMe controllers (PCI class 010802), bound to any driver or none:
/// writes up to `cap` entries to `out` (NULL when `cap` is 0) and returns how many there are
/// (which may exceed `cap`), or a negative vfnvme_status.
///
/// Thread safety: thread-safe (it reads sysfs).
///
/// # Safety
/// `out` is NULL or valid for `cap` entries.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_enumerate(out: *mut PciDevice, cap: usize) -> i32 {
    guard("vfnvme_enumerate", || {
        if cap > 0 && out.is_null() {
            return Err(FfiError::new(
                Status::VfnvmeErrInvalidArgument,
                format!("out is NULL with cap {cap}: pass an array of cap entries, or cap 0"),
            ));
        }
        let devices = vfnvme::hal::pci::bind::list_nvme_devices()
            .map_err(|e| FfiError::new(Status::VfnvmeErrDevice, e.to_string()))?;
        for (i, d) in devices.iter().take(cap).enumerate() {
            let mut entry = PciDevice {
                address: [0; 16],
                vendor: d.vendor,
                device: d.device,
                driver: [0; 32],
                vfio: d.driver.as_deref() == Some(vfnvme::hal::pci::sysfs::VFIO_PCI),
            };
            copy_cstr(&mut entry.address, &d.address.to_string());
            copy_cstr(&mut entry.driver, d.driver.as_deref().unwrap_or(""));
            // SAFETY: `out` is valid for `cap` entries and i < cap.
            unsafe { out.add(i).write(entry) };
        }
        Ok(i32::try_from(devices.len()).unwrap_or(i32::MAX))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directions_and_buffers_are_checked() {
        let mut b = [0u8; 8];
        let p = b.as_mut_ptr().cast::<c_void>();
        // SAFETY: `b` is 8 bytes.
        unsafe {
            assert!(matches!(
                data_of(std::ptr::null_mut(), 0, 0),
                Ok(PassthruData::None)
            ));
            assert!(data_of(p, 8, 0).is_err());
            assert!(data_of(std::ptr::null_mut(), 8, 1).is_err());
            assert!(data_of(p, 0, 2).is_err());
            assert!(data_of(p, 8, 3).is_err());
            assert!(matches!(data_of(p, 8, 1), Ok(PassthruData::FromDevice(d)) if d.len() == 8));
        }
        let mut dst = [0u8; 4];
        crate::passthru_cmd::deliver(PassthruData::FromDevice(&mut dst), &[1, 2, 3, 4, 5]);
        assert_eq!(dst, [1, 2, 3, 4]);
    }
}
