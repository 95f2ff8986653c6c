//! `vfnvme vm`: run a host command inside a QEMU guest whose emulated NVMe controllers are bound
//! to vfio-pci behind an emulated Intel IOMMU.
//!
//! The guest shares the host's root read-only over 9p and chroots into it, so the command is the
//! host's own binary. See docs/testing.md.

mod accel;
mod console;
mod cpio;
mod devices;
mod expect;
mod guest_view;
mod init_script;
mod initramfs;
mod install;
mod paths;
mod qemu;
mod qmp;
mod run_script;
mod scenarios;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};

use console::{run_guest, Outcome, TAIL_LINES};
use run_script::RunPlan;
use scenarios::{Binding, Scenario};

/// Exit status when the harness itself fails or the guest dies without reporting a status.
pub const EXIT_HARNESS_ERROR: u8 = 125;

/// Exit status when the timeout strikes (as timeout(1)).
pub const EXIT_TIMEOUT: u8 = 124;

/// Host environment variables passed into the guest when set (besides every `VFNVME_*`).
const PASS_THROUGH: &[&str] = &[
    "RUST_LOG",
    "RUST_BACKTRACE",
    "RUST_LIB_BACKTRACE",
    "RUST_TEST_THREADS",
    "RUST_TEST_NOCAPTURE",
    "RUST_MIN_STACK",
    "NO_COLOR",
];

/// How QEMU executes the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AccelChoice {
    /// KVM if a probe guest boots with it within 20 s (result cached), else TCG.
    Auto,
    /// Software emulation: slow, always works.
    Tcg,
    /// Hardware virtualization (hangs on some hosts).
    Kvm,
}

/// Arguments of `vfnvme vm`.
#[derive(Args, Debug)]
pub struct VmArgs {
    /// Scenario: which emulated controllers the guest gets (see --list-scenarios).
    #[arg(long, default_value = scenarios::DEFAULT_SCENARIO)]
    scenario: String,
    /// Extra raw QEMU argument, appended last (repeatable), e.g. --qemu-arg=-device --qemu-arg=...
    #[arg(long = "qemu-arg", value_name = "ARG", allow_hyphen_values = true)]
    qemu_args: Vec<String>,
    /// Also bind this guest PCI device to vfio-pci (repeatable; for devices from --qemu-arg).
    #[arg(long = "vfio", value_name = "BDF")]
    vfio: Vec<String>,
    /// Set an environment variable for the command (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// Seconds before QEMU is killed and the run fails.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// Guest memory in MiB (512 MiB of it become hugepages).
    #[arg(long, default_value_t = 2048)]
    memory: u32,
    /// Guest virtual CPUs.
    #[arg(long, default_value_t = 2)]
    cpus: u32,
    /// Accelerator.
    #[arg(long, value_enum, default_value_t = AccelChoice::Auto)]
    accel: AccelChoice,
    /// Show the guest kernel's messages (no `quiet`): the global `-v`/`--verbose`, set by
    /// `main`.
    #[arg(skip)]
    pub verbose: bool,
    /// Plain QEMU: keep the timer slack QEMU inherits (Linux's default is 50 µs) instead of
    /// lowering it to 1 ns, and the guest kernel's default clocksource (hpet under TCG) instead of
    /// `clocksource=tsc tsc=reliable`. For figures that must hold outside the harness's settings.
    #[arg(long)]
    qemu_defaults: bool,
    /// List the scenarios and exit.
    #[arg(long)]
    list_scenarios: bool,
    /// Only prepare: install what is missing, build the initramfs, choose the accelerator.
    #[arg(long)]
    prepare: bool,
    /// The command to run in the guest, after `--`.
    #[arg(
        last = true,
        value_name = "COMMAND",
        required_unless_present_any = ["list_scenarios", "prepare"]
    )]
    command: Vec<String>,
}

/// Runs `vfnvme vm`; returns the exit status to end with (the guest command's own on success).
pub fn run(args: &VmArgs) -> Result<u8> {
    if args.list_scenarios {
        print!("{}", scenarios::listing());
        return Ok(0);
    }
    let scenario = scenarios::find(&args.scenario).with_context(|| {
        format!(
            "unknown scenario {:?}; `vfnvme vm --list-scenarios` lists them",
            args.scenario
        )
    })?;
    if args.command.is_empty() && !args.prepare {
        bail!("no command given: put it after `--`, e.g. `vfnvme vm -- uname -a`");
    }
    if args.memory < 1024 {
        bail!(
            "--memory {} is too small: the guest reserves 512 MiB of hugepages; use 1024 or more",
            args.memory
        );
    }
    if args.cpus == 0 {
        bail!("--cpus must be at least 1");
    }
    install::require_root()?;
    install::ensure_packages()?;
    let kernel = install::find_kernel()?;
    let dirs = paths::VmDirs::prepare()?;
    let initramfs = initramfs::ensure_initramfs(&kernel, &dirs.root)?;
    fs::write(
        dirs.root.join("kernel"),
        format!("{}\n", kernel.image.display()),
    )
    .context("recording the guest kernel path")?;
    let guest = Guest {
        kernel: &kernel.image,
        initramfs: &initramfs,
        dirs: &dirs,
        verbose: args.verbose,
        qemu_defaults: args.qemu_defaults,
        memory_mib: args.memory,
        cpus: args.cpus,
    };
    let accel = accel::choose(args.accel, &guest)?;
    if args.prepare {
        eprintln!(
            "vfnvme vm: ready: kernel {}, initramfs {}, accelerator {accel}",
            kernel.image.display(),
            initramfs.display()
        );
        return Ok(0);
    }
    guest.run_scenario(scenario, args, accel)
}

