//! `vfnvme`: set up, list, identify and benchmark NVMe controllers, and run commands in a QEMU guest.

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
    /// Run a command inside a QEMU guest whose emulated NVMe controllers sit on vfio-pci.
    Vm(vm::VmArgs),
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Vm(args) => vm::run(&args),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("vfnvme: error: {e:#}");
            ExitCode::from(vm::EXIT_HARNESS_ERROR)
        }
    }
}
