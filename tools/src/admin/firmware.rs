//! `fw-download` and `fw-commit`.

use super::{confirm, failed, put, read_file, require_oacs, Guard, Io, Target};
use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;
use vfnvme::platform::Platform;
use vfnvme::spec::AdminCommand;
use vfnvme::Controller;

/// Arguments of `fw-download`.
#[derive(Args, Debug)]
pub struct FwDownloadArgs {
    #[command(flatten)]
    pub target: Target,
    /// The firmware image (its size a multiple of 4 bytes).
    #[arg(short = 'f', long = "fw")]
    pub fw: PathBuf,
    /// Bytes per command (a multiple of 4; default 4096, at most the transfer limit).
    #[arg(short = 'x', long = "xfer", default_value = "4096", value_parser = super::num_u32)]
    pub xfer: u32,
    /// Byte offset in the image of the file's first byte.
    #[arg(short = 'O', long = "offset", default_value = "0", value_parser = super::num_u32)]
    pub offset: u32,
}

/// Arguments of `fw-commit`.
#[derive(Args, Debug)]
pub struct FwCommitArgs {
    #[command(flatten)]
    pub target: Target,
    /// Firmware slot (0 = the controller picks).
    #[arg(short = 's', long = "slot", default_value = "0", value_parser = clap::value_parser!(u8).range(0..=7))]
    pub slot: u8,
    /// Commit action: 0 replace, 1 replace and activate at reset, 2 activate at reset, 3
    /// replace and activate now.
    #[arg(short = 'a', long = "action", value_parser = clap::value_parser!(u8).range(0..=3))]
    pub action: u8,
    /// Don't ask before an action that activates new firmware.
    #[arg(short = 'y', long = "yes")]
    pub yes: bool,
}

/// `vfnvme fw-download`.
pub fn fw_download<P: Platform>(
    ctrl: &Controller<P>,
    a: &FwDownloadArgs,
    io: &mut Io,
) -> Result<()> {
    require_oacs(ctrl, 2, "Firmware Image Download")?;
    let image = read_file(&a.fw)?;
    if image.is_empty() || image.len() % 4 != 0 {
        bail!(
            "{}: {} bytes; a firmware image is a non-empty multiple of 4 bytes",
            a.fw.display(),
            image.len()
        );
    }
    let limit = ctrl.identify().max_transfer_bytes;
    if a.xfer == 0 || !a.xfer.is_multiple_of(4) || a.xfer as usize > limit {
        bail!(
            "--xfer {}: give a multiple of 4 up to {limit} (the controller's transfer limit)",
            a.xfer
        );
    }
    if !a.offset.is_multiple_of(4) {
        bail!("--offset {}: give a multiple of 4", a.offset);
    }
    let mut sent = 0;
    for (i, part) in image.chunks(a.xfer as usize).enumerate() {
        let at = a.offset + i as u32 * a.xfer;
        ctrl.admin_write(
            AdminCommand::firmware_image_download(at, part.len() as u32),
            part,
        )
        .map_err(|e| failed(e, "Firmware Image Download"))?;
        sent += part.len();
        super::progress::fraction("fw-download", sent, image.len(), "bytes");
    }
    put(
        io,
        &format!("Firmware download success ({} bytes)", image.len()),
    )
}

/// `vfnvme fw-commit`.
pub fn fw_commit<P: Platform>(ctrl: &Controller<P>, a: &FwCommitArgs, io: &mut Io) -> Result<()> {
    require_oacs(ctrl, 2, "Firmware Commit")?;
    let (_, id) = ctrl
        .admin_read(AdminCommand::identify_controller(), 4096)
        .map_err(|e| failed(e, "Identify Controller"))?;
    let frmw = id.as_slice()[260];
    let slots = (frmw >> 1) & 7;
    if a.slot > slots {
        bail!("firmware slot {} does not exist: this controller has slots 1..={slots} (FRMW {frmw:#x})", a.slot);
    }
    if a.action != 0 {
        let what = format!("Firmware Commit action {} on slot {}", a.action, a.slot);
        confirm(
            io,
            a.yes,
            &what,
            "the controller will run other firmware",
            Guard::Proceed,
        )?;
    }
    ctrl.admin(AdminCommand::firmware_commit(a.slot, a.action))
        .map_err(|e| failed(e, "Firmware Commit"))?;
    put(
        io,
        &format!(
            "Success committing firmware action:{} slot:{}",
            a.action, a.slot
        ),
    )
}
