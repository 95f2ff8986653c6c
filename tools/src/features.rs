//! `vfnvme get-feature` and `vfnvme set-feature`: nvme-cli's commands of the same names, for
//! the features whose value fits in the command (CDW11) and the completion (DW0). Features
//! that move a data buffer (LBA Range Type, APST, Timestamp, Host Identifier, ...) are refused
//! with a clear message until vfnvme has a safe admin data path for them.

use crate::open;
use crate::output::say;
use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;
use vfnvme::platform::Platform;
use vfnvme::spec::status::{command_specific, generic, sct};
use vfnvme::spec::{AdminCommand, Command};
use vfnvme::{Controller, ControllerOptions, Error};

/// A feature as nvme-cli names it, and whether it moves a data buffer.
struct Feature {
    fid: u8,
    name: &'static str,
    data: bool,
}

const fn f(fid: u8, name: &'static str, data: bool) -> Feature {
    Feature { fid, name, data }
}

/// The features of NVMe 1.4/2.0 with nvme-cli's names.
const FEATURES: &[Feature] = &[
    f(0x01, "Arbitration", false),
    f(0x02, "Power Management", false),
    f(0x03, "LBA Range Type", true),
    f(0x04, "Temperature Threshold", false),
    f(0x05, "Error Recovery", false),
    f(0x06, "Volatile Write Cache", false),
    f(0x07, "Number of Queues", false),
    f(0x08, "Interrupt Coalescing", false),
    f(0x09, "Interrupt Vector Configuration", false),
    f(0x0a, "Write Atomicity Normal", false),
    f(0x0b, "Async Event Configuration", false),
    f(0x0c, "Autonomous Power State Transition", true),
    f(0x0d, "Host Memory Buffer", true),
    f(0x0e, "Timestamp", true),
    f(0x0f, "Keep Alive Timer", false),
    f(0x10, "Host Controlled Thermal Management", false),
    f(0x11, "Non-Operational Power State Config", false),
    f(0x12, "Read Recovery Level", false),
    f(0x13, "Predictable Latency Mode Config", true),
    f(0x14, "Predictable Latency Mode Window", false),
    f(0x15, "LBA Status Information Report Interval", false),
    f(0x16, "Host Behavior Support", true),
    f(0x17, "Sanitize Config", false),
    f(0x18, "Endurance Group Event Configuration", false),
    f(0x19, "I/O Command Set Profile", false),
    f(0x80, "Software Progress", false),
    f(0x81, "Host Identifier", true),
    f(0x82, "Reservation Notification Mask", false),
    f(0x83, "Reservation Persistence", false),
    f(0x84, "Namespace Write Protection Config", false),
];

/// nvme-cli's name of feature `fid` ("Unknown" for reserved and vendor-specific ones).
pub fn feature_name(fid: u8) -> &'static str {
    match FEATURES.iter().find(|x| x.fid == fid) {
        Some(x) => x.name,
        None if fid >= 0xc0 => "Vendor Specific",
        None => "Unknown",
    }
}

/// Parses a feature identifier: 1..=255, decimal or 0x-prefixed hex.
pub fn parse_fid(text: &str) -> Result<u8, String> {
    let v = parse_u32(text)?;
    match v {
        0 => Err("feature identifier 0 is reserved: give 1 to 255 (e.g. 6 = Volatile Write Cache, 7 = Number of Queues)".into()),
        1..=255 => Ok(v as u8),
        _ => Err(format!(
            "feature identifier {v} is out of range: feature identifiers go from 1 to 255 (0x01 to 0xff)"
        )),
    }
}

/// Parses a 32-bit value: decimal or 0x-prefixed hex.
pub fn parse_u32(text: &str) -> Result<u32, String> {
    let t = text.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => t.parse(),
    };
    r.map_err(|_| format!("'{text}' is not a 32-bit number (decimal, or hex with 0x)"))
}

