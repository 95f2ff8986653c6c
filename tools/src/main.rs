//! `vfnvme`: set up, list, identify and benchmark NVMe controllers, and run commands in a QEMU guest.

mod format;
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
    /// Format a namespace (Format NVM), by default to its block size without metadata.
    Format(format::FormatArgs),
    /// Bind controllers to vfio-pci, reserve hugepages, check the IOMMU and memlock limit.
    Setup(setup::SetupArgs),
    /// Run a command inside a QEMU guest whose emulated NVMe controllers sit on vfio-pci.
    Vm(vm::VmArgs),
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    let is_vm = matches!(cli.command, Command::Vm(_));
    let result = match cli.command {
        Command::Perf(args) => perf::run(&args).map(|()| 0),
        Command::List(args) => list::run(&args).map(|()| 0),
        Command::Identify(args) => identify::run(&args).map(|()| 0),
        Command::Format(args) => format::run(&args).map(|()| 0),
        Command::Setup(args) => setup::run(&args).map(|()| 0),
        Command::Vm(args) => vm::run(&args),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("vfnvme: error: {e:#}");
            ExitCode::from(if is_vm { vm::EXIT_HARNESS_ERROR } else { 1 })
        }
    }
}
