//! `vfnvme`: set up, list, identify and benchmark NVMe controllers, and run commands in a QEMU guest.

mod holders;
mod identify;
mod kernel_nvme;
mod list;
mod open;
mod output;
mod perf;
mod setup;
mod vm;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Command line of the `vfnvme` tool.
#[derive(Parser, Debug)]
#[command(name = "vfnvme", version, about = "Userspace NVMe over VFIO: tools")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
enum Command {
    /// Measure IOPS and latency on controllers bound to vfio-pci (or on the in-memory model).
    Perf(perf::PerfArgs),
    /// List the NVMe controllers (PCI class 0x010802) and their drivers.
    List(list::ListArgs),
    /// Show a controller's identify data and its namespaces.
    Identify(identify::IdentifyArgs),
    /// Bind controllers to vfio-pci, reserve hugepages, check the IOMMU and memlock limit.
    Setup(setup::SetupArgs),
    /// Run a command inside a QEMU guest whose emulated NVMe controllers sit on vfio-pci.
    Vm(vm::VmArgs),
}

/// The error and its causes joined by ": ", like anyhow's `{:#}`, but without a cause whose
/// text its parent already ends with (errors that print their source, e.g. `DmaError::Io`'s
/// "{path}: {source}", would otherwise show it twice).
fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut last = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !last.is_empty() && last.ends_with(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
        last = text;
    }
    out
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    let is_vm = matches!(cli.command, Command::Vm(_));
    let result = match cli.command {
        Command::Perf(args) => perf::run(&args).map(|()| 0),
        Command::List(args) => list::run(&args).map(|()| 0),
        Command::Identify(args) => identify::run(&args).map(|()| 0),
        Command::Setup(args) => setup::run(&args).map(|()| 0),
        Command::Vm(args) => vm::run(&args),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("vfnvme: error: {}", error_text(&e));
            ExitCode::from(if is_vm { vm::EXIT_HARNESS_ERROR } else { 1 })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn error_text_says_each_cause_once() {
        let busy = std::io::Error::new(
            std::io::ErrorKind::ResourceBusy,
            "busy: this VFIO group is already open",
        );
        let e = vfnvme::dma::DmaError::Io {
            path: "/dev/vfio/3".into(),
            source: busy,
        };
        let r: Result<(), _> = Err(e);
        let e = r.context("opening 0000:00:10.0 through VFIO").unwrap_err();
        let text = error_text(&e);
        assert_eq!(
            text,
            "opening 0000:00:10.0 through VFIO: /dev/vfio/3: busy: this VFIO group is already open"
        );
        assert_eq!(
            format!("{e:#}").matches("busy").count(),
            2,
            "anyhow repeats it"
        );
    }
}
