//! Opening a subsystem over VFIO: by a list of controller addresses, or by subsystem NQN
//! (every NVMe controller bound to vfio-pci whose SUBNQN matches). All controllers share one
//! VFIO container and DMA pool (`VfioPlatform::open_shared`).

use super::backend::Sub;
use super::subsys::{head_options, mp_error, publish, Subsys};
use super::types::SubsysOpts;
use crate::ctrl::{deref, out_ptr};
use crate::driver_ops::ffi_error;
use crate::error::{guard, FfiError, FfiResult, Status};
use crate::open::{controller_options, vfio_options};
use crate::types::CtrlOpts;
use std::ffi::{c_char, CStr};
use std::sync::Arc;
use vfnvme::hal::{HalError, PciAddress};
use vfnvme::multipath::{HeadOptions, Subsystem};
use vfnvme::platform::Platform;
use vfnvme::vfio_platform::VfioPlatform;
use vfnvme::Controller;

/// Where the kernel lists the devices bound to vfio-pci.
const VFIO_PCI_DRIVER: &str = "/sys/bus/pci/drivers/vfio-pci";

fn c_str<'a>(p: *const c_char, what: &'static str) -> FfiResult<&'a str> {
    let p = deref(p, what)?;
    // SAFETY: a NUL-terminated C string (header contract), non-NULL here.
    unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| {
        FfiError::new(
            Status::VfnvmeErrInvalidArgument,
            format!("{what} is not UTF-8"),
        )
    })
}

/// The error of a failed shared open.
fn shared_open_error(addrs: &[String], e: &HalError) -> FfiError {
    let status = match e {
        HalError::NotNvme { .. } => Status::VfnvmeErrUnsupported,
        HalError::DuplicateDevice { .. } | HalError::NoDevices => Status::VfnvmeErrInvalidArgument,
        _ => Status::VfnvmeErrDevice,
    };
    FfiError::new(status, format!("opening {}: {e}", addrs.join(", ")))
}

/// Opens `addrs` in one container and brings each controller up.
fn bring_up(addrs: &[String], opts: &CtrlOpts) -> FfiResult<Vec<Arc<Controller<VfioPlatform>>>> {
    let refs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let platforms = VfioPlatform::open_shared(&refs, vfio_options(opts))
        .map_err(|e| shared_open_error(addrs, &e))?;
    let copts = controller_options(opts)?;
    platforms
        .into_iter()
        .zip(addrs)
        .map(|(p, a)| {
            Controller::new(p, copts.clone())
                .map(Arc::new)
                .map_err(|e| ffi_error(&format!("{a}: bring-up"), &e))
        })
        .collect()
}

fn form(
    ctrls: Vec<Arc<Controller<VfioPlatform>>>,
    heads: HeadOptions,
    out: &mut *mut Subsys,
) -> FfiResult<i32> {
    let sub = Subsystem::from_controllers(ctrls, heads).map_err(|e| mp_error(&e))?;
    Ok(publish(Box::new(Sub::new(sub)?), out))
}

