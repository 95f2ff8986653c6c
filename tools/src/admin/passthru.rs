//! `reset`, `admin-passthru` and `io-passthru`.

use super::logs::hex_dump;
use super::{failed, put, put_json, read_file, Format, Io, Target};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;
use vfnvme::platform::Platform;
use vfnvme::spec::{AdminCommand, Command};
use vfnvme::{Controller, QpairOptions};

/// Arguments of `reset`.
#[derive(Args, Debug)]
pub struct ResetArgs {
    #[command(flatten)]
    pub target: Target,
    #[command(flatten)]
    pub format: Format,
}

/// Arguments of `admin-passthru` and `io-passthru`.
#[derive(Args, Debug)]
pub struct PassthruArgs {
    #[command(flatten)]
    pub target: Target,
    /// Opcode (nvme-cli's `-o`; `-O` also works).
    #[arg(short = 'o', visible_short_alias = 'O', long = "opcode", value_parser = super::num_u8)]
    pub opcode: u8,
    /// Command dword 0 flags (FUSE, PSDT): vfnvme builds the data pointer itself, so only 0.
    #[arg(short = 'f', long = "flags", default_value = "0", value_parser = super::num_u8)]
    pub flags: u8,
    /// Namespace id (io-passthru: the namespace the command goes to).
    #[arg(short = 'n', long = "namespace-id", default_value = "0", value_parser = super::num_u32)]
    pub nsid: u32,
    /// CDW2.
    #[arg(short = '2', long = "cdw2", default_value = "0", value_parser = super::num_u32)]
    pub cdw2: u32,
    /// CDW3.
    #[arg(short = '3', long = "cdw3", default_value = "0", value_parser = super::num_u32)]
    pub cdw3: u32,
    /// CDW10.
    #[arg(short = '4', long = "cdw10", default_value = "0", value_parser = super::num_u32)]
    pub cdw10: u32,
    /// CDW11.
    #[arg(short = '5', long = "cdw11", default_value = "0", value_parser = super::num_u32)]
    pub cdw11: u32,
    /// CDW12.
    #[arg(short = '6', long = "cdw12", default_value = "0", value_parser = super::num_u32)]
    pub cdw12: u32,
    /// CDW13.
    #[arg(short = '7', long = "cdw13", default_value = "0", value_parser = super::num_u32)]
    pub cdw13: u32,
    /// CDW14.
    #[arg(short = '8', long = "cdw14", default_value = "0", value_parser = super::num_u32)]
    pub cdw14: u32,
    /// CDW15.
    #[arg(short = '9', long = "cdw15", default_value = "0", value_parser = super::num_u32)]
    pub cdw15: u32,
    /// Data buffer length in bytes.
    #[arg(short = 'l', long = "data-len", default_value = "0", value_parser = super::num_u32)]
    pub data_len: u32,
    /// The command reads from the controller (data goes to --output-file or the screen).
    #[arg(short = 'r', long = "read", conflicts_with = "write")]
    pub read: bool,
    /// The command writes to the controller (data comes from --input-file).
    #[arg(short = 'w', long = "write")]
    pub write: bool,
    /// File with the data to send (with --write).
    #[arg(short = 'i', long = "input-file")]
    pub input: Option<PathBuf>,
    /// File for the data received (with --read); default: a hex dump on standard output.
    /// (Long form only: `-o` is the opcode, as in nvme-cli.)
    #[arg(long = "output-file")]
    pub output: Option<PathBuf>,
    /// Write the data received to standard output as raw bytes.
    #[arg(short = 'b', long = "raw-binary")]
    pub raw: bool,
    /// Print the command's fields before sending it (nvme-cli's layout).
    #[arg(short = 's', long = "show-command")]
    pub show_command: bool,
    /// Print the command's fields and don't send it.
    #[arg(short = 'd', long = "dry-run")]
    pub dry_run: bool,
    /// Print how long the command took.
    #[arg(short = 'T', long = "latency")]
    pub latency: bool,
}

impl PassthruArgs {
    /// The data to send: the input file, padded with zeroes to --data-len.
    fn data_out(&self) -> Result<Vec<u8>> {
        let Some(path) = &self.input else {
            bail!("--write needs --input-file FILE with the data to send");
        };
        let mut d = read_file(path)?;
        let len = if self.data_len == 0 {
            d.len()
        } else {
            self.data_len as usize
        };
        if d.len() > len {
            bail!(
                "{}: {} bytes, more than --data-len {len}",
                path.display(),
                d.len()
            );
        }
        d.resize(len, 0);
        Ok(d)
    }

