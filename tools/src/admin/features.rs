//! `get-feature` and `set-feature`, with the feature names nvme-cli knows.

use super::logs::hex_dump;
use super::{failed, put, put_json, read_file, Format, Io, Target};
use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;
use std::path::PathBuf;
use vfnvme::platform::Platform;
use vfnvme::spec::{AdminCommand, DataTransfer};
use vfnvme::Controller;

/// Feature identifiers and nvme-cli's names for them.
const NAMES: &[(u8, &str)] = &[
    (0x01, "Arbitration"),
    (0x02, "Power Management"),
    (0x03, "LBA Range Type"),
    (0x04, "Temperature Threshold"),
    (0x05, "Error Recovery"),
    (0x06, "Volatile Write Cache"),
    (0x07, "Number of Queues"),
    (0x08, "Interrupt Coalescing"),
    (0x09, "Interrupt Vector Configuration"),
    (0x0a, "Write Atomicity Normal"),
    (0x0b, "Async Event Configuration"),
    (0x0c, "Autonomous Power State Transition"),
    (0x0d, "Host Memory Buffer"),
    (0x0e, "Timestamp"),
    (0x0f, "Keep Alive Timer"),
    (0x10, "Host Controlled Thermal Management"),
    (0x11, "Non-Operational Power State Config"),
    (0x12, "Read Recovery Level"),
    (0x13, "Predictable Latency Mode Config"),
    (0x14, "Predictable Latency Mode Window"),
    (0x15, "LBA Status Information Report Interval"),
    (0x16, "Host Behavior Support"),
    (0x17, "Sanitize Config"),
    (0x18, "Endurance Group Event Configuration"),
    (0x19, "I/O Command Set Profile"),
    (0x1a, "Spinup Control"),
    (0x7d, "Enhanced Controller Metadata"),
    (0x7e, "Controller Metadata"),
    (0x7f, "Namespace Metadata"),
    (0x80, "Software Progress Marker"),
    (0x81, "Host Identifier"),
    (0x82, "Reservation Notification Mask"),
    (0x83, "Reservation Persistence"),
    (0x84, "Namespace Write Protection Config"),
];

/// nvme-cli's name of feature `fid`.
pub fn name(fid: u8) -> &'static str {
    match NAMES.iter().find(|(f, _)| *f == fid) {
        Some((_, n)) => n,
        None if fid >= 0xc0 => "Vendor Specific",
        None => "Unknown",
    }
}

/// Parses a feature id: a number (1..=255) or a name nvme-cli uses (case and spaces ignored,
/// e.g. `number-of-queues`).
fn parse_fid(s: &str) -> Result<u8, String> {
    if let Ok(n) = super::parse_num(s) {
        return match u8::try_from(n) {
            Ok(f) if f != 0 => Ok(f),
            _ => Err(format!(
                "feature id {s} is out of range: feature ids are 1..=255 (0x01..=0xff)"
            )),
        };
    }
    let key = |t: &str| t.to_ascii_lowercase().replace([' ', '-', '_', '/'], "");
    NAMES
        .iter()
        .find(|(_, n)| key(n) == key(s))
        .map(|(f, _)| *f)
        .ok_or_else(|| {
            format!(
                "unknown feature {s:?}: give its id (e.g. 0x07) or a name such as number-of-queues"
            )
        })
}

/// Arguments of `get-feature`.
#[derive(Args, Debug)]
pub struct GetFeatureArgs {
    #[command(flatten)]
    pub target: Target,
    /// Feature id (e.g. 0x07) or name (e.g. number-of-queues).
    #[arg(short = 'f', long = "feature-id", value_parser = parse_fid)]
    pub fid: u8,
    /// Namespace, for namespace features.
    #[arg(short = 'n', long = "namespace-id", default_value = "0", value_parser = super::num_u32)]
    pub nsid: u32,
    /// Select: 0 current, 1 default, 2 saved, 3 supported capabilities.
    #[arg(short = 's', long = "sel", default_value = "0", value_parser = clap::value_parser!(u8).range(0..=3))]
    pub sel: u8,
    /// CDW11 (feature specific).
    #[arg(long = "cdw11", default_value = "0", value_parser = super::num_u32)]
    pub cdw11: u32,
    #[command(flatten)]
    pub format: Format,
}

