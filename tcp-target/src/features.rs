//! Get/Set Features the target implements: Number of Queues (07h), Asynchronous Event
//! Configuration (0Bh), Keep Alive Timer (0Fh).

use crate::command::{Sqe, SC_FEATURE_NOT_SAVEABLE, SC_INVALID_FIELD};
use crate::ctrl::CtrlState;

/// Feature: Number of Queues.
pub const FID_NUM_QUEUES: u8 = 0x07;
/// Feature: Asynchronous Event Configuration.
pub const FID_ASYNC_EVENT: u8 = 0x0B;
/// Feature: Keep Alive Timer.
pub const FID_KEEP_ALIVE: u8 = 0x0F;

/// Set Features: the result (DW0) or the status.
pub fn set(ctrl: &mut CtrlState, sqe: Sqe<'_>, max_io_queues: u16) -> Result<u64, u16> {
    let cdw10 = sqe.cdw(10);
    if cdw10 & (1 << 31) != 0 {
        return Err(SC_FEATURE_NOT_SAVEABLE);
    }
    let cdw11 = sqe.cdw(11);
    match cdw10 as u8 {
        FID_NUM_QUEUES if !ctrl.discovery => {
            let (nsq, ncq) = (cdw11 & 0xffff, cdw11 >> 16);
            if nsq == 0xffff || ncq == 0xffff {
                return Err(SC_INVALID_FIELD);
            }
            let max = u32::from(max_io_queues) - 1;
            let granted = nsq.max(ncq).min(max);
            ctrl.queues = granted | (granted << 16);
            Ok(ctrl.queues.into())
        }
        FID_ASYNC_EVENT => {
            ctrl.aec = cdw11;
            Ok(0)
        }
        FID_KEEP_ALIVE => {
            ctrl.kato_ms = cdw11;
            Ok(0)
        }
        _ => Err(SC_INVALID_FIELD),
    }
}

/// Get Features: the result (DW0) or the status.
pub fn get(ctrl: &CtrlState, sqe: Sqe<'_>, max_io_queues: u16) -> Result<u64, u16> {
    let cdw10 = sqe.cdw(10);
    let sel = (cdw10 >> 8) & 7;
    if sel == 3 {
        // Supported capabilities: changeable, not saveable.
        return Ok(1 << 2);
    }
    match cdw10 as u8 {
        FID_NUM_QUEUES if !ctrl.discovery => {
            let max = u32::from(max_io_queues) - 1;
            Ok(if ctrl.queues == 0 || sel == 1 {
                max | (max << 16)
            } else {
                ctrl.queues
            }
            .into())
        }
        FID_ASYNC_EVENT => Ok(if sel == 1 { 0 } else { ctrl.aec.into() }),
        FID_KEEP_ALIVE => Ok(if sel == 1 { 0 } else { ctrl.kato_ms.into() }),
        _ => Err(SC_INVALID_FIELD),
    }
}