    fn check(&self) -> Result<()> {
        if self.flags != 0 {
            bail!(
                "--flags {:#04x}: vfnvme sets FUSE and PSDT itself (it builds the data pointer); give 0",
                self.flags
            );
        }
        if self.data_len > 0 && !self.read && !self.write {
            bail!(
                "--data-len {} needs --read or --write to say which way the data goes",
                self.data_len
            );
        }
        if self.input.is_some() && !self.write {
            bail!("--input-file needs --write");
        }
        Ok(())
    }

    /// The command as nvme-cli's `--show-command` prints it.
    fn shown(&self) -> String {
        format!(
            "opcode       : {:02x}\nflags        : {:02x}\nrsvd1        : 0000\nnsid         : {:08x}\ncdw2         : {:08x}\ncdw3         : {:08x}\ndata_len     : {:08x}\nmetadata_len : 00000000\naddr         : 0\nmetadata     : 0\ncdw10        : {:08x}\ncdw11        : {:08x}\ncdw12        : {:08x}\ncdw13        : {:08x}\ncdw14        : {:08x}\ncdw15        : {:08x}\ntimeout_ms   : 00000000",
            self.opcode, self.flags, self.nsid, self.cdw2, self.cdw3, self.data_len, self.cdw10,
            self.cdw11, self.cdw12, self.cdw13, self.cdw14, self.cdw15
        )
    }

    /// Checks the arguments and shows the command if asked; `false` for a dry run (nothing to
    /// send).
    fn prepare(&self, io: &mut Io) -> Result<bool> {
        self.check()?;
        if self.show_command || self.dry_run {
            put(io, &self.shown())?;
        }
        Ok(!self.dry_run)
    }

    /// With --latency: how long the command took, as nvme-cli prints it.
    fn latency(&self, io: &mut Io, admin: bool, start: std::time::Instant) -> Result<()> {
        if !self.latency {
            return Ok(());
        }
        let kind = if admin { "Admin" } else { "IO" };
        put(
            io,
            &format!(
                "{kind} Command opcode {:#04x} latency: {} us",
                self.opcode,
                start.elapsed().as_micros()
            ),
        )
    }

    /// Delivers the data the command read.
    fn deliver(&self, io: &mut Io, data: &[u8]) -> Result<()> {
        if let Some(path) = &self.output {
            return std::fs::write(path, data)
                .with_context(|| format!("writing {}", path.display()));
        }
        if self.raw {
            return io.out.write_all(data).map_err(Into::into);
        }
        io.out.write_all(hex_dump(data).as_bytes())?;
        Ok(())
    }
}

/// `vfnvme reset`: a controller reset through the driver (see `Controller::reset`).
pub fn reset<P: Platform>(ctrl: &Controller<P>, a: &ResetArgs, io: &mut Io) -> Result<()> {
    use vfnvme::platform::RegisterIo;
    use vfnvme::spec::registers::{Csts, CSTS};
    let events = ctrl.subscribe_controller_events();
    let csts = || Csts(ctrl.platform().regs().read32(CSTS));
    let before = csts();
    let start = std::time::Instant::now();
    let result = ctrl.reset();
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    let after = csts();
    let seen: Vec<String> = events.try_iter().map(|e| format!("{e:?}")).collect();
    let state = |c: Csts| {
        if c.is_all_ones() {
            "gone (CSTS reads all ones)".to_string()
        } else {
            format!(
                "CSTS {:#x}: RDY={} CFS={}",
                c.0,
                u8::from(c.rdy()),
                u8::from(c.cfs())
            )
        }
    };
    if let Err(e) = result {
        return Err(failed(e, "controller reset").context(format!(
            "{}: controller reset failed after {ms:.1} ms; now {}; events: {}",
            io.name,
            state(after),
            seen.join(", ")
        )));
    }
    let namespaces = ctrl.namespaces().len();
    if a.format.json() {
        return put_json(
            io,
            &serde_json::json!({
                "device": io.name,
                "reset": "done",
                "duration_ms": ms,
                "csts_before": before.0,
                "csts_after": after.0,
                "ready": after.rdy(),
                "fatal": after.cfs(),
                "events": seen,
                "namespaces": namespaces,
            }),
        );
    }
    let name = io.name.clone();
    put(
        io,
        &format!(
            "{name}: controller reset done in {ms:.1} ms (CC.EN 1 -> 0 -> 1)\n  before: {}\n  after:  {}\n  events: {}\n  namespaces after the rescan: {namespaces}",
            state(before),
            state(after),
            seen.join(", ")
        ),
    )
}

