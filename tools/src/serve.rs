//! `vfnvme serve`: an NVMe/TCP target (crate `vfnvme-target`) exporting a vfio-bound
//! controller's namespaces, the multipath heads of several (`--head`), or the in-memory
//! model's, to NVMe-oF hosts (`nvme connect -t tcp`).
//! Ctrl-C (or SIGTERM) stops it: writes still waiting for data and held AERs are answered
//! "aborted", commands in the controller get `--grace` seconds to finish, then the controller is
//! let go. A TOML configuration file is not there yet: every setting is on the command line.

use anyhow::{bail, Context, Result};
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use vfnvme::platform::Platform;
use vfnvme::{Controller, ControllerOptions};
use vfnvme_target::{
    Backend, ControllerBackend, HeadBackend, SubsystemConfig, Target, TargetConfig,
};

/// Arguments of `vfnvme serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// The controller to export (PCI address, bound to vfio-pci with `vfnvme setup`).
    #[arg(
        value_name = "BDF",
        required_unless_present_any = ["model", "head"],
        conflicts_with_all = ["model", "head"]
    )]
    bdf: Option<String>,
    /// Export the multipath heads of one subsystem's controllers instead (addresses joined by
    /// `+`, e.g. 0000:00:10.0+0000:00:11.0): I/O fails over between them inside vfnvme.
    #[arg(long, value_name = "BDF+BDF", conflicts_with = "model")]
    head: Option<String>,
    /// Export the in-memory model instead: one RAM-backed namespace (data lost on exit).
    #[arg(long)]
    model: bool,
    /// Size of the --model namespace in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 256, requires = "model")]
    model_mib: u64,
    /// Block size of the --model namespace (512 or 4096).
    #[arg(long, value_name = "BYTES", default_value_t = 512, requires = "model")]
    model_block: u32,
    /// Address and port to listen on (only this machine by default).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:4420")]
    listen: SocketAddr,
    /// The subsystem NQN hosts connect to (`nvme connect -n`).
    #[arg(
        long,
        value_name = "NQN",
        default_value = "nqn.2026-12.io.vfnvme:serve"
    )]
    nqn: String,
    /// A host NQN allowed to connect (repeat it; a host's own is in /etc/nvme/hostnqn). None
    /// by default: every Connect is refused and the log says why.
    #[arg(long = "allow-host", value_name = "NQN")]
    allow_hosts: Vec<String>,
    /// Namespaces to export, comma-separated (default: every one without metadata).
    #[arg(short = 'n', long = "nsid", value_name = "NSID", value_delimiter = ',')]
    nsids: Vec<u32>,
    /// Seconds commands still in the controller get to finish at shutdown.
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    grace: u64,
}

/// Runs `vfnvme serve` until Ctrl-C.
pub fn run(args: &ServeArgs) -> Result<()> {
    let mut sub = SubsystemConfig::new(args.nqn.clone());
    sub.allowed_hosts.clone_from(&args.allow_hosts);
    let mut config = TargetConfig::new(sub);
    config.listen = args.listen;
    config.validate().map_err(anyhow::Error::msg)?;
    if args.allow_hosts.is_empty() {
        log::warn!(
            "no --allow-host given: every host will be refused (add --allow-host \"$(cat /etc/nvme/hostnqn)\")"
        );
    }
    let nsids = (!args.nsids.is_empty()).then_some(args.nsids.as_slice());
    if let Some(head) = &args.head {
        let (sub, name) = crate::open::open_head(head, ControllerOptions::default())?;
        let backend =
            HeadBackend::new(sub, nsids).map_err(|e| anyhow::anyhow!("--head {name}: {e}"))?;
        return serve(backend, config, args);
    }
    match &args.bdf {
        Some(bdf) => {
            let ctrl = crate::open::open_controller(bdf, ControllerOptions::default())?;
            serve_controller(ctrl, nsids, config, args)
        }
        None => serve_model(nsids, config, args),
    }
}

#[cfg(feature = "model")]
fn serve_model(nsids: Option<&[u32]>, config: TargetConfig, args: &ServeArgs) -> Result<()> {
    use vfnvme_model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform};
    if !matches!(args.model_block, 512 | 4096) {
        bail!("--model-block {}: give 512 or 4096", args.model_block);
    }
    let blocks = args.model_mib.max(1) * (1 << 20) / u64::from(args.model_block);
    let platform = ModelPlatform::new(ModelConfig {
        namespaces: vec![ModelNamespaceConfig {
            nsid: 1,
            blocks,
            lba_size: args.model_block,
            backing: Backing::Ram,
        }],
        serial: "VFNVME-SERVE-MODEL".into(),
        ..ModelConfig::default()
    })
    .context("creating the model")?;
    let ctrl = crate::open::open_platform(platform, "model", ControllerOptions::default())?;
    serve_controller(ctrl, nsids, config, args)
}

#[cfg(not(feature = "model"))]
fn serve_model(_: Option<&[u32]>, _: TargetConfig, _: &ServeArgs) -> Result<()> {
    bail!("--model: this vfnvme was built without the in-memory model; rebuild with `cargo build --features model`")
}

fn serve_controller<P: Platform>(
    ctrl: Controller<P>,
    nsids: Option<&[u32]>,
    config: TargetConfig,
    args: &ServeArgs,
) -> Result<()> {
    let backend = ControllerBackend::new(Arc::new(ctrl), nsids).map_err(anyhow::Error::msg)?;
    serve(backend, config, args)
}

fn serve<B: Backend>(backend: B, config: TargetConfig, args: &ServeArgs) -> Result<()> {
    let mut target = Target::bind(config, backend)?;
    let addr = target.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 130, stop.clone())
            .and_then(|_| signal_hook::flag::register(sig, stop.clone()))
            .context("installing the Ctrl-C handler")?;
    }
    let e = target.export();
    println!(
        "vfnvme serve: {} on {addr} (tcp), {} namespace(s): {}; Ctrl-C stops",
        e.config.subsystem.nqn,
        e.namespaces.len(),
        e.namespaces
            .iter()
            .map(|n| format!(
                "{} ({} MiB, {} B blocks)",
                n.nsid,
                (n.blocks << n.lba_shift) >> 20,
                n.lba_size()
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let report = target.run(&stop, Duration::from_secs(args.grace));
    println!(
        "vfnvme serve: stopped ({} connections closed, {} commands aborted, {} left to the controller)",
        report.connections, report.aborted, report.abandoned
    );
    Ok(())
}
