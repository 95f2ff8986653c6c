//! Namespace management: `create-ns`, `delete-ns`, `attach-ns`, `detach-ns`, `list-ns`,
//! `list-ctrl`.

use super::{check_nsid, confirm, failed, put, put_json, require_oacs, Format, Guard, Io, Target};
use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;
use vfnvme::platform::Platform;
use vfnvme::spec::AdminCommand;
use vfnvme::Controller;

/// Arguments of `create-ns`.
#[derive(Args, Debug)]
pub struct CreateNsArgs {
    #[command(flatten)]
    pub target: Target,
    /// Size in logical blocks (NSZE).
    #[arg(short = 's', long = "nsze", value_parser = super::parse_num)]
    pub nsze: u64,
    /// Capacity in logical blocks (NCAP); default: NSZE.
    #[arg(short = 'c', long = "ncap", value_parser = super::parse_num)]
    pub ncap: Option<u64>,
    /// LBA format index (FLBAS), from `vfnvme id-ns -n 0xffffffff`.
    #[arg(short = 'f', long = "flbas", default_value = "0")]
    pub flbas: u8,
    /// End-to-end protection settings (DPS).
    #[arg(short = 'd', long = "dps", default_value = "0")]
    pub dps: u8,
    /// Multi-path I/O and sharing (NMIC): 1 = shared.
    #[arg(short = 'm', long = "nmic", default_value = "0")]
    pub nmic: u8,
    /// Command set identifier.
    #[arg(short = 'y', long = "csi", default_value = "0")]
    pub csi: u8,
}

/// Arguments of `delete-ns`.
#[derive(Args, Debug)]
pub struct DeleteNsArgs {
    #[command(flatten)]
    pub target: Target,
    /// Namespace to delete (0xffffffff = all).
    #[arg(short = 'n', long = "namespace-id", value_parser = super::num_u32)]
    pub nsid: u32,
    /// Don't ask for confirmation.
    #[arg(long = "yes", alias = "force")]
    pub yes: bool,
}

/// Arguments of `attach-ns` and `detach-ns`.
#[derive(Args, Debug)]
pub struct AttachArgs {
    #[command(flatten)]
    pub target: Target,
    /// The namespace.
    #[arg(short = 'n', long = "namespace-id", value_parser = super::num_u32)]
    pub nsid: u32,
    /// Controller ids, comma separated; default: this controller.
    #[arg(short = 'c', long = "controllers", value_delimiter = ',', value_parser = super::parse_num)]
    pub controllers: Vec<u64>,
}

/// Arguments of `list-ns`.
#[derive(Args, Debug)]
pub struct ListNsArgs {
    #[command(flatten)]
    pub target: Target,
    /// List ids above this one.
    #[arg(short = 'n', long = "namespace-id", default_value = "0", value_parser = super::num_u32)]
    pub start: u32,
    /// Every allocated namespace, attached or not (needs Namespace Management).
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    #[command(flatten)]
    pub format: Format,
}

/// Arguments of `list-ctrl`.
#[derive(Args, Debug)]
pub struct ListCtrlArgs {
    #[command(flatten)]
    pub target: Target,
    /// Only the controllers this namespace is attached to.
    #[arg(short = 'n', long = "namespace-id", value_parser = super::num_u32)]
    pub nsid: Option<u32>,
    /// List ids from this one.
    #[arg(short = 'c', long = "cntid", default_value = "0")]
    pub cntid: u16,
    #[command(flatten)]
    pub format: Format,
}

const NS_MGMT: &str = "Namespace Management";

/// `vfnvme create-ns`.
pub fn create_ns<P: Platform>(ctrl: &Controller<P>, a: &CreateNsArgs, io: &mut Io) -> Result<()> {
    require_oacs(ctrl, 3, NS_MGMT)?;
    if a.nsze == 0 {
        bail!("--nsze 0: a namespace needs at least one block");
    }
    // The formats every namespace can use (Identify Namespace of the broadcast nsid).
    if let Ok(formats) = ctrl.identify_namespace(u32::MAX) {
        if a.flbas & 0xf > formats.nlbaf {
            bail!(
                "--flbas {}: this controller has LBA formats 0..={} (see `vfnvme id-ns -n 0xffffffff`)",
                a.flbas,
                formats.nlbaf
            );
        }
    }
    let mut data = vec![0u8; 4096];
    data[0..8].copy_from_slice(&a.nsze.to_le_bytes());
    data[8..16].copy_from_slice(&a.ncap.unwrap_or(a.nsze).to_le_bytes());
    data[26] = a.flbas;
    data[29] = a.dps;
    data[30] = a.nmic;
    let c = ctrl
        .admin_write(AdminCommand::namespace_create(a.csi), &data)
        .map_err(|e| failed(e, NS_MGMT))?;
    put(io, &format!("create-ns: Success, created nsid:{}", c.dw0))
}