/// What every boot shares.
struct Guest<'a> {
    kernel: &'a Path,
    initramfs: &'a Path,
    dirs: &'a paths::VmDirs,
    verbose: bool,
    qemu_defaults: bool,
    memory_mib: u32,
    cpus: u32,
}

/// One boot's particulars.
struct Boot<'a> {
    accel: &'a str,
    devices: &'a [String],
    extra_qemu: &'a [String],
    vfio: &'a [String],
    kernel_devices: &'a [(String, usize)],
    env: &'a [(String, String)],
    command: &'a [String],
    timeout: Duration,
    echo: bool,
    /// The emulated Intel IOMMU (`-device intel-iommu`, `intel_iommu=on`); false for the
    /// scenarios without one (`scenarios::Scenario::iommu`).
    iommu: bool,
}

impl Guest<'_> {
    fn run_scenario(&self, scenario: &Scenario, args: &VmArgs, accel: &str) -> Result<u8> {
        let run = self.dirs.new_run()?;
        let devices = devices::qemu_device_args(scenario, &run.images)?;
        let mut vfio: Vec<String> = scenario
            .controllers_on(Binding::Vfio)
            .map(|c| c.bdf())
            .collect();
        vfio.extend(args.vfio.iter().cloned());
        let kernel_devices: Vec<(String, usize)> = scenario
            .controllers_on(Binding::Kernel)
            .map(|c| (c.bdf(), scenario.namespaces_of(c).len()))
            .collect();
        let env = command_env(scenario, &args.vfio, &run.out, &run.images, &args.env)?;
        let timing = if self.qemu_defaults {
            "QEMU's inherited timer slack, guest's default clocksource"
        } else {
            "timer slack 1 ns, guest clocksource tsc"
        };
        let iommu = if scenario.iommu() {
            "emulated Intel IOMMU"
        } else {
            "no IOMMU"
        };
        eprintln!(
            "vfnvme vm: scenario {} ({}), {accel}, {iommu}, {} MiB, {} CPUs, {timing}; console log {}",
            scenario.name,
            scenario.description,
            self.memory_mib,
            self.cpus,
            run.console_log().display()
        );
        let started = Instant::now();
        let boot = Boot {
            accel,
            devices: &devices,
            extra_qemu: &args.qemu_args,
            vfio: &vfio,
            kernel_devices: &kernel_devices,
            env: &env,
            command: &args.command,
            timeout: Duration::from_secs(args.timeout),
            echo: true,
            iommu: scenario.iommu(),
        };
        let result = self.boot(&run, &boot);
        run.remove_images();
        let result = result?;
        let secs = started.elapsed().as_secs_f64();
        match result.outcome {
            Outcome::Exited(code) => {
                eprintln!(
                    "vfnvme vm: command exited with status {code} ({secs:.1} s in the guest)"
                );
                if code == run_script::SETUP_FAILED {
                    eprintln!(
                        "vfnvme vm: status 125 means the guest setup or the harness failed; see {} and {}",
                        run.console_log().display(),
                        run.out.join("dmesg.txt").display()
                    );
                }
                Ok(code)
            }
            Outcome::TimedOut => {
                print_tail("timed out", &result.tail, &run.console_log());
                eprintln!(
                    "vfnvme vm: error: the guest did not finish within --timeout {} s; QEMU was killed",
                    args.timeout
                );
                Ok(EXIT_TIMEOUT)
            }
            Outcome::NoBoot => {
                print_tail("no console output", &result.tail, &run.console_log());
                eprintln!(
                    "vfnvme vm: error: the guest printed nothing within {:.0} s (its /init never \
                     ran: a hung boot); QEMU was killed. Status 125: the harness, not the command",
                    secs
                );
                Ok(EXIT_HARNESS_ERROR)
            }
            Outcome::NoMarker => {
                print_tail("no exit status", &result.tail, &run.console_log());
                eprintln!(
                    "vfnvme vm: error: QEMU ended without the guest reporting an exit status \
                     (kernel panic, guest crash or QEMU error: see the console above)"
                );
                Ok(EXIT_HARNESS_ERROR)
            }
        }
    }

    fn boot(&self, run: &paths::RunDirs, boot: &Boot<'_>) -> Result<console::RunResult> {
        let out_dir = path_str(&run.out)?;
        let cwd = std::env::current_dir().context("reading the current folder")?;
        let cwd = guest_view::resolved(&cwd);
        guest_view::require_visible("the current folder (where the command runs)", &cwd)?;
        if let Some(program) = boot.command.first() {
            guest_view::require_visible_program(program, &cwd)?;
        }
        let cwd = path_str(&cwd)?;
        let script = run_script::run_script(&RunPlan {
            out_dir: &out_dir,
            vfio: boot.vfio,
            kernel: boot.kernel_devices,
            cwd: &cwd,
            env: boot.env,
            command: boot.command,
        });
        let script_path = run.out.join("run.sh");
        fs::write(&script_path, script)
            .with_context(|| format!("writing {}", script_path.display()))?;
        let cmdline = init_script::kernel_cmdline(
            &run.nonce,
            &path_str(&script_path)?,
            &path_str(&self.dirs.out)?,
            self.verbose,
            !self.qemu_defaults,
            boot.iommu,
        );
        // QMP for the guest's host-side requests (device_del, ...): see qmp.rs.
        let qmp_socket = qmp::socket_path(&run.nonce);
        let relay = qmp::Relay::start(qmp_socket.clone(), run.out.join("qmp"), boot.echo)
            .context("starting the QMP relay")?;
        let args = qemu::qemu_args(&qemu::GuestConfig {
            accel: boot.accel,
            memory_mib: self.memory_mib,
            cpus: self.cpus,
            kernel: self.kernel,
            initramfs: self.initramfs,
            cmdline: &cmdline,
            out_dir: &self.dirs.out,
            devices: boot.devices,
            extra: boot.extra_qemu,
            qmp_socket: Some(&qmp_socket),
            iommu: boot.iommu,
        });
        fs::write(
            run.out.join("qemu-args.txt"),
            format!("{} {}\n", qemu::QEMU, args.join(" ")),
        )
        .context("recording the QEMU command line")?;
        let result = run_guest(
            qemu::QEMU,
            &args,
            &run.nonce,
            boot.timeout,
            &run.console_log(),
            boot.echo,
            !self.qemu_defaults,
        );
        relay.stop();
        result
    }
}