/// Arguments of `vfnvme get-feature`.
#[derive(Args, Debug)]
pub struct GetFeatureArgs {
    /// The controller, bound to vfio-pci.
    #[arg(value_name = "BDF")]
    pub bdf: String,
    /// Feature identifier (1-255; 0x hex allowed), e.g. 6 = Volatile Write Cache.
    #[arg(short = 'f', long = "feature-id", value_parser = parse_fid)]
    pub feature_id: u8,
    /// Namespace, for namespace-specific features.
    #[arg(short = 'n', long = "namespace-id", default_value_t = 0)]
    pub nsid: u32,
    /// Which value: 0 current, 1 default, 2 saved, 3 supported capabilities.
    #[arg(short = 's', long = "sel", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=3))]
    pub sel: u8,
    /// Command Dword 11, for features that take an argument (e.g. the vector of feature 9).
    #[arg(short = 'c', long = "cdw11", default_value = "0", value_parser = parse_u32)]
    pub cdw11: u32,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `vfnvme set-feature`.
#[derive(Args, Debug)]
pub struct SetFeatureArgs {
    /// The controller, bound to vfio-pci.
    #[arg(value_name = "BDF")]
    pub bdf: String,
    /// Feature identifier (1-255; 0x hex allowed), e.g. 6 = Volatile Write Cache.
    #[arg(short = 'f', long = "feature-id", value_parser = parse_fid)]
    pub feature_id: u8,
    /// The new value (Command Dword 11; decimal, or hex with 0x).
    #[arg(short = 'v', long = "value", value_parser = parse_u32)]
    pub value: u32,
    /// Namespace, for namespace-specific features.
    #[arg(short = 'n', long = "namespace-id", default_value_t = 0)]
    pub nsid: u32,
    /// Keep the value across power cycles (if the controller can save this feature).
    #[arg(short = 's', long = "save")]
    pub save: bool,
}

/// Command-specific status "Feature Identifier Not Saveable" (NVMe 1.4, Figure 143).
const FEATURE_NOT_SAVEABLE: u8 = 0x0d;

const SEL_NAMES: [&str; 4] = ["Current", "Default", "Saved", "Supported capabilities"];

/// Refuses features vfnvme can't carry, and namespaces that aren't active.
fn check<P: Platform>(ctrl: &Controller<P>, bdf: &str, fid: u8, nsid: u32) -> Result<()> {
    if FEATURES.iter().any(|x| x.fid == fid && x.data) {
        bail!(
            "feature {fid:#04x} ({}) moves a data buffer, which vfnvme's get-feature/set-feature do not carry yet: only features whose value fits in the command are supported",
            feature_name(fid)
        );
    }
    if nsid != 0 && nsid != u32::MAX && ctrl.namespace(nsid).is_none() {
        let active: Vec<u32> = ctrl.namespaces().iter().map(|n| n.nsid()).collect();
        bail!("namespace {nsid} is not active on {bdf}: active namespaces are {active:?} (0 = the controller, 0xffffffff = all)");
    }
    Ok(())
}

/// Turns a failed Get/Set Features into what the user can do about it.
fn explain(e: Error, what: &str, fid: u8) -> anyhow::Error {
    let name = feature_name(fid);
    match &e {
        Error::AdminFailed { status, .. } => {
            let gen = status.sct == sct::GENERIC;
            let cs = status.sct == sct::COMMAND_SPECIFIC;
            if gen && status.sc == generic::INVALID_OPCODE {
                anyhow::anyhow!("this controller doesn't support {what} ({status})")
            } else if gen && status.sc == generic::INVALID_FIELD {
                anyhow::anyhow!(
                    "this controller doesn't support feature {fid:#04x} ({name}) with these arguments ({status})"
                )
            } else if cs && status.sc == FEATURE_NOT_SAVEABLE {
                anyhow::anyhow!("feature {fid:#04x} ({name}) can't be saved on this controller: leave out --save ({status})")
            } else if cs && status.sc == command_specific::FEATURE_NOT_CHANGEABLE {
                anyhow::anyhow!(
                    "feature {fid:#04x} ({name}) can't be changed on this controller ({status})"
                )
            } else {
                anyhow::anyhow!("{what} of feature {fid:#04x} ({name}) failed: {status}")
            }
        }
        _ => anyhow::Error::new(e).context(format!("{what} of feature {fid:#04x} ({name})")),
    }
}

fn open(bdf: &str) -> Result<Controller<vfnvme::vfio_platform::VfioPlatform>> {
    open::open_controller(
        bdf,
        ControllerOptions {
            io_queues: 1,
            ..ControllerOptions::default()
        },
    )
}

/// The Get Features command for `args`.
fn get_command(args: &GetFeatureArgs) -> Command {
    let mut c = Command::get_features(args.feature_id, args.cdw11);
    c.cdw10 |= u32::from(args.sel) << 8;
    c.nsid = args.nsid;
    c
}

/// The Set Features command for `args`.
fn set_command(args: &SetFeatureArgs) -> Command {
    let mut c = Command::set_features(args.feature_id, args.value);
    if args.save {
        c.cdw10 |= 1 << 31;
    }
    c.nsid = args.nsid;
    c
}

/// Runs `vfnvme get-feature`.
pub fn run_get(args: &GetFeatureArgs) -> Result<()> {
    let ctrl = open(&args.bdf)?;
    check(&ctrl, &args.bdf, args.feature_id, args.nsid)?;
    let cmd = AdminCommand::try_from(get_command(args))?;
    let c = ctrl
        .admin(cmd)
        .map_err(|e| explain(e, "Get Features", args.feature_id))?;
    let fid = args.feature_id;
    let sel = SEL_NAMES[usize::from(args.sel)];
    if args.json {
        say!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "feature_id": fid,
                "name": feature_name(fid),
                "nsid": args.nsid,
                "sel": sel.to_lowercase(),
                "value": c.dw0,
            }))?
        );
    } else {
        say!(
            "get-feature:{fid:#04x} ({}), {sel} value:{:#010x}",
            feature_name(fid),
            c.dw0
        );
    }
    Ok(())
}