/// `vfnvme delete-ns`.
pub fn delete_ns<P: Platform>(ctrl: &Controller<P>, a: &DeleteNsArgs, io: &mut Io) -> Result<()> {
    require_oacs(ctrl, 3, NS_MGMT)?;
    check_nsid(ctrl, a.nsid)?;
    confirm(
        io,
        a.yes,
        &format!("Deleting namespace {:#x}", a.nsid),
        "all its data will be lost",
        Guard::Proceed,
    )?;
    ctrl.admin(AdminCommand::namespace_delete(a.nsid))
        .map_err(|e| failed(e, NS_MGMT))?;
    let _ = ctrl.rescan();
    put(io, &format!("delete-ns: Success, deleted nsid:{}", a.nsid))
}

/// `vfnvme attach-ns` (`attach`) and `vfnvme detach-ns`.
pub fn attach_ns<P: Platform>(
    ctrl: &Controller<P>,
    a: &AttachArgs,
    attach: bool,
    io: &mut Io,
) -> Result<()> {
    check_nsid(ctrl, a.nsid)?;
    let ids: Vec<u16> = if a.controllers.is_empty() {
        vec![ctrl.identify().identify.cntlid]
    } else {
        a.controllers
            .iter()
            .map(|&c| {
                u16::try_from(c)
                    .map_err(|_| anyhow::anyhow!("controller id {c} is out of range (0..=65535)"))
            })
            .collect::<Result<_>>()?
    };
    ctrl.namespace_attachment(a.nsid, attach, &ids)
        .map_err(|e| failed(e, "Namespace Attachment"))?;
    let _ = ctrl.rescan();
    let verb = if attach { "attach-ns" } else { "detach-ns" };
    put(io, &format!("{verb}: Success, nsid:{}", a.nsid))
}

/// A list of `width`-byte little-endian ids (width 1..=8), up to the first zero.
pub(super) fn id_list(b: &[u8], width: usize) -> Vec<u64> {
    b.chunks_exact(width.clamp(1, 8))
        .map(|c| c.iter().rev().fold(0u64, |v, &x| v << 8 | u64::from(x)))
        .take_while(|&v| v != 0)
        .collect()
}

/// `vfnvme list-ns`.
pub fn list_ns<P: Platform>(ctrl: &Controller<P>, a: &ListNsArgs, io: &mut Io) -> Result<()> {
    let cns = if a.all { 0x10 } else { 0x02 };
    let (_, b) = ctrl
        .admin_read(AdminCommand::identify(cns, a.start, 0, 0), 4096)
        .map_err(|e| {
            failed(
                e,
                if a.all {
                    "listing allocated namespaces (Namespace Management)"
                } else {
                    "Identify active namespace list"
                },
            )
        })?;
    let ids = id_list(b.as_slice(), 4);
    if a.format.json() {
        let list: Vec<_> = ids.iter().map(|n| json!({"nsid": n})).collect();
        return put_json(io, &json!({ "nsid_list": list }));
    }
    for (i, n) in ids.iter().enumerate() {
        put(io, &format!("[{i:>4}]:{n:#x}"))?;
    }
    Ok(())
}

/// A Controller List (Identify CNS 12h/13h): the count it states (at most 2047) and the ids
/// that follow it, no more than the count nor than the bytes given.
pub(super) fn ctrl_list(b: &[u8]) -> (usize, Vec<u16>) {
    let n = usize::from(u16::from_le_bytes([
        b.first().copied().unwrap_or(0),
        b.get(1).copied().unwrap_or(0),
    ]))
    .min(2047);
    let ids = b
        .get(2..)
        .unwrap_or(&[])
        .chunks_exact(2)
        .take(n)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    (n, ids)
}

/// `vfnvme list-ctrl`.
pub fn list_ctrl<P: Platform>(ctrl: &Controller<P>, a: &ListCtrlArgs, io: &mut Io) -> Result<()> {
    let cmd = match a.nsid {
        Some(n) => {
            check_nsid(ctrl, n)?;
            AdminCommand::identify(0x12, n, a.cntid, 0)
        }
        None => AdminCommand::identify(0x13, 0, a.cntid, 0),
    };
    let (_, b) = ctrl
        .admin_read(cmd, 4096)
        .map_err(|e| failed(e, "Identify controller list"))?;
    let (n, ids) = ctrl_list(b.as_slice());
    if a.format.json() {
        let list: Vec<_> = ids.iter().map(|c| json!({"ctrl_id": c})).collect();
        return put_json(io, &json!({"num_ctrl": n, "ctrl_list": list}));
    }
    put(io, &format!("num of ctrls present: {n}"))?;
    for (i, c) in ids.iter().enumerate() {
        put(io, &format!("[{i:>4}]:{c:#x}"))?;
    }
    Ok(())
}
