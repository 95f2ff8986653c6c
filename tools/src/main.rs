//! `vfnvme`: set up, list, identify and benchmark NVMe controllers, and run commands in a QEMU guest.

mod admin;
mod holders;
mod identify;
mod kernel_nvme;
mod list;
mod man_extra;
#[cfg(feature = "model")]
mod model_subsys;
mod nvme_cli_list;
mod open;
mod output;
mod perf;
mod serve;
mod setup;
mod setup_sh;
mod setup_user;
mod subsys;
mod vm;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Command line of the `vfnvme` tool.
#[derive(Parser, Debug)]
#[command(name = "vfnvme", version, about = "Userspace NVMe over VFIO: tools")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// The explicit no-IOMMU mode, for machines without an IOMMU (never a fallback): `setup`
    /// binds controllers to uio_pci_generic, every other command opens them there, with
    /// physical DMA addresses from hugepages (root needed). Nothing then checks the device's
    /// DMA: any device bug or misuse can write anywhere in memory.
    #[arg(long, global = true)]
    no_iommu: bool,
    /// More log lines on standard error: -v info, -vv debug, -vvv trace (as RUST_LOG=debug;
    /// RUST_LOG, when set, decides).
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count, global = true)]
    verbose: u8,
}

/// The log filter: RUST_LOG when set, else warn raised by each `-v`.
fn log_filter(verbose: u8) -> &'static str {
    match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    }
}

/// The subcommands, in the order people need them (`--help` lists them so).
#[derive(Subcommand, Debug)]
enum Command {
    /// List the NVMe controllers (PCI class 0x010802) by subsystem, with their drivers and
    /// namespaces (size, LBA format, who drives each).
    List(list::ListArgs),
    /// The NVM subsystems and their controllers, as nvme-cli's `list-subsys` (text or
    /// `-o json`).
    ListSubsys(list::ListSubsysArgs),
    /// Bind controllers to vfio-pci, reserve hugepages, check the IOMMU and memlock limit;
    /// --reset gives them back to the kernel. Refuses what would hurt the machine.
    Setup(setup::SetupArgs),
    /// Show a controller's identify data and its namespaces.
    Identify(identify::IdentifyArgs),
    /// Measure IOPS and latency on controllers bound to vfio-pci (or on the in-memory model).
    Perf(perf::PerfArgs),
    /// Export a controller's namespaces (or the model's) over NVMe/TCP to the kernel's
    /// initiator (`nvme connect -t tcp`); only allowed host NQNs may connect.
    Serve(serve::ServeArgs),
    /// nvme-cli's admin commands (id-ctrl, smart-log, get-feature, format, ...).
    #[command(flatten)]
    Admin(admin::AdminCmd),
    /// Print a shell completion script (bash, zsh or fish) to standard output.
    Completions(CompletionsArgs),
    /// Print the man page (roff) to standard output, or write one page per command to a folder.
    Man(ManArgs),
    /// Run a command inside a QEMU guest whose emulated NVMe controllers sit on vfio-pci
    /// (for development and tests).
    Vm(vm::VmArgs),
}

/// Arguments of `vfnvme completions`.
#[derive(clap::Args, Debug)]
struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    shell: CompletionShell,
}

/// Shells `vfnvme completions` writes for.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum CompletionShell {
    /// bash (install as /usr/share/bash-completion/completions/vfnvme).
    Bash,
    /// fish (install as /usr/share/fish/vendor_completions.d/vfnvme.fish).
    Fish,
    /// zsh (install as _vfnvme in a folder of $fpath, e.g. /usr/local/share/zsh/site-functions).
    Zsh,
}

/// Arguments of `vfnvme man`.
#[derive(clap::Args, Debug)]
struct ManArgs {
    /// Write vfnvme.1 and one page per command (vfnvme-setup.1, ...) into this folder
    /// (e.g. /usr/local/share/man/man1) instead of printing vfnvme.1.
    #[arg(long, value_name = "DIR")]
    dir: Option<std::path::PathBuf>,
}

/// Writes the completion script for `shell`.
fn completions(shell: CompletionShell, out: &mut dyn std::io::Write) {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    match shell {
        CompletionShell::Bash => {
            clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, "vfnvme", out)
        }
        CompletionShell::Zsh => {
            clap_complete::generate(clap_complete::Shell::Zsh, &mut cmd, "vfnvme", out)
        }
        CompletionShell::Fish => {
            clap_complete::generate(clap_complete::Shell::Fish, &mut cmd, "vfnvme", out)
        }
    }
}

/// Prints the man page, or writes every page into `args.dir`.
fn man(args: &ManArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    use clap::CommandFactory;
    let cmd = Cli::command();
    match &args.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let names: Vec<String> = cmd
                .get_subcommands()
                .map(|c| c.get_name().to_string())
                .collect();
            clap_mangen::generate_to(cmd, dir)
                .with_context(|| format!("writing the man pages to {}", dir.display()))?;
            // EXAMPLES, EXIT STATUS and ENVIRONMENT after what clap wrote.
            let pages = std::iter::once(("vfnvme.1".to_string(), None)).chain(
                names
                    .iter()
                    .map(|n| (format!("vfnvme-{n}.1"), Some(n.as_str()))),
            );
            for (file, command) in pages {
                let path = dir.join(&file);
                if !path.exists() {
                    continue;
                }
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&path)
                    .with_context(|| format!("appending to {}", path.display()))?;
                std::io::Write::write_all(&mut f, man_extra::sections(command).as_bytes())
                    .with_context(|| format!("appending to {}", path.display()))?;
            }
            output::line(&format!(
                "wrote vfnvme.1 and vfnvme-<command>.1 to {}",
                dir.display()
            ));
        }
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut page)?;
            page.extend_from_slice(man_extra::sections(None).as_bytes());
            output::text(&String::from_utf8_lossy(&page));
        }
    }
    Ok(())
}