/// `vfnvme admin-passthru`.
pub fn admin_passthru<P: Platform>(
    ctrl: &Controller<P>,
    a: &PassthruArgs,
    io: &mut Io,
) -> Result<()> {
    if !a.prepare(io)? {
        return Ok(());
    }
    let cmd = AdminCommand {
        opcode: a.opcode,
        nsid: a.nsid,
        cdw2: a.cdw2,
        cdw3: a.cdw3,
        cdw10: a.cdw10,
        cdw11: a.cdw11,
        cdw12: a.cdw12,
        cdw13: a.cdw13,
        cdw14: a.cdw14,
        cdw15: a.cdw15,
    };
    let what = format!("admin opcode {:#04x}", a.opcode);
    let start = std::time::Instant::now();
    let done = if a.write {
        let d = a.data_out()?;
        let start = std::time::Instant::now();
        let done = ctrl.admin_write(cmd, &d).map_err(|e| failed(e, &what))?;
        a.latency(io, true, start)?;
        done
    } else if a.read && a.data_len > 0 {
        let (c, b) = ctrl
            .admin_read(cmd, a.data_len as usize)
            .map_err(|e| failed(e, &what))?;
        a.latency(io, true, start)?;
        if !a.raw {
            put(io, &format!("NVMe command result:{:08x}", c.dw0))?;
        }
        return a.deliver(io, b.as_slice());
    } else {
        let done = ctrl.admin(cmd).map_err(|e| failed(e, &what))?;
        a.latency(io, true, start)?;
        done
    };
    put(io, &format!("NVMe command result:{:08x}", done.dw0))
}

/// `vfnvme io-passthru`: one NVM command on a fresh queue pair of depth 2.
pub fn io_passthru<P: Platform>(ctrl: &Controller<P>, a: &PassthruArgs, io: &mut Io) -> Result<()> {
    if !a.prepare(io)? {
        return Ok(());
    }
    let Some(ns) = ctrl.namespace(a.nsid) else {
        let active: Vec<u32> = ctrl.namespaces().iter().map(|n| n.nsid()).collect();
        bail!(
            "namespace {} is not active on {}: give --namespace-id, one of {active:?}",
            a.nsid,
            io.name
        );
    };
    let mut cmd = Command::new(a.opcode);
    cmd.cdw2 = a.cdw2;
    cmd.cdw3 = a.cdw3;
    cmd.cdw10 = a.cdw10;
    cmd.cdw11 = a.cdw11;
    cmd.cdw12 = a.cdw12;
    cmd.cdw13 = a.cdw13;
    cmd.cdw14 = a.cdw14;
    cmd.cdw15 = a.cdw15;
    let buf = if a.write {
        let d = a.data_out()?;
        let mut b = ctrl.dma().alloc(d.len().max(1))?;
        b.as_mut_slice()[..d.len()].copy_from_slice(&d);
        Some(b)
    } else if a.data_len > 0 {
        Some(ctrl.dma().alloc(a.data_len as usize)?)
    } else {
        None
    };
    let mut q = ctrl.alloc_qpair(QpairOptions {
        depth: 2,
        ..QpairOptions::default()
    })?;
    let what = format!("I/O opcode {:#04x}", a.opcode);
    let start = std::time::Instant::now();
    let (status, back) = q
        .passthru_sync(&ns, cmd, buf)
        .map_err(|e| failed(e, &what))?;
    a.latency(io, false, start)?;
    if !status.is_success() {
        return Err(failed(vfnvme::Error::IoFailed { status }, &what));
    }
    match back {
        Some(b) if a.read => a.deliver(io, b.as_slice()),
        _ => put(io, "NVMe command result:00000000"),
    }
}