/// Opens the NVM subsystem formed by the `count` controllers at `addrs` ("0000:00:10.0";
/// "0000.00.10.0" also works), each bound to vfio-pci, in one VFIO container with one DMA
/// pool, brings them up and builds a multipath head per namespace. `ctrl_opts` (every
/// controller) and `opts` (every head) may be NULL. VFNVME_ERR_NOT_ONE_SUBSYSTEM if the
/// controllers report different SUBNQNs or one lacks CMIC multi-controller (the message
/// names it); VFNVME_ERR_INVALID_ARGUMENT for an address given twice or none.
///
/// Thread safety: thread-safe; each controller can be opened once per process.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_subsys_open(
    addrs: *const *const c_char,
    count: usize,
    ctrl_opts: *const CtrlOpts,
    opts: *const SubsysOpts,
    out: *mut *mut Subsys,
) -> i32 {
    guard("vfnvme_subsys_open", || {
        let out = out_ptr(out, "out")?;
        if count == 0 || count > vfnvme::multipath::MAX_PATHS {
            return Err(FfiError::new(
                Status::VfnvmeErrInvalidArgument,
                format!("count {count}: pass 1..=32 controller addresses"),
            ));
        }
        let list = deref(addrs, "addrs")?;
        // SAFETY: `count` pointers at `addrs` (header contract).
        let list = unsafe { std::slice::from_raw_parts(list, count) };
        let addrs = list
            .iter()
            .map(|&p| {
                let a = c_str(p, "addrs[i]")?;
                PciAddress::parse(a).map(|a| a.to_string()).map_err(|e| {
                    FfiError::new(Status::VfnvmeErrInvalidArgument, format!("addrs: {e}"))
                })
            })
            .collect::<FfiResult<Vec<_>>>()?;
        let heads = head_options(opts, "opts")?;
        // SAFETY: NULL or a valid CtrlOpts of `size` bytes (header contract).
        let copts = unsafe { crate::opts::read(ctrl_opts, "ctrl_opts") }?;
        form(bring_up(&addrs, &copts)?, heads, out)
    })
}

/// The NVMe controllers (class 01:08:02) bound to vfio-pci, by address.
fn vfio_nvme_controllers() -> FfiResult<Vec<String>> {
    let dir = std::fs::read_dir(VFIO_PCI_DRIVER).map_err(|e| {
        FfiError::new(
            Status::VfnvmeErrNotFound,
            format!("{VFIO_PCI_DRIVER}: {e}; load vfio-pci and bind the controllers to it (vfnvme setup)"),
        )
    })?;
    let mut found: Vec<String> = dir
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| PciAddress::parse(n).is_ok())
        .filter(|n| {
            std::fs::read_to_string(format!("{VFIO_PCI_DRIVER}/{n}/class"))
                .is_ok_and(|c| c.trim() == "0x010802")
        })
        .collect();
    found.sort();
    Ok(found)
}

/// Opens the NVM subsystem named `nqn`: every NVMe controller bound to vfio-pci is opened
/// (in one VFIO container) and identified, and those whose SUBNQN is `nqn` form the
/// subsystem (the others are closed again), as vfnvme_subsys_open. VFNVME_ERR_NOT_FOUND if
/// none matches (the message lists the SUBNQNs found).
///
/// Thread safety: thread-safe; no controller bound to vfio-pci may be open elsewhere in the
/// process.
///
/// # Safety
/// Every pointer argument is NULL (where allowed) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn vfnvme_subsys_open_nqn(
    nqn: *const c_char,
    ctrl_opts: *const CtrlOpts,
    opts: *const SubsysOpts,
    out: *mut *mut Subsys,
) -> i32 {
    guard("vfnvme_subsys_open_nqn", || {
        let out = out_ptr(out, "out")?;
        let nqn = c_str(nqn, "nqn")?;
        let heads = head_options(opts, "opts")?;
        // SAFETY: NULL or a valid CtrlOpts of `size` bytes (header contract).
        let copts = unsafe { crate::opts::read(ctrl_opts, "ctrl_opts") }?;
        let all = vfio_nvme_controllers()?;
        if all.is_empty() {
            return Err(FfiError::new(
                Status::VfnvmeErrNotFound,
                "no NVMe controller is bound to vfio-pci; bind them first (vfnvme setup)",
            ));
        }
        let ctrls = bring_up(&all, &copts)?;
        let (keep, other): (Vec<_>, Vec<_>) = ctrls.into_iter().partition(|c| {
            c.identify().identify.subnqn.trim_end_matches('\0').trim() == nqn.trim()
        });
        if keep.is_empty() {
            let seen: Vec<String> = other
                .iter()
                .map(|c| format!("{} ({})", c.identify().identify.subnqn, c.platform().name()))
                .collect();
            return Err(FfiError::new(
                Status::VfnvmeErrNotFound,
                format!(
                    "no controller bound to vfio-pci belongs to subsystem {nqn:?}; found: {}",
                    seen.join(", ")
                ),
            ));
        }
        drop(other);
        form(keep, heads, out)
    })
}
