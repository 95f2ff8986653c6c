//! `vfnvme perf`: a polled I/O benchmark on controllers bound to vfio-pci, or on the in-memory
//! model (`--model`) to try it on any host.

pub mod clock;
pub mod events;
pub mod options;
pub mod report;
pub mod worker;

use crate::open;
use crate::output::say;
use anyhow::{Context, Result};
use clap::Args;
use clock::{Clock, ClockKind};
use hdrhistogram::Histogram;
use options::{Pattern, PerfInputError};
use report::Summary;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use vfnvme::dma::DmaBuffer;
use vfnvme::model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform};
use vfnvme::platform::Platform;
use vfnvme::{Controller, ControllerOptions, Namespace, QpairOptions, QueuePair};
use worker::{WorkerPlan, WorkerResult};

/// Arguments of `vfnvme perf`.
#[derive(Args, Debug, Clone)]
pub struct PerfArgs {
    /// Controller(s) to measure, bound to vfio-pci (e.g. 0000:01:00.0); repeatable.
    #[arg(long = "device", value_name = "BDF")]
    pub devices: Vec<String>,
    /// Same as --device, given without the flag.
    #[arg(value_name = "BDF")]
    pub positional: Vec<String>,
    /// Measure the in-memory controller model (null namespace, 4 KiB LBAs) instead of a device.
    #[arg(long, conflicts_with_all = ["devices", "positional"])]
    pub model: bool,
    /// Namespace ID (default: the first active namespace).
    #[arg(long)]
    pub nsid: Option<u32>,
    /// I/Os kept outstanding per queue pair.
    #[arg(long, default_value_t = 32)]
    pub qd: u32,
    /// Bytes per I/O: a multiple of the LBA size; k/m suffixes (4k, 128k, 1m).
    #[arg(long = "io-size", default_value = "4096", value_parser = parse_size_arg)]
    pub io_size: u64,
    /// Access pattern.
    #[arg(long, value_enum, default_value_t = Pattern::Randread)]
    pub pattern: Pattern,
    /// Percentage of reads for --pattern randrw (default 50).
    #[arg(long = "rwmix-read", value_name = "PCT")]
    pub rwmix_read: Option<u8>,
    /// Measured seconds.
    #[arg(long, default_value_t = 5)]
    pub time: u64,
    /// Warm-up seconds before measuring.
    #[arg(long, default_value_t = 0)]
    pub ramp: u64,
    /// Threads per device, each with its own queue pair.
    #[arg(long, default_value_t = 1)]
    pub threads: u32,
    /// Also write the results as JSON to this file ("-" = standard output).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Use shadow doorbells (Doorbell Buffer Config) if the controller offers them (emulated
    /// controllers do; on QEMU 7.2 they measured slower, so perf leaves them off by default).
    #[arg(long, conflicts_with = "no_shadow_doorbells")]
    pub shadow_doorbells: bool,
    /// Do not use shadow doorbells (the default).
    #[arg(long)]
    pub no_shadow_doorbells: bool,
    /// Time the I/Os of every Nth completion batch only (1 = time every I/O). Saves clock
    /// reads where they are slow, e.g. the HPET clocksource of an emulated guest.
    #[arg(long = "lat-sample", value_name = "N", default_value_t = 1)]
    pub lat_sample: u32,
    /// Clock of the I/O loop: instant = the system clock (vDSO); tsc = the x86 time-stamp
    /// counter, its rate measured against the system clock over the run (cheaper where the
    /// system clock is slow, e.g. the HPET of an emulated guest); auto = tsc on x86_64.
    #[arg(long, value_enum, default_value_t = ClockKind::Instant)]
    pub clock: ClockKind,
    /// Seed of the random offsets.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

fn parse_size_arg(text: &str) -> Result<u64, String> {
    options::parse_size(text).map_err(|e| e.to_string())
}

/// Set by the SIGINT handler: the workers stop at their next clock read and perf prints what
/// they measured.
static STOP: LazyLock<Arc<AtomicBool>> = LazyLock::new(Arc::default);

/// Makes the first Ctrl-C (SIGINT) set [`STOP`] and a second one end the process (status 130,
/// for a run that does not stop). signal-hook keeps the handler's `unsafe` out of this crate.
fn stop_on_ctrl_c() {
    let registered = signal_hook::flag::register_conditional_shutdown(
        signal_hook::consts::SIGINT,
        130,
        STOP.clone(),
    )
    .and_then(|_| signal_hook::flag::register(signal_hook::consts::SIGINT, STOP.clone()));
    if let Err(e) = registered {
        log::warn!(
            "Ctrl-C will end perf without a report: could not install a SIGINT handler ({e})"
        );
    }
}

/// Opens the `--json` file before the run, so that a bad path fails at once.
fn open_json(path: &std::path::Path) -> Result<Option<std::fs::File>> {
    if path.as_os_str() == "-" {
        return Ok(None);
    }
    std::fs::File::create(path)
        .map(Some)
        .with_context(|| format!("opening the JSON report file {}", path.display()))
}

/// One queue pair's work, ready to run.
struct Job<P: Platform> {
    qp: QueuePair<P>,
    ns: Arc<Namespace>,
    buffers: Vec<DmaBuffer>,
    plan: WorkerPlan,
}

/// Checks what needs no device.
fn check_args(args: &PerfArgs) -> Result<u8, PerfInputError> {
    if !args.model && args.devices.is_empty() && args.positional.is_empty() {
        return Err(PerfInputError::NoTarget);
    }
    if args.qd == 0 {
        return Err(PerfInputError::ZeroQueueDepth);
    }
    if args.time == 0 {
        return Err(PerfInputError::ZeroTime);
    }
    for (what, seconds) in [("time", args.time), ("ramp", args.ramp)] {
        if seconds > options::MAX_SECONDS {
            return Err(PerfInputError::TooLong { what, seconds });
        }
    }
    if args.io_size == 0 {
        return Err(PerfInputError::ZeroIoSize);
    }
    if args.lat_sample == 0 {
        return Err(PerfInputError::ZeroLatSample);
    }
    if args.threads == 0 {
        return Err(PerfInputError::ZeroThreads);
    }
    if args.io_size > options::MAX_IO_SIZE {
        return Err(PerfInputError::IoSizeTooLarge { size: args.io_size });
    }
    options::check_memory(args.qd, args.io_size)?;
    options::check_rwmix(args.pattern, args.rwmix_read)
}

/// Picks the namespace and checks the I/O size and queue depth against the controller;
/// allocates the queue pairs and buffers of `threads` jobs.
fn prepare_jobs<P: Platform>(
    ctrl: &Controller<P>,
    name: &str,
    args: &PerfArgs,
    read_pct: u8,
    first_seed: u64,
) -> Result<Vec<Job<P>>> {
    let ns = match args.nsid {
        Some(nsid) => ctrl.namespace(nsid).ok_or_else(|| {
            let active: Vec<String> = ctrl
                .namespaces()
                .iter()
                .map(|n| n.nsid().to_string())
                .collect();
            PerfInputError::NoSuchNamespace {
                nsid,
                device: name.to_string(),
                active: if active.is_empty() {
                    "none".into()
                } else {
                    active.join(",")
                },
            }
        })?,
        // The first namespace that takes I/O; if none does, the first one (refused below).
        None => {
            let all = ctrl.namespaces();
            all.iter()
                .find(|n| !n.io_refused())
                .or(all.first())
                .cloned()
                .ok_or_else(|| PerfInputError::NoNamespace {
                    device: name.to_string(),
                })?
        }
    };
    // Refused before any command is sent (a metadata format would otherwise move the wrong
    // number of bytes, or metadata to address 0, on every I/O).
    if ns.io_refused() {
        return Err(PerfInputError::NamespaceRefused {
            device: name.to_string(),
            reason: vfnvme::SubmitErrorKind::MetadataUnsupported {
                nsid: ns.nsid(),
                metadata: ns.identity().metadata_format(),
            },
        }
        .into());
    }
    options::check_io_size(args.io_size, ns.nsid(), ns.lba_size(), ns.size_bytes())?;
    let info = ctrl.identify();
    let per_cmd = info.max_transfer_bytes.max(4096) as u64;
    let commands_per_io = args.io_size.div_ceil(per_cmd);
    let depth = options::queue_depth_for(args.qd, commands_per_io, info.max_queue_depth)?;
    if args.threads > u32::from(info.io_queue_pairs) {
        return Err(PerfInputError::TooManyThreads {
            threads: args.threads,
            device: name.to_string(),
            granted: info.io_queue_pairs,
        }
        .into());
    }
    let io_size = usize::try_from(args.io_size)?;
    let mut jobs = Vec::new();
    for t in 0..args.threads {
        let qp = ctrl
            .alloc_qpair(QpairOptions {
                depth,
                ..QpairOptions::default()
            })
            .with_context(|| {
                format!(
                    "creating I/O queue pair {} of depth {depth} on {name}",
                    t + 1
                )
            })?;
        let buffers = (0..args.qd)
            .map(|_| ctrl.dma().alloc(io_size))
            .collect::<Result<Vec<_>, _>>()
            .with_context(|| {
                format!(
                    "allocating {} DMA buffers of {io_size} bytes on {name} (reserve hugepages with `vfnvme setup --hugepages N`)",
                    args.qd
                )
            })?;
        jobs.push(Job {
            qp,
            ns: ns.clone(),
            buffers,
            plan: WorkerPlan {
                qd: args.qd,
                io_size: args.io_size,
                pattern: args.pattern,
                read_pct,
                ramp: Duration::from_secs(args.ramp),
                time: Duration::from_secs(args.time),
                seed: first_seed.wrapping_add(u64::from(t)),
                lat_sample: args.lat_sample,
                stop: Some(&**STOP),
            },
        });
    }
    Ok(jobs)
}

/// Runs every job on its own thread (the first on the calling thread), while another thread
/// reaps the controllers' asynchronous events and reports namespace changes.
fn run_jobs<P: Platform>(
    jobs: Vec<Job<P>>,
    clock: &Clock,
    watched: Vec<events::Watched<'_, P>>,
) -> Result<Vec<WorkerResult>> {
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let done = &done;
        let watcher = s.spawn(move || events::watch(&watched, done));
        let results = run_workers(jobs, clock);
        done.store(true, std::sync::atomic::Ordering::Release);
        watcher.thread().unpark();
        let _ = watcher.join();
        results
    })
}