/// The command's whole environment in the guest.
fn command_env(
    scenario: &Scenario,
    extra_vfio: &[String],
    out: &Path,
    images: &Path,
    user: &[String],
) -> Result<Vec<(String, String)>> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    let host = |k: &str| std::env::var(k).ok();
    env.insert(
        "PATH".into(),
        host("PATH").unwrap_or_else(|| {
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()
        }),
    );
    env.insert(
        "HOME".into(),
        host("HOME").unwrap_or_else(|| "/root".into()),
    );
    env.insert("USER".into(), "root".into());
    env.insert("LOGNAME".into(), "root".into());
    env.insert("RUST_BACKTRACE".into(), "1".into());
    // Tests in one binary share the guest's controllers: run them one after another.
    env.insert("RUST_TEST_THREADS".into(), "1".into());
    for (k, v) in std::env::vars() {
        if PASS_THROUGH.contains(&k.as_str()) || k.starts_with("VFNVME_") {
            env.insert(k, v);
        }
    }
    for (k, v) in expect::scenario_env(scenario, extra_vfio) {
        env.insert(k, v);
    }
    env.insert("VFNVME_GUEST".into(), "1".into());
    env.insert("VFNVME_OUT_DIR".into(), path_str(out)?);
    env.insert("VFNVME_QMP_DIR".into(), path_str(&out.join("qmp"))?);
    // The namespaces' image files (`c<index>n<nsid>.img`), read-only in the guest: tests compare
    // what QEMU stored with what they wrote.
    env.insert("VFNVME_IMAGE_DIR".into(), path_str(images)?);
    for kv in user {
        let (k, v) = kv
            .split_once('=')
            .with_context(|| format!("--env {kv:?} is not KEY=VALUE"))?;
        if k.is_empty() {
            bail!("--env {kv:?} has an empty name");
        }
        env.insert(k.into(), v.into());
    }
    Ok(env.into_iter().collect())
}

/// A path as text without whitespace (it goes on the kernel command line).
fn path_str(path: &Path) -> Result<String> {
    let s = path
        .to_str()
        .with_context(|| format!("path {} is not UTF-8", path.display()))?;
    if s.chars().any(char::is_whitespace) {
        bail!(
            "path {s:?} contains whitespace, which the guest's kernel command line cannot carry; \
             move the project or set VFNVME_VM_DIR"
        );
    }
    Ok(s.to_string())
}

fn print_tail(what: &str, tail: &[String], log: &Path) {
    eprintln!(
        "vfnvme vm: {what}: last {} console lines (full log: {}):",
        TAIL_LINES.min(tail.len()),
        log.display()
    );
    for line in tail {
        eprintln!("  | {line}");
    }
}
