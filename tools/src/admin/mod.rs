//! nvme-cli's admin commands on a controller bound to vfio-pci (or on the in-memory model with
//! `--model`): same names and output shapes as nvme-cli, text by default, `--json` (or
//! `-o json`) for JSON.
//!
//! Only one process can hold a controller's VFIO group, so a controller another process uses
//! through vfnvme is refused up front, naming that process ([`holders`]).

mod features;
mod firmware;
mod format;
mod holders;
mod identify;
mod logs;
mod nsmgmt;
mod passthru;
mod progress;
#[cfg(test)]
mod prop_tests;
#[cfg(all(test, feature = "model"))]
mod tests;

pub use format::reformat_command;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::Value;
use std::io::{BufRead, IsTerminal, Write};
use vfnvme::platform::Platform;
use vfnvme::spec::status::{generic, sct};
use vfnvme::{Controller, ControllerOptions, Error};
#[cfg(feature = "model")]
use vfnvme_model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform};

/// Which controller a command runs on.
#[derive(Args, Debug, Clone)]
pub struct Target {
    /// The controller, bound to vfio-pci (e.g. 0000:01:00.0).
    #[arg(value_name = "BDF", required_unless_present = "model")]
    pub bdf: Option<String>,
    /// Run on the in-memory controller model instead (two namespaces, room for six more).
    #[arg(long, conflicts_with = "bdf")]
    pub model: bool,
    /// How long the admin command may take, in milliseconds (nvme-cli's `-t`; default: the
    /// driver's, longer for format and sanitize).
    #[arg(short = 't', long = "timeout", value_name = "MS", value_parser = num_u64)]
    pub timeout: Option<u64>,
}

/// Output format options (nvme-cli's `-o`).
#[derive(Args, Debug, Clone, Default)]
pub struct Format {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Output format: normal, json or binary (the raw data to standard output).
    #[arg(short = 'o', long = "output-format", value_parser = ["normal", "json", "binary"])]
    pub output_format: Option<String>,
}

impl Format {
    fn json(&self) -> bool {
        self.json || self.output_format.as_deref() == Some("json")
    }
    fn binary(&self) -> bool {
        self.output_format.as_deref() == Some("binary")
    }
}

/// The admin subcommands (flattened into `vfnvme`'s own).
#[derive(Subcommand, Debug)]
pub enum AdminCmd {
    /// Identify Controller, field by field (nvme-cli `id-ctrl`).
    IdCtrl(identify::IdCtrlArgs),
    /// Identify Namespace, field by field (nvme-cli `id-ns`).
    IdNs(identify::IdNsArgs),
    /// SMART / Health Information log (nvme-cli `smart-log`).
    SmartLog(logs::SmartLogArgs),
    /// Error Information log (nvme-cli `error-log`).
    ErrorLog(logs::ErrorLogArgs),
    /// Firmware Slot Information log (nvme-cli `fw-log`).
    FwLog(logs::FwLogArgs),
    /// Sanitize Status log (nvme-cli `sanitize-log`).
    SanitizeLog(logs::FwLogArgs),
    /// Any log page, as a hex dump or raw (nvme-cli `get-log`).
    GetLog(logs::GetLogArgs),
    /// Get Features (nvme-cli `get-feature`).
    GetFeature(features::GetFeatureArgs),
    /// Set Features (nvme-cli `set-feature`).
    SetFeature(features::SetFeatureArgs),
    /// Format NVM: erase a namespace, optionally with a new LBA format (asks on a terminal;
    /// otherwise a 10 s countdown, as nvme-cli; --force or --yes skips both).
    Format(format::FormatArgs),
    /// Sanitize every namespace (guarded as format). Needs a controller that supports Sanitize (SANICAP).
    Sanitize(format::SanitizeArgs),
    /// Create a namespace. Needs a controller that supports Namespace Management (OACS bit 3).
    CreateNs(nsmgmt::CreateNsArgs),
    /// Delete a namespace (asks on a terminal). Needs a controller that supports Namespace Management.
    DeleteNs(nsmgmt::DeleteNsArgs),
    /// Attach a namespace to controllers. Needs a controller that supports Namespace Management.
    AttachNs(nsmgmt::AttachArgs),
    /// Detach a namespace from controllers. Needs a controller that supports Namespace Management.
    DetachNs(nsmgmt::AttachArgs),
    /// List namespace ids: active ones, or all allocated ones with --all.
    ListNs(nsmgmt::ListNsArgs),
    /// List the controllers of the subsystem, or those a namespace is attached to.
    ListCtrl(nsmgmt::ListCtrlArgs),
    /// Download a firmware image. Needs a controller that supports Firmware Download (OACS bit 2).
    FwDownload(firmware::FwDownloadArgs),
    /// Commit (and activate) a firmware image. Needs a controller that supports Firmware Commit.
    FwCommit(firmware::FwCommitArgs),
    /// Reset the controller (CC.EN 1 → 0 → 1 through the driver, features and queues restored):
    /// prints the time taken, CSTS before and after, and the controller events seen.
    Reset(passthru::ResetArgs),
    /// Send any admin command, with data in from or out to a file.
    AdminPassthru(passthru::PassthruArgs),
    /// Send an NVM I/O command on a namespace, with data in from or out to a file.
    IoPassthru(passthru::PassthruArgs),
}