/// Runs `vfnvme set-feature`.
pub fn run_set(args: &SetFeatureArgs) -> Result<()> {
    let fid = args.feature_id;
    if fid == 0x07 {
        bail!("feature 0x07 (Number of Queues) can only be set while the controller is brought up, which vfnvme does each time it opens it (perf --threads, the C ABI's io_queues)");
    }
    let ctrl = open(&args.bdf)?;
    check(&ctrl, &args.bdf, fid, args.nsid)?;
    let cmd = AdminCommand::try_from(set_command(args))?;
    let c = ctrl
        .admin(cmd)
        .map_err(|e| explain(e, "Set Features", fid))?;
    say!(
        "set-feature:{fid:#04x} ({}), value:{:#010x}, cdw12:0x00000000, save:{}",
        feature_name(fid),
        args.value,
        u8::from(args.save)
    );
    if c.dw0 != 0 {
        say!("\tcompletion dword 0: {:#010x}", c.dw0);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use vfnvme::model::{ModelConfig, ModelPlatform};

    #[test]
    fn ids_parse_with_clear_errors() {
        assert_eq!(parse_fid("6"), Ok(6));
        assert_eq!(parse_fid("0x0b"), Ok(0x0b));
        assert_eq!(parse_fid("255"), Ok(255));
        assert!(parse_fid("0").unwrap_err().contains("reserved"));
        assert!(parse_fid("256").unwrap_err().contains("out of range"));
        assert!(parse_fid("vwc")
            .unwrap_err()
            .contains("not a 32-bit number"));
        assert_eq!(parse_u32("0xffffffff"), Ok(u32::MAX));
        assert_eq!(feature_name(0x06), "Volatile Write Cache");
        assert_eq!(feature_name(0xc1), "Vendor Specific");
        assert_eq!(feature_name(0x7f), "Unknown");
    }

    #[test]
    fn commands_carry_sel_save_and_nsid() {
        let g = get_command(&GetFeatureArgs {
            bdf: String::new(),
            feature_id: 4,
            nsid: 1,
            sel: 3,
            cdw11: 0x10,
            json: false,
        });
        assert_eq!((g.cdw10, g.cdw11, g.nsid), (0x304, 0x10, 1));
        let s = set_command(&SetFeatureArgs {
            bdf: String::new(),
            feature_id: 6,
            value: 1,
            nsid: 0,
            save: true,
        });
        assert_eq!((s.cdw10, s.cdw11), (0x8000_0006, 1));
    }

    #[test]
    fn data_features_and_inactive_namespaces_are_refused() {
        let ctrl = Controller::new(
            ModelPlatform::new(ModelConfig::default()).unwrap(),
            ControllerOptions::default(),
        )
        .unwrap();
        let e = check(&ctrl, "model", 0x0e, 0).unwrap_err().to_string();
        assert!(e.contains("0x0e (Timestamp) moves a data buffer"), "{e}");
        let e = check(&ctrl, "model", 0x06, 9).unwrap_err().to_string();
        assert!(e.contains("namespace 9 is not active on model"), "{e}");
        assert!(check(&ctrl, "model", 0x06, 0).is_ok());
        assert!(check(&ctrl, "model", 0x06, u32::MAX).is_ok());
    }

    #[test]
    fn controller_statuses_become_advice() {
        use vfnvme::spec::Status;
        let failed = |sct_: u8, sc: u8| Error::AdminFailed {
            opcode: 0x09,
            status: Status {
                sct: sct_,
                sc,
                dnr: true,
                more: false,
            },
        };
        let e = explain(failed(0, generic::INVALID_FIELD), "Set Features", 0x0a).to_string();
        assert!(
            e.contains("this controller doesn't support feature 0x0a (Write Atomicity Normal)"),
            "{e}"
        );
        let e = explain(failed(0, generic::INVALID_OPCODE), "Get Features", 1).to_string();
        assert!(e.contains("doesn't support Get Features"), "{e}");
        let e = explain(failed(1, FEATURE_NOT_SAVEABLE), "Set Features", 6).to_string();
        assert!(e.contains("leave out --save"), "{e}");
    }
}