/// Runs every job on its own thread (the first on the calling thread).
fn run_workers<P: Platform>(jobs: Vec<Job<P>>, clock: &Clock) -> Result<Vec<WorkerResult>> {
    let mut jobs = jobs.into_iter();
    let Some(first) = jobs.next() else {
        return Ok(Vec::new());
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .map(|mut j| s.spawn(move || worker::run(&mut j.qp, &j.ns, j.buffers, &j.plan, clock)))
            .collect();
        let mut first = first;
        let mut results = vec![worker::run(
            &mut first.qp,
            &first.ns,
            first.buffers,
            &first.plan,
            clock,
        )?];
        for h in handles {
            let r = h
                .join()
                .map_err(|_| anyhow::anyhow!("a perf worker thread panicked"))??;
            results.push(r);
        }
        Ok(results)
    })
}

fn controller_options(args: &PerfArgs) -> ControllerOptions {
    ControllerOptions {
        shadow_doorbells: args.shadow_doorbells,
        io_queues: u16::try_from(args.threads).unwrap_or(u16::MAX).max(1),
        ..ControllerOptions::default()
    }
}

/// The model `--model` measures: one null namespace of 4 KiB LBAs (reads move no data).
pub fn model_config() -> ModelConfig {
    ModelConfig {
        namespaces: vec![ModelNamespaceConfig {
            nsid: 1,
            blocks: 1 << 28,
            lba_size: 4096,
            backing: Backing::Null,
        }],
        serial: "VFNVME-MODEL".into(),
        ..ModelConfig::default()
    }
}