impl AdminCmd {
    fn target(&self) -> &Target {
        use AdminCmd::*;
        match self {
            IdCtrl(a) => &a.target,
            IdNs(a) => &a.target,
            SmartLog(a) => &a.target,
            ErrorLog(a) => &a.target,
            FwLog(a) => &a.target,
            SanitizeLog(a) => &a.target,
            GetLog(a) => &a.target,
            GetFeature(a) => &a.target,
            SetFeature(a) => &a.target,
            Format(a) => &a.target,
            Sanitize(a) => &a.target,
            CreateNs(a) => &a.target,
            DeleteNs(a) => &a.target,
            AttachNs(a) | DetachNs(a) => &a.target,
            ListNs(a) => &a.target,
            ListCtrl(a) => &a.target,
            FwDownload(a) => &a.target,
            FwCommit(a) => &a.target,
            Reset(a) => &a.target,
            AdminPassthru(a) | IoPassthru(a) => &a.target,
        }
    }
}

/// What a command needs besides the controller: where output goes, and how to ask.
pub struct Io<'a> {
    /// Standard output (a buffer in tests).
    pub out: &'a mut dyn Write,
    /// Answers to confirmation questions (standard input; `None` = not a terminal).
    pub answers: Option<&'a mut dyn BufRead>,
    /// The controller's name for messages.
    pub name: String,
    /// How long a destructive command guarded by a countdown waits for Ctrl-C when nobody can
    /// be asked (nvme-cli's 10 s; zero in tests).
    pub countdown: std::time::Duration,
}

/// How a destructive command is guarded when standard input is not a terminal (on one, it
/// asks): as nvme-cli does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// A countdown to cancel with Ctrl-C (nvme-cli's `format`).
    Countdown,
    /// None: the command goes ahead (nvme-cli's `delete-ns`, `fw-commit`).
    Proceed,
}

/// The model `--model` runs on: namespaces 1 (512 B LBAs) and 2 (4 KiB), up to 8.
#[cfg(feature = "model")]
pub fn model_config() -> ModelConfig {
    let ns = |nsid, lba_size: u32| ModelNamespaceConfig {
        nsid,
        blocks: (64 << 20) / u64::from(lba_size),
        lba_size,
        backing: Backing::Ram,
    };
    ModelConfig {
        namespaces: vec![ns(1, 512), ns(2, 4096)],
        nn: 8,
        ..ModelConfig::default()
    }
}

