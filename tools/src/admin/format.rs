//! `format` (Format NVM) and `sanitize`: both ask before they erase, unless `--yes`.

use super::{check_nsid, confirm, failed, put, require_oacs, Guard, Io, Target};
use anyhow::{bail, Result};
use clap::Args;
use vfnvme::platform::Platform;
use vfnvme::spec::identify::IdentifyNamespace;
use vfnvme::spec::{AdminCommand, FormatSettings};
use vfnvme::{Controller, Error};

/// Arguments of `format`.
#[derive(Args, Debug)]
pub struct FormatArgs {
    #[command(flatten)]
    pub target: Target,
    /// Namespace to format (0xffffffff = all).
    #[arg(short = 'n', long = "namespace-id", visible_alias = "nsid", value_parser = super::num_u32)]
    pub nsid: u32,
    /// LBA format index (see `vfnvme id-ns`); default: the one with the current block size and
    /// no metadata. A format with metadata takes reads and writes with metadata
    /// (`Request::with_metadata`, vfnvme_qpair_read_md); plain ones are refused on it.
    #[arg(short = 'l', long = "lbaf")]
    pub lbaf: Option<u8>,
    /// Protection information type, 0 (none) to 3; needs a format with at least 8 bytes of
    /// metadata.
    #[arg(short = 'i', long = "pi", default_value = "0", value_parser = clap::value_parser!(u8).range(0..=3))]
    pub pi: u8,
    /// Where the PI is in the metadata: 1 the first 8 bytes, 0 the last.
    #[arg(short = 'p', long = "pil", default_value = "0", value_parser = clap::value_parser!(u8).range(0..=1))]
    pub pil: u8,
    /// Metadata settings: 1 after each block in the data buffer (extended LBAs), 0 a buffer of
    /// its own.
    #[arg(short = 'm', long = "ms", default_value = "0", value_parser = clap::value_parser!(u8).range(0..=1))]
    pub ms: u8,
    /// Secure erase: 0 none, 1 user data erase, 2 cryptographic erase.
    #[arg(short = 's', long = "ses", default_value = "0", value_parser = clap::value_parser!(u8).range(0..=2))]
    pub ses: u8,
    /// Don't ask for confirmation.
    #[arg(short = 'y', long = "yes", alias = "force")]
    pub yes: bool,
}

/// Sanitize actions (SANACT) and the SANICAP bit each needs.
const ACTIONS: &[(&str, u8, Option<u32>)] = &[
    ("exit-failure", 1, None),
    ("block-erase", 2, Some(1 << 1)),
    ("overwrite", 3, Some(1 << 2)),
    ("crypto-erase", 4, Some(1 << 0)),
];

/// Arguments of `sanitize`.
#[derive(Args, Debug)]
pub struct SanitizeArgs {
    #[command(flatten)]
    pub target: Target,
    /// Action: exit-failure, block-erase, overwrite, crypto-erase (or 1..=4).
    #[arg(short = 'a', long = "sanact")]
    pub sanact: String,
    /// Allow Unrestricted Sanitize Exit.
    #[arg(short = 'u', long = "ause")]
    pub ause: bool,
    /// Overwrite pattern.
    #[arg(short = 'p', long = "ovrpat", default_value = "0", value_parser = super::num_u32)]
    pub ovrpat: u32,
    /// Wait until the sanitize ends, showing its progress (SPROG of the Sanitize Status log),
    /// and print how it ended.
    #[arg(long)]
    pub wait: bool,
    /// Don't ask for confirmation.
    #[arg(short = 'y', long = "yes", alias = "force")]
    pub yes: bool,
}

/// The command line that reformats namespace `nsid` of controller `device` to its block size
/// without metadata (what a namespace whose I/O is refused for its metadata needs).
pub fn reformat_command(device: &str, nsid: impl std::fmt::Display) -> String {
    format!("vfnvme format {device} --nsid {nsid} --yes")
}

/// One entry per LBA format: `index: data bytes + metadata bytes`.
fn formats(id: &IdentifyNamespace) -> String {
    id.lbaf
        .iter()
        .enumerate()
        .map(|(i, f)| format!("{i}: {} B + {} B metadata", 1u64 << f.lbads.min(63), f.ms))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The LBA format to use: `lbaf` if given, else the one with the current block size and no
/// metadata (or any without metadata). Refuses one that doesn't exist, and PI on a format with
/// less than 8 bytes of metadata.
fn target_format(nsid: u32, id: &IdentifyNamespace, lbaf: Option<u8>, pi: u8) -> Result<u8> {
    let current = id.lbaf.get(id.format_index()).map(|f| f.lbads);
    let target = match lbaf {
        Some(i) => usize::from(i),
        None => id
            .lbaf
            .iter()
            .position(|f| f.ms == 0 && Some(f.lbads) == current)
            .or_else(|| id.lbaf.iter().position(|f| f.ms == 0 && (9..=16).contains(&f.lbads)))
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "namespace {nsid:#x} offers no LBA format without metadata ({}): vfnvme cannot do I/O on it",
                    formats(id)
                )
            })?,
    };
    let Some(fmt) = id
        .lbaf
        .get(target)
        .filter(|_| target <= usize::from(id.nlbaf))
    else {
        bail!(
            "LBA format {target} does not exist on namespace {nsid:#x}: it has formats 0..={} (see `vfnvme id-ns`)",
            id.nlbaf
        );
    };
    if pi != 0 && fmt.ms < 8 {
        bail!(
            "--pi {pi} needs an LBA format with at least 8 B of metadata per block; format {target} has {}: choose another ({})",
            fmt.ms,
            formats(id)
        );
    }
    Ok(target as u8)
}