/// Runs `vfnvme perf`: prints the report, writes the JSON if asked. Fails on bad input, on
/// device errors, and if any I/O failed.
pub fn run(args: &PerfArgs) -> Result<()> {
    let read_pct = check_args(args)?;
    let mut json_file = match &args.json {
        Some(p) => open_json(p)?,
        None => None,
    };
    stop_on_ctrl_c();
    let mut summary = Summary {
        targets: Vec::new(),
        nsid: 0,
        pattern: args.pattern.name(),
        read_pct,
        io_size: args.io_size,
        qd: args.qd,
        workers: 0,
        time_s: args.time as f64,
        ramp_s: args.ramp as f64,
        shadow_doorbells: false,
        reads: 0,
        writes: 0,
        errors: 0,
        first_error: None,
        batches: 0,
        latency: Histogram::new(3)?,
        ns_per_unit: 1.0,
        clock: "",
        interrupted: false,
    };
    let clock = Clock::start(args.clock);
    let results = if args.model {
        let platform = ModelPlatform::new(model_config()).context("creating the model")?;
        let ctrl = open::open_platform(platform, "model", controller_options(args))?;
        let jobs = prepare_jobs(&ctrl, "model", args, read_pct, args.seed)?;
        describe(&mut summary, "model".into(), &jobs);
        run_jobs(jobs, &clock, vec![events::Watched::new(&ctrl, "model")])?
    } else {
        let bdfs: Vec<&String> = args.devices.iter().chain(&args.positional).collect();
        let mut ctrls = Vec::new();
        for bdf in &bdfs {
            ctrls.push((open::open_controller(bdf, controller_options(args))?, *bdf));
        }
        let mut jobs = Vec::new();
        for (i, (ctrl, bdf)) in ctrls.iter().enumerate() {
            let seed = args.seed.wrapping_add((i as u64) << 32);
            let mut j = prepare_jobs(ctrl, bdf, args, read_pct, seed)?;
            describe(&mut summary, bdf.to_string(), &j);
            jobs.append(&mut j);
        }
        let watched: Vec<_> = ctrls
            .iter()
            .map(|(ctrl, bdf)| events::Watched::new(ctrl, bdf))
            .collect();
        let results = run_jobs(jobs, &clock, watched)?;
        drop(ctrls);
        results
    };
    summary.ns_per_unit = clock.ns_per_unit();
    // The measured window is `time` in clock units by the start-up rate estimate; in real
    // seconds by the rate measured over the whole run.
    summary.time_s =
        clock.units(args.time.saturating_mul(1_000_000_000)) as f64 * summary.ns_per_unit / 1e9;
    summary.clock = if clock.is_tsc() { "tsc" } else { "instant" };
    if results.iter().any(|r| r.stopped) {
        // Stopped by Ctrl-C: the window each worker measured, the longest of them.
        let units = results.iter().map(|r| r.measured_units).max().unwrap_or(0);
        summary.time_s = units as f64 * summary.ns_per_unit / 1e9;
        summary.interrupted = true;
    }
    let summary = summary.merge(results)?;
    let json_to_stdout = args.json.as_ref().is_some_and(|p| p.as_os_str() == "-");
    if json_to_stdout {
        // Standard output carries only the JSON.
        eprintln!("{}", summary.text());
    } else {
        say!("{}", summary.text());
    }
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&summary.json())?;
        if let Some(f) = json_file.as_mut() {
            use std::io::Write;
            f.write_all((text + "\n").as_bytes())
                .with_context(|| format!("writing the JSON report to {}", path.display()))?;
        } else {
            say!("{text}");
        }
    }
    if summary.errors > 0 {
        anyhow::bail!(
            "{} I/Os failed (first: {}): check the namespace's state and the controller's error log",
            summary.errors,
            summary.first_error.as_deref().unwrap_or("unknown")
        );
    }
    Ok(())
}

fn describe<P: Platform>(summary: &mut Summary, target: String, jobs: &[Job<P>]) {
    summary.targets.push(target);
    summary.workers += jobs.len();
    if let Some(j) = jobs.first() {
        summary.nsid = j.ns.nsid();
        summary.shadow_doorbells = j.qp.uses_shadow_doorbells();
    }
}