/// Arguments of `set-feature`.
#[derive(Args, Debug)]
pub struct SetFeatureArgs {
    #[command(flatten)]
    pub target: Target,
    /// Feature id (e.g. 0x0b) or name.
    #[arg(short = 'f', long = "feature-id", value_parser = parse_fid)]
    pub fid: u8,
    /// Namespace, for namespace features.
    #[arg(short = 'n', long = "namespace-id", default_value = "0", value_parser = super::num_u32)]
    pub nsid: u32,
    /// The new value (CDW11; nvme-cli's `-V`).
    #[arg(short = 'V', long = "value", default_value = "0", value_parser = super::num_u32)]
    pub value: u32,
    /// CDW12 (feature specific).
    #[arg(short = 'c', long = "cdw12", default_value = "0", value_parser = super::num_u32)]
    pub cdw12: u32,
    /// Keep the value across resets (if the feature is saveable).
    #[arg(short = 's', long = "save")]
    pub save: bool,
    /// File with the feature's data structure (for features that take one).
    #[arg(short = 'd', long = "data")]
    pub data: Option<PathBuf>,
    #[command(flatten)]
    pub format: Format,
}

/// `vfnvme get-feature`.
pub fn get_feature<P: Platform>(
    ctrl: &Controller<P>,
    a: &GetFeatureArgs,
    io: &mut Io,
) -> Result<()> {
    let mut cmd = AdminCommand::get_features(a.fid, a.cdw11);
    cmd.cdw10 |= u32::from(a.sel) << 8;
    cmd.nsid = a.nsid;
    let what = format!("Get Features {:#04x} ({})", a.fid, name(a.fid));
    let (dw0, data) = match cmd.transfer()? {
        DataTransfer::Bytes(n) => {
            let (c, b) = ctrl
                .admin_read(cmd, n as usize)
                .map_err(|e| failed(e, &what))?;
            (c.dw0, Some(b.as_slice().to_vec()))
        }
        _ => (ctrl.admin(cmd).map_err(|e| failed(e, &what))?.dw0, None),
    };
    if a.format.json() {
        let data = data.map(|d| d.iter().map(|x| format!("{x:02x}")).collect::<String>());
        return put_json(
            io,
            &json!({"feature_id": a.fid, "name": name(a.fid), "sel": a.sel, "value": dw0, "data": data}),
        );
    }
    let sel = ["Current", "Default", "Saved", "Supported capabilities"][usize::from(a.sel)];
    put(
        io,
        &format!(
            "get-feature:{:#04x} ({}), {sel} value:{dw0:#010x}",
            a.fid,
            name(a.fid)
        ),
    )?;
    if let Some(d) = data {
        io.out.write_all(hex_dump(&d).as_bytes())?;
    }
    Ok(())
}

/// `vfnvme set-feature`.
pub fn set_feature<P: Platform>(
    ctrl: &Controller<P>,
    a: &SetFeatureArgs,
    io: &mut Io,
) -> Result<()> {
    let mut cmd = AdminCommand::set_features(a.fid, a.value);
    cmd.cdw10 |= u32::from(a.save) << 31;
    cmd.cdw12 = a.cdw12;
    cmd.nsid = a.nsid;
    let what = format!("Set Features {:#04x} ({})", a.fid, name(a.fid));
    let c = match (cmd.transfer()?, &a.data) {
        (DataTransfer::Bytes(n), Some(path)) => {
            let mut d = read_file(path)?;
            if d.len() as u64 > n {
                bail!(
                    "{}: {} bytes, but feature {:#04x} takes {n}",
                    path.display(),
                    d.len(),
                    a.fid
                );
            }
            d.resize(n as usize, 0);
            ctrl.admin_write(cmd, &d).map_err(|e| failed(e, &what))?
        }
        (DataTransfer::Bytes(n), None) => bail!(
            "feature {:#04x} ({}) takes a {n}-byte data structure: pass it with --data FILE",
            a.fid,
            name(a.fid)
        ),
        (_, Some(_)) => bail!(
            "feature {:#04x} ({}) takes no data structure: drop --data",
            a.fid,
            name(a.fid)
        ),
        _ => ctrl.admin(cmd).map_err(|e| failed(e, &what))?,
    };
    if a.format.json() {
        return put_json(
            io,
            &json!({"feature_id": a.fid, "name": name(a.fid), "value": a.value, "cdw12": a.cdw12, "save": a.save, "result": c.dw0}),
        );
    }
    put(
        io,
        &format!(
            "set-feature:{:#04x} ({}), value:{:#010x}, cdw12:{:#010x}, save:{}",
            a.fid,
            name(a.fid),
            a.value,
            a.cdw12,
            u8::from(a.save)
        ),
    )
}