/// `vfnvme format`.
pub fn format<P: Platform>(ctrl: &Controller<P>, a: &FormatArgs, io: &mut Io) -> Result<()> {
    require_oacs(ctrl, 1, "Format NVM")?;
    check_nsid(ctrl, a.nsid)?;
    let id = ctrl
        .identify_namespace(a.nsid)
        .map_err(|e| failed(e, "Identify Namespace"))?;
    let lbaf = target_format(a.nsid, &id, a.lbaf, a.pi)?;
    let settings = FormatSettings {
        lbaf,
        ses: a.ses,
        pi: a.pi,
        pi_first: a.pil == 1,
        extended: a.ms == 1,
    };
    let before = ctrl
        .namespace(a.nsid)
        .map(|n| n.identity().metadata_format());
    let (to, ms) = id
        .lbaf
        .get(usize::from(lbaf))
        .map_or((0, 0), |f| (1u64 << f.lbads.min(63), f.ms));
    let md = match (ms, a.pi) {
        (0, _) => "no metadata".to_string(),
        (ms, 0) => format!(
            "{ms} B metadata {}",
            if a.ms == 1 { "extended" } else { "separate" }
        ),
        (ms, pi) => format!(
            "{ms} B metadata {}, PI type {pi} {}",
            if a.ms == 1 { "extended" } else { "separate" },
            if a.pil == 1 { "first" } else { "last" }
        ),
    };
    confirm(
        io,
        a.yes,
        &format!(
            "Format NVM of namespace {:#x} (LBA format {} -> {lbaf}: {to} B blocks, {md}; secure erase {})",
            a.nsid,
            id.format_index(),
            a.ses
        ),
        "all its data will be lost",
        Guard::Countdown,
    )?;
    let ticker = super::progress::Ticker::start(&format!("format namespace {:#x}", a.nsid));
    let formatted = ctrl.format_nvm_with(a.nsid, settings);
    drop(ticker);
    match formatted {
        Ok(()) => {}
        Err(Error::NoSuchNamespace { nsid }) => bail!("namespace {nsid} does not exist"),
        Err(e) => return Err(failed(e, "Format NVM")),
    }
    // The driver's view follows the new format.
    let _ = ctrl.rescan();
    put(io, &format!("Success formatting namespace:{:x}", a.nsid))?;
    if let Some(now) = ctrl.namespace(a.nsid) {
        put(
            io,
            &format!(
                "namespace {}: was {}, now {} blocks of {} B, {}",
                a.nsid,
                before.map_or("-".to_string(), |m| m.to_string()),
                now.blocks(),
                now.lba_size(),
                now.identity().metadata_format()
            ),
        )?;
    }
    Ok(())
}

/// `vfnvme sanitize`.
pub fn sanitize<P: Platform>(ctrl: &Controller<P>, a: &SanitizeArgs, io: &mut Io) -> Result<()> {
    let (name, sanact, needs) = ACTIONS
        .iter()
        .find(|(n, v, _)| *n == a.sanact || a.sanact == v.to_string())
        .copied()
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--sanact {:?}: give exit-failure, block-erase, overwrite or crypto-erase (1..=4)",
                a.sanact
            )
        })?;
    let raw = ctrl
        .admin_read(AdminCommand::identify_controller(), 4096)
        .map_err(|e| failed(e, "Identify Controller"))?
        .1;
    let cap = u32::from_le_bytes(raw.as_slice()[328..332].try_into().unwrap_or_default());
    if let Some(bit) = needs {
        if cap & bit == 0 {
            bail!("this controller doesn't support Sanitize ({name}; SANICAP {cap:#x})");
        }
        confirm(
            io,
            a.yes,
            &format!("Sanitize ({name}) of every namespace"),
            "all its data will be lost",
            Guard::Countdown,
        )?;
    }
    ctrl.admin(AdminCommand::sanitize(sanact, a.ause, a.ovrpat))
        .map_err(|e| failed(e, "Sanitize"))?;
    if a.wait {
        loop {
            let log = ctrl
                .get_log_page(0x81, u32::MAX, 32, false)
                .map_err(|e| failed(e, "Sanitize Status log (81h)"))?;
            let b = log.as_slice();
            let sprog = u32::from(u16::from_le_bytes([b[0], b[1]]));
            let sstat = u16::from_le_bytes([b[2], b[3]]);
            if sstat & 7 != 2 {
                let v = super::logs::sanitize_json(b, "log");
                return put(
                    io,
                    &format!(
                        "sanitize ({name}): ended: {}",
                        v["log"]["sstat"]["status"].as_str().unwrap_or("?")
                    ),
                );
            }
            super::progress::fraction("sanitize", sprog as usize, 0x10000, "of SPROG");
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }
    put(
        io,
        &format!("sanitize ({name}): started; see `vfnvme get-log --log-id 0x81 --log-len 512`"),
    )
}