/// Runs `cmd` on its target.
pub fn run(cmd: &AdminCmd) -> Result<()> {
    let options = ControllerOptions {
        io_queues: 1,
        // Format NVM and Sanitize can take minutes on large SSDs.
        admin_timeout_ms: match cmd.target().timeout {
            Some(0) => {
                bail!("--timeout 0: give the milliseconds an admin command may take (at least 1)")
            }
            Some(ms) => ms,
            None if matches!(cmd, AdminCmd::Format(_) | AdminCmd::Sanitize(_)) => 600_000,
            None => ControllerOptions::default().admin_timeout_ms,
        },
        ..ControllerOptions::default()
    };
    let stdin = std::io::stdin();
    let mut lock = stdin.lock();
    let tty = std::io::stdin().is_terminal();
    let mut stdout = std::io::stdout().lock();
    let target = cmd.target();
    let name = target.bdf.clone().unwrap_or_else(|| "model".into());
    let mut io = Io {
        out: &mut stdout,
        answers: if tty { Some(&mut lock) } else { None },
        name,
        countdown: std::time::Duration::from_secs(10),
    };
    #[cfg(feature = "model")]
    if target.model {
        let platform = ModelPlatform::new(model_config()).context("creating the model")?;
        let ctrl = crate::open::open_platform(platform, "model", options)?;
        return exec(&ctrl, cmd, &mut io);
    }
    #[cfg(not(feature = "model"))]
    if target.model {
        anyhow::bail!(
            "--model: this vfnvme was built without the in-memory model; rebuild with \
             `cargo build -p vfnvme-tools --features model` (on by default)"
        );
    }
    let bdf = target.bdf.as_deref().unwrap_or_default();
    let addr = crate::open::parse_bdf(bdf)?;
    holders::refuse_if_held(&addr)?;
    let ctrl = crate::open::open_controller(bdf, options)?;
    exec(&ctrl, cmd, &mut io)
}

/// Runs `cmd` on `ctrl`.
pub fn exec<P: Platform>(ctrl: &Controller<P>, cmd: &AdminCmd, io: &mut Io) -> Result<()> {
    use AdminCmd::*;
    match cmd {
        IdCtrl(a) => identify::id_ctrl(ctrl, a, io),
        IdNs(a) => identify::id_ns(ctrl, a, io),
        SmartLog(a) => logs::smart_log(ctrl, a, io),
        ErrorLog(a) => logs::error_log(ctrl, a, io),
        FwLog(a) => logs::fw_log(ctrl, a, io),
        SanitizeLog(a) => logs::sanitize_log(ctrl, a, io),
        GetLog(a) => logs::get_log(ctrl, a, io),
        GetFeature(a) => features::get_feature(ctrl, a, io),
        SetFeature(a) => features::set_feature(ctrl, a, io),
        Format(a) => format::format(ctrl, a, io),
        Sanitize(a) => format::sanitize(ctrl, a, io),
        CreateNs(a) => nsmgmt::create_ns(ctrl, a, io),
        DeleteNs(a) => nsmgmt::delete_ns(ctrl, a, io),
        AttachNs(a) => nsmgmt::attach_ns(ctrl, a, true, io),
        DetachNs(a) => nsmgmt::attach_ns(ctrl, a, false, io),
        ListNs(a) => nsmgmt::list_ns(ctrl, a, io),
        ListCtrl(a) => nsmgmt::list_ctrl(ctrl, a, io),
        FwDownload(a) => firmware::fw_download(ctrl, a, io),
        FwCommit(a) => firmware::fw_commit(ctrl, a, io),
        Reset(a) => passthru::reset(ctrl, a, io),
        AdminPassthru(a) => passthru::admin_passthru(ctrl, a, io),
        IoPassthru(a) => passthru::io_passthru(ctrl, a, io),
    }
}

/// Writes a line to the command's output (a closed standard output, e.g. `| head`, is not an
/// error).
fn put(io: &mut Io, text: &str) -> Result<()> {
    let _ = writeln!(io.out, "{text}");
    Ok(())
}

/// Writes `v` as pretty JSON.
fn put_json(io: &mut Io, v: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(v)?;
    put(io, &text)
}

/// Turns a driver error into the message the user needs: an Invalid Command Opcode status
/// becomes "this controller doesn't support <what>".
fn failed(e: Error, what: &str) -> anyhow::Error {
    match &e {
        Error::AdminFailed { status, .. } | Error::IoFailed { status }
            if status.sct() == sct::GENERIC && status.sc() == generic::INVALID_OPCODE =>
        {
            anyhow!("this controller doesn't support {what} (it answered: {status})")
        }
        _ => anyhow::Error::new(e).context(what.to_string()),
    }
}