/// The error and its causes joined by ": ", like anyhow's `{:#}`, but without a cause whose
/// text its parent already ends with (errors that print their source, e.g. `HalError::Io`'s
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
    let mut cli = Cli::parse();
    env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or(log_filter(cli.verbose)),
    )
    .init();
    open::set_no_iommu(cli.no_iommu);
    if let Command::Setup(args) = &mut cli.command {
        args.no_iommu = cli.no_iommu;
    }
    if let Command::Vm(args) = &mut cli.command {
        args.verbose = cli.verbose > 0;
    }
    let is_vm = matches!(cli.command, Command::Vm(_));
    let result = match cli.command {
        Command::Perf(args) => perf::run(&args).map(|()| 0),
        Command::Serve(args) => serve::run(&args).map(|()| 0),
        Command::List(args) => list::run(&args).map(|()| 0),
        Command::ListSubsys(args) => list::run_subsys(&args).map(|()| 0),
        Command::Identify(args) => identify::run(&args).map(|()| 0),
        Command::Setup(args) => setup::run(&args).map(|()| 0),
        Command::Completions(args) => {
            completions(args.shell, &mut std::io::stdout().lock());
            Ok(0)
        }
        Command::Man(args) => man(&args).map(|()| 0),
        Command::Vm(args) => vm::run(&args),
        Command::Admin(cmd) => admin::run(&cmd).map(|()| 0),
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
    fn no_iommu_is_a_flag_of_setup_perf_and_every_opening_command() {
        for argv in [
            &["vfnvme", "setup", "--no-iommu", "0000:00:10.0"][..],
            &["vfnvme", "--no-iommu", "identify", "0000:00:10.0"],
            &["vfnvme", "perf", "--no-iommu", "--device", "0000:00:10.0"],
            &["vfnvme", "list", "--no-iommu"],
            &["vfnvme", "id-ctrl", "--no-iommu", "0000:00:10.0"],
        ] {
            let cli = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
            assert!(cli.no_iommu, "{argv:?}");
        }
        let cli = Cli::try_parse_from(["vfnvme", "identify", "0000:00:10.0"]).unwrap();
        assert!(!cli.no_iommu, "off unless asked: never a fallback");
        use clap::CommandFactory;
        let mut cmd = Cli::command();
        cmd.build();
        let help = cmd
            .find_subcommand_mut("setup")
            .unwrap()
            .render_long_help()
            .to_string();
        assert!(help.contains("--no-iommu"), "{help}");
        assert!(help.contains("write anywhere in memory"), "{help}");
    }

    /// clap's own checks of the whole command line (a global flag must not clash with a
    /// subcommand's argument of the same name).
    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from(["vfnvme", "vm", "-v", "--list-scenarios"]).unwrap();
        assert_eq!(cli.verbose, 1);
    }

    #[test]
    fn help_lists_commands_in_the_order_people_need_them() {
        use clap::CommandFactory;
        let names: Vec<String> = Cli::command()
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .collect();
        assert_eq!(
            names[..5],
            ["list", "list-subsys", "setup", "identify", "perf"]
        );
        assert_eq!(names[names.len() - 3..], ["completions", "man", "vm"]);
        let admin = &names[5..names.len() - 3];
        for want in [
            "id-ctrl",
            "smart-log",
            "get-feature",
            "set-feature",
            "format",
            "reset",
        ] {
            assert!(admin.iter().any(|n| n == want), "{want} missing: {names:?}");
        }
        let help = Cli::command().render_help().to_string();
        let at = |n: &str| help.find(&format!("  {n} ")).unwrap_or(usize::MAX);
        assert!(
            at("list") < at("setup") && at("setup") < at("identify"),
            "{help}"
        );
        assert!(at("perf") < at("vm") && at("vm") != usize::MAX, "{help}");
    }

    #[test]
    fn completions_and_man_page_cover_the_commands() {
        for shell in [
            CompletionShell::Bash,
            CompletionShell::Zsh,
            CompletionShell::Fish,
        ] {
            let mut out = Vec::new();
            completions(shell, &mut out);
            let text = String::from_utf8(out).unwrap();
            // fish names long options without their dashes (`-l hugepages`).
            for word in ["setup", "identify", "hugepages", "persist"] {
                assert!(text.contains(word), "{shell:?}: no {word}");
            }
        }
        let dir = std::env::temp_dir().join(format!("vfnvme-man-{}", std::process::id()));
        man(&ManArgs {
            dir: Some(dir.clone()),
        })
        .unwrap();
        let page = std::fs::read_to_string(dir.join("vfnvme-setup.1")).unwrap();
        assert!(page.contains(".TH") && page.contains("hugepages"), "{page}");
        assert!(
            page.contains(".SH EXAMPLES") && page.contains(".SH ENVIRONMENT"),
            "{page}"
        );
        assert!(dir.join("vfnvme.1").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn error_text_says_each_cause_once() {
        let busy = std::io::Error::new(
            std::io::ErrorKind::ResourceBusy,
            "busy: this VFIO group is already open",
        );
        let e = vfnvme::hal::HalError::Io {
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