/// Before a destructive command, unless `yes` (`--yes`/`--force`): asks on a terminal;
/// without one, guards it as nvme-cli does (`guard`), so scripts written for nvme-cli run.
fn confirm(io: &mut Io, yes: bool, what: &str, consequence: &str, guard: Guard) -> Result<()> {
    if yes {
        return Ok(());
    }
    let question = format!(
        "{what} on {}: {consequence}. Type 'yes' to continue: ",
        io.name
    );
    let Some(answers) = io.answers.as_mut() else {
        match guard {
            Guard::Countdown => {
                let secs = io.countdown.as_secs();
                eprintln!(
                    "You are about to: {what} on {}: {consequence}.\nPress Ctrl-C within {secs} s to cancel (--force or --yes skips this wait).",
                    io.name
                );
                let mut left = io.countdown;
                while !left.is_zero() {
                    let step = left.min(std::time::Duration::from_secs(1));
                    std::thread::sleep(step);
                    left -= step;
                }
            }
            Guard::Proceed => eprintln!(
                "{what} on {}: {consequence} (standard input is not a terminal: going ahead as nvme-cli does)",
                io.name
            ),
        }
        return Ok(());
    };
    eprint!("{question}");
    let mut line = String::new();
    answers.read_line(&mut line).context("reading the answer")?;
    if line.trim() != "yes" {
        bail!("{what}: not confirmed, nothing done");
    }
    Ok(())
}

/// Fails with "this controller doesn't support `what`" unless OACS bit `bit` is set.
fn require_oacs<P: Platform>(ctrl: &Controller<P>, bit: u16, what: &str) -> Result<()> {
    let oacs = ctrl.identify().oacs();
    if oacs & (1 << bit) == 0 {
        bail!("this controller doesn't support {what} (OACS {oacs:#x}, bit {bit} clear)");
    }
    Ok(())
}

/// Checks that `nsid` is an allocated (or, failing CNS 11h, active) namespace.
fn check_nsid<P: Platform>(ctrl: &Controller<P>, nsid: u32) -> Result<()> {
    let nn = ctrl.identify().nn();
    if nsid == 0 || (nsid > nn && nsid != u32::MAX) {
        bail!("namespace id {nsid} is out of range: this controller has namespace ids 1..={nn}");
    }
    if nsid == u32::MAX {
        return Ok(());
    }
    let cmd = vfnvme::spec::AdminCommand::identify(0x11, nsid, 0, 0);
    let exists = match ctrl.admin_read(cmd, 4096) {
        Ok((_, b)) => b.as_slice()[..8].iter().any(|&x| x != 0),
        Err(_) => ctrl.namespace(nsid).is_some(),
    };
    if !exists {
        bail!(
            "namespace {nsid} does not exist on {}: see `vfnvme list-ns --all`",
            ctrl.platform().name()
        );
    }
    Ok(())
}

/// Reads a whole input file.
fn read_file(path: &std::path::Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

/// Parses a number in decimal or 0x-prefixed hex.
fn parse_num(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("{s:?} is not a number (decimal or 0x hex)"))
}

/// clap value parser for u32 numbers in decimal or hex.
fn num_u32(s: &str) -> Result<u32, String> {
    u32::try_from(parse_num(s)?).map_err(|_| format!("{s} is larger than 32 bits"))
}

/// clap value parser for u8 numbers in decimal or hex.
fn num_u8(s: &str) -> Result<u8, String> {
    u8::try_from(parse_num(s)?).map_err(|_| format!("{s} is out of range (0..=255)"))
}

/// clap value parser for u16 numbers in decimal or hex.
fn num_u16(s: &str) -> Result<u16, String> {
    u16::try_from(parse_num(s)?).map_err(|_| format!("{s} is out of range (0..=65535)"))
}

/// clap value parser for u64 numbers in decimal or hex.
fn num_u64(s: &str) -> Result<u64, String> {
    parse_num(s)
}

/// A shared controller handle for tests.
#[cfg(test)]
#[cfg(feature = "model")]
pub(crate) type ModelCtrl = Controller<ModelPlatform>;
