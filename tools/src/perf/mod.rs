//! `vfnvme perf`: a polled I/O benchmark on controllers bound to vfio-pci, or on the in-memory
//! model (`--model`) to try it on any host.

pub mod clock;
pub mod cpus;
pub mod events;
pub mod multipath;
pub mod options;
pub mod path_counts;
pub mod percentiles;
pub mod progress;
pub mod report;
pub mod rows;
pub mod spdk_args;
pub mod spdk_text;
pub mod transport_stats;
pub mod trid;
pub mod worker;
pub mod zipf;

use crate::open;
use crate::output::say;
use anyhow::{Context, Result};
use clap::Args;
use clock::{Clock, ClockKind};
use hdrhistogram::Histogram;
use options::{Pattern, PerfInputError};
use report::Summary;
use rows::{Detail, RowId};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use vfnvme::hal::DmaBuffer;
use vfnvme::platform::Platform;
use vfnvme::{Controller, ControllerOptions, Namespace, QpairOptions, QueuePair};
#[cfg(feature = "model")]
use vfnvme_model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform};
use worker::{WorkerPlan, WorkerResult};

/// Arguments of `vfnvme perf`. spdk_nvme_perf's flags work too: its short flags are the
/// short forms of the same options (`-q` is `--qd`), so giving both is refused as a duplicate.
#[derive(Args, Debug, Clone)]
pub struct PerfArgs {
    /// Controller(s) to measure, bound to vfio-pci (e.g. 0000:01:00.0); repeatable.
    #[arg(long = "device", value_name = "BDF")]
    pub devices: Vec<String>,
    /// Same as --device, given without the flag.
    #[arg(value_name = "BDF")]
    pub positional: Vec<String>,
    /// spdk_nvme_perf's transport ID, e.g. 'trtype:PCIe traddr:0000:00:04.0' (ns:N picks the
    /// namespace); PCIe only; repeatable. Same as --device BDF.
    #[arg(short = 'r', long = "transport-id", alias = "transport", value_name = "TRID", value_parser = parse_trid_arg)]
    pub trids: Vec<trid::TransportId>,
    /// spdk_nvme_perf's allowed PCI address: same as --device BDF.
    #[arg(short = 'b', long = "allowed-pci-addr", value_name = "BDF")]
    pub allowed: Vec<String>,
    /// Measure the in-memory controller model (two null namespaces, 4 KiB LBAs) instead of a
    /// device.
    #[arg(long, conflicts_with_all = ["devices", "positional", "trids", "allowed"])]
    pub model: bool,
    /// With --model: measure a multipath head of a model subsystem of N controllers (paths)
    /// sharing the namespaces, every path ANA optimized; the report adds the I/Os per path.
    #[arg(long, value_name = "N", requires = "model")]
    pub paths: Option<u16>,
    /// Measure a multipath head through these controllers of one NVM subsystem (bound to
    /// vfio-pci; opened in one VFIO container), e.g. 0000:00:10.0+0000:00:11.0; --nsid picks
    /// the namespace (default: the first head). The report adds the I/Os per path.
    #[arg(long, value_name = "BDF+BDF", conflicts_with_all = ["devices", "positional", "model"])]
    pub head: Option<String>,
    /// Path selection policy on a multipath head (--head, or --model --paths N): numa (the
    /// first optimized path on the thread's node), round-robin, or queue-depth (fewest
    /// outstanding); default numa.
    #[arg(long, value_parser = multipath::parse_policy)]
    pub policy: Option<vfnvme::multipath::PathPolicy>,
    /// Namespace ID (default: the first active namespace); repeatable: each namespace gets
    /// its own threads and queue pairs.
    #[arg(long)]
    pub nsid: Vec<u32>,
    /// I/Os kept outstanding per queue pair (spdk_nvme_perf: -q, --io-depth).
    #[arg(short = 'q', long, alias = "io-depth", default_value_t = 32)]
    pub qd: u32,
    /// Bytes per I/O: a multiple of the LBA size; k/m suffixes (4k, 128k, 1m)
    /// (spdk_nvme_perf: -o).
    #[arg(short = 'o', long = "io-size", default_value = "4096", value_parser = parse_size_arg)]
    pub io_size: u64,
    /// Access pattern (spdk_nvme_perf: -w, --io-pattern).
    #[arg(short = 'w', long, alias = "io-pattern", value_enum, default_value_t = Pattern::Randread)]
    pub pattern: Pattern,
    /// Percentage of reads for --pattern rw or randrw (default 50) (spdk_nvme_perf: -M,
    /// --rwmixread).
    #[arg(
        short = 'M',
        long = "rwmix-read",
        alias = "rwmixread",
        value_name = "PCT"
    )]
    pub rwmix_read: Option<u8>,
    /// Measured seconds (spdk_nvme_perf: -t).
    #[arg(short = 't', long, default_value_t = 5)]
    pub time: u64,
    /// Warm-up seconds before measuring (spdk_nvme_perf: -a, --warmup-time).
    #[arg(short = 'a', long, alias = "warmup-time", default_value_t = 0)]
    pub ramp: u64,
    /// Threads per namespace, each with its own queue pair (default 1, or one per core of
    /// --cpus).
    #[arg(long)]
    pub threads: Option<u32>,
    /// Cores to run the threads on: a list (0,1 or 0-3,6), a list in brackets ([0-1]) or a
    /// hex mask (0x3); thread i of each namespace is pinned to the i-th core.
    #[arg(long, value_name = "LIST", value_parser = parse_cpus_arg)]
    pub cpus: Option<cpus::CpuList>,
    /// spdk_nvme_perf's core mask: hex with or without 0x (0x3 and 3 are cores 0 and 1) or a
    /// list in brackets ([0-1]); otherwise as --cpus.
    #[arg(short = 'c', long = "core-mask", value_name = "MASK", value_parser = parse_core_mask_arg, conflicts_with = "cpus")]
    pub core_mask: Option<cpus::CpuList>,
    /// Latency percentiles (1% … 99.99999%) per row; give twice (-LL) for the whole histogram
    /// (spdk_nvme_perf: -L, -LL).
    #[arg(short = 'L', long = "latency-percentiles", alias = "enable-sw-latency-tracking", action = clap::ArgAction::Count)]
    pub latency: u8,
    /// The whole latency histogram (bucket range, cumulative %, count), as -LL.
    #[arg(long)]
    pub histogram: bool,
    /// Transport statistics per queue pair: polls, idle polls, completions, submitted and
    /// queued requests, MMIO and shadow doorbell updates of SQ and CQ.
    #[arg(long = "transport-stats")]
    pub transport_stats: bool,
    /// Stop each queue pair after N I/Os (the ramp's included), or at --time, whichever is
    /// first (spdk_nvme_perf: -d, --number-ios).
    #[arg(short = 'd', long, alias = "number-ios", value_name = "N")]
    pub ios: Option<u64>,
    /// Zipf-distributed random offsets with skew THETA (e.g. 1.2; > 0, not 1), as fio's
    /// random_distribution=zipf (spdk_nvme_perf: -F).
    #[arg(short = 'F', long, value_name = "THETA")]
    pub zipf: Option<f64>,
    /// Count failed I/Os and keep going (exit status 0); without it the first failure ends
    /// the run with an error.
    #[arg(long = "continue-on-error")]
    pub continue_on_error: bool,
    /// spdk_nvme_perf's -Q N: as --continue-on-error (vfnvme counts every failure and reports
    /// the first; N, SPDK's logging interval, changes nothing).
    #[arg(short = 'Q', value_name = "N", conflicts_with = "continue_on_error")]
    pub continue_every: Option<u64>,
    /// Entries of each queue pair's rings (up to CAP.MQES+1), as many commands in flight at
    /// most (less one). Default: 1024 entries where it fits, with room for twice the I/Os in
    /// flight (at least 63 commands); fewer CQ head doorbell writes. Smaller than --qd + 1
    /// holds I/Os back until a slot frees (counted as queued requests).
    #[arg(long = "queue-size", alias = "io-queue-size", value_name = "N")]
    pub queue_size: Option<u32>,
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
    /// system clock is slow, e.g. the HPET of an emulated guest); auto = tsc on x86_64 when
    /// the kernel's clocksource is not one the vDSO reads (e.g. hpet, acpi_pm).
    #[arg(long, value_enum, default_value_t = ClockKind::Auto)]
    pub clock: ClockKind,
    /// Seed of the random offsets.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

fn parse_cpus_arg(text: &str) -> Result<cpus::CpuList, String> {
    cpus::parse(text)
        .map(cpus::CpuList)
        .map_err(|e| e.to_string())
}

fn parse_core_mask_arg(text: &str) -> Result<cpus::CpuList, String> {
    cpus::parse_core_mask(text)
        .map(cpus::CpuList)
        .map_err(|e| e.to_string())
}

fn parse_trid_arg(text: &str) -> Result<trid::TransportId, String> {
    trid::parse(text).map_err(|e| e.to_string())
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
    id: RowId,
    progress: Arc<progress::Counter>,
}

impl PerfArgs {
    /// Threads per namespace.
    fn threads(&self) -> u32 {
        self.threads
            .unwrap_or_else(|| self.cpus.as_ref().map_or(1, |c| c.0.len().max(1) as u32))
    }

    /// Queue pairs per controller.
    fn queue_pairs(&self) -> u32 {
        self.threads().saturating_mul(self.nsid.len().max(1) as u32)
    }
}

/// Checks what needs no device.
fn check_args(args: &PerfArgs) -> Result<u8> {
    if !args.model && args.devices.is_empty() && args.positional.is_empty() && args.head.is_none() {
        return Err(PerfInputError::NoTarget.into());
    }
    if let (Some(p), None, None) = (args.policy, args.paths, &args.head) {
        return Err(multipath::HeadInputError::PolicyWithoutHead {
            policy: p.to_string(),
        }
        .into());
    }
    Ok(check_io_args(args)?)
}

/// Checks the I/O parameters.
fn check_io_args(args: &PerfArgs) -> Result<u8, PerfInputError> {
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
    if args.threads() == 0 {
        return Err(PerfInputError::ZeroThreads);
    }
    if args.ios == Some(0) {
        return Err(PerfInputError::ZeroIos);
    }
    if let Some(theta) = args.zipf {
        zipf::check_theta(theta)?;
        if !args.pattern.is_random() {
            return Err(PerfInputError::ZipfNotRandom {
                pattern: args.pattern.name(),
            });
        }
    }
    if args.io_size > options::MAX_IO_SIZE {
        return Err(PerfInputError::IoSizeTooLarge { size: args.io_size });
    }
    options::check_memory(args.qd, args.io_size)?;
    options::check_rwmix(args.pattern, args.rwmix_read)
}

/// The namespaces to measure on `ctrl`: those of `--nsid`, or the first active one.
fn pick_namespaces<P: Platform>(
    ctrl: &Controller<P>,
    name: &str,
    nsids: &[u32],
) -> Result<Vec<Arc<Namespace>>, PerfInputError> {
    // Refused before any command is sent: a format vfnvme can't read or write (its metadata is
    // moved as it is; a block size or PI the driver refuses shows here).
    let usable = |ns: Arc<Namespace>| {
        if ns.io_refused() && ns.identity().metadata_size == 0 {
            return Err(PerfInputError::NamespaceRefused {
                device: name.to_string(),
                reason: vfnvme::SubmitErrorKind::MetadataUnsupported {
                    nsid: ns.nsid(),
                    metadata: ns.identity().metadata_format(),
                },
            });
        }
        Ok(ns)
    };
    if nsids.is_empty() {
        // The first namespace without metadata; if none, the first one.
        let all = ctrl.namespaces();
        let ns = all
            .iter()
            .find(|n| !n.io_refused())
            .or(all.first())
            .cloned()
            .ok_or_else(|| PerfInputError::NoNamespace {
                device: name.to_string(),
            })?;
        return usable(ns).map(|ns| vec![ns]);
    }
    nsids
        .iter()
        .map(|&nsid| {
            ctrl.namespace(nsid)
                .ok_or_else(|| {
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
                })
                .and_then(usable)
        })
        .collect()
}

/// Picks the namespaces and checks the I/O size and queue depth against the controller;
/// allocates the queue pairs and buffers of `threads` jobs per namespace.
fn prepare_jobs<P: Platform>(
    ctrl: &Controller<P>,
    name: &str,
    args: &PerfArgs,
    read_pct: u8,
    first_seed: u64,
) -> Result<Vec<Job<P>>> {
    let namespaces = pick_namespaces(ctrl, name, &args.nsid)?;
    let info = ctrl.identify();
    let per_cmd = info.max_transfer_bytes.max(4096) as u64;
    let commands_per_io = args.io_size.div_ceil(per_cmd);
    let (depth, max_in_flight) = options::ring_and_in_flight(
        args.queue_size,
        args.qd,
        commands_per_io,
        info.max_queue_depth,
    )?;
    let threads = args.threads();
    if args.queue_pairs() > u32::from(info.io_queue_pairs) {
        return Err(PerfInputError::TooManyThreads {
            threads,
            namespaces: namespaces.len() as u32,
            device: name.to_string(),
            granted: info.io_queue_pairs,
        }
        .into());
    }
    let io_size = usize::try_from(args.io_size)?;
    let mut jobs = Vec::new();
    for ns in &namespaces {
        options::check_io_size(args.io_size, ns.nsid(), ns.lba_size(), ns.size_bytes())?;
        for t in 0..threads {
            let n = jobs.len() as u64;
            let qp = ctrl
                .alloc_qpair(QpairOptions {
                    depth,
                    max_in_flight,
                    ..QpairOptions::default()
                })
                .with_context(|| {
                    format!(
                        "creating I/O queue pair {} of depth {depth} on {name}",
                        n + 1
                    )
                })?;
            // A format with metadata: room for it after the data (extended LBAs interleave it,
            // a separate buffer's metadata goes after the data: the same length either way).
            let buf_len = io_size + worker::metadata_bytes(ns, io_size);
            let buffers = (0..args.qd)
                .map(|_| ctrl.dma().alloc(buf_len))
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| {
                    format!(
                        "allocating {} DMA buffers of {io_size} bytes on {name} (reserve hugepages with `vfnvme setup --hugepages N`)",
                        args.qd
                    )
                })?;
            let cpu = args
                .cpus
                .as_ref()
                .and_then(|c| c.0.get(t as usize % c.0.len().max(1)).copied());
            jobs.push(Job {
                qp,
                ns: ns.clone(),
                buffers,
                plan: plan_for(args, read_pct, first_seed.wrapping_add(n)),
                id: RowId {
                    target: name.to_string(),
                    nsid: ns.nsid(),
                    thread: t,
                    cpu,
                    ran_on: None,
                },
                progress: Arc::default(),
            });
        }
    }
    Ok(jobs)
}

/// Runs every job on its own thread (the first on the calling thread), while another thread
/// reaps the controllers' asynchronous events and reports namespace changes, and (on a
/// terminal) one prints IOPS and MiB/s each second.
fn run_jobs<P: Platform>(
    jobs: Vec<Job<P>>,
    clock: &Clock,
    watched: Vec<events::Watched<'_, P>>,
    show_progress: bool,
) -> Result<Vec<(RowId, WorkerResult)>> {
    let done = std::sync::atomic::AtomicBool::new(false);
    let counters: Vec<_> = jobs.iter().map(|j| j.progress.clone()).collect();
    let io_size = jobs.first().map_or(0, |j| j.plan.io_size);
    std::thread::scope(|s| {
        let done = &done;
        let watcher = s.spawn(move || events::watch(&watched, done));
        let printer = show_progress.then(|| s.spawn(|| progress::run(&counters, io_size, done)));
        let results = run_workers(jobs, clock);
        done.store(true, std::sync::atomic::Ordering::Release);
        watcher.thread().unpark();
        let _ = watcher.join();
        if let Some(p) = printer {
            p.thread().unpark();
            let _ = p.join();
        }
        results
    })
}

/// Runs one job on the calling thread, pinned to its core if it has one.
fn run_job<P: Platform>(mut j: Job<P>, clock: &Clock) -> Result<(RowId, WorkerResult)> {
    if let Some(cpu) = j.id.cpu {
        cpus::pin(cpu)?;
    }
    // The worker's own copy of the clock (read at every batch), on its own stack rather than
    // in a frame of the main thread, which runs another worker.
    let clock = *clock;
    let r = worker::run(
        &mut j.qp,
        &j.ns,
        j.buffers,
        &j.plan,
        &clock,
        Some(&j.progress),
    )?;
    j.id.ran_on = j.id.cpu.or_else(cpus::current);
    Ok((j.id, r))
}

/// Runs every job on its own thread (the first on the calling thread).
fn run_workers<P: Platform>(
    jobs: Vec<Job<P>>,
    clock: &Clock,
) -> Result<Vec<(RowId, WorkerResult)>> {
    let mut jobs = jobs.into_iter();
    let Some(first) = jobs.next() else {
        return Ok(Vec::new());
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = jobs.map(|j| s.spawn(move || run_job(j, clock))).collect();
        let mut results = vec![run_job(first, clock)?];
        for h in handles {
            let r = h
                .join()
                .map_err(|_| anyhow::anyhow!("a perf worker thread panicked"))??;
            results.push(r);
        }
        Ok(results)
    })
}

/// What each worker does, with its own seed.
fn plan_for(args: &PerfArgs, read_pct: u8, seed: u64) -> WorkerPlan {
    WorkerPlan {
        qd: args.qd,
        io_size: args.io_size,
        pattern: args.pattern,
        read_pct,
        ramp: Duration::from_secs(args.ramp),
        time: Duration::from_secs(args.time),
        seed,
        lat_sample: args.lat_sample,
        stop: Some(&**STOP),
        ios_limit: args.ios.unwrap_or(0),
        zipf: args.zipf,
        continue_on_error: args.continue_on_error,
    }
}

fn controller_options(args: &PerfArgs) -> ControllerOptions {
    ControllerOptions {
        shadow_doorbells: args.shadow_doorbells,
        io_queues: u16::try_from(args.queue_pairs()).unwrap_or(u16::MAX).max(1),
        ..ControllerOptions::default()
    }
}

/// The model `--model` measures: two null namespaces of 4 KiB LBAs (reads move no data).
#[cfg(feature = "model")]
pub fn model_config() -> ModelConfig {
    ModelConfig {
        namespaces: (1..=2)
            .map(|nsid| ModelNamespaceConfig {
                nsid,
                blocks: 1 << 28,
                lba_size: 4096,
                backing: Backing::Null,
            })
            .collect(),
        serial: "VFNVME-MODEL".into(),
        ..ModelConfig::default()
    }
}

/// Runs `vfnvme perf`: prints the report, writes the JSON if asked. Fails on bad input, on
/// device errors, and if any I/O failed (unless `--continue-on-error`).
pub fn run(args: &PerfArgs) -> Result<()> {
    let args = &spdk_args::resolve(args)?;
    let read_pct = check_args(args)?;
    if let Some(c) = &args.cpus {
        cpus::check(&c.0)?;
    }
    let mut json_file = match &args.json {
        Some(p) => open_json(p)?,
        None => None,
    };
    let json_to_stdout = args.json.as_ref().is_some_and(|p| p.as_os_str() == "-");
    let show_progress = !json_to_stdout && std::io::stdout().is_terminal();
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
        clock: String::new(),
        interrupted: false,
        rows: Vec::new(),
        detail: Detail {
            latency: if args.histogram {
                2
            } else {
                args.latency.min(2)
            },
            transport: args.transport_stats,
        },
        ios_limit: args.ios.unwrap_or(0),
        zipf: args.zipf,
        continue_on_error: args.continue_on_error,
        queue_size: 0,
        paths: None,
    };
    let clock = Clock::start(args.clock);
    let results = if let (true, Some(paths)) = (args.model, args.paths) {
        run_on_model_head(args, paths, read_pct, &mut summary, &clock, show_progress)?
    } else if args.model {
        run_on_model(args, read_pct, &mut summary, &clock, show_progress)?
    } else if let Some(head) = &args.head {
        let (mp, name) = open::open_head(head, controller_options(args))?;
        let policy = args.policy.unwrap_or_default();
        multipath::run_head(
            &mp,
            &name,
            args,
            policy,
            read_pct,
            &mut summary,
            &clock,
            show_progress,
        )?
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
        let results = run_jobs(jobs, &clock, watched, show_progress)?;
        drop(ctrls);
        results
    };
    summary.ns_per_unit = clock.ns_per_unit();
    // The measured window: the longest any worker measured (the planned time, or less when
    // Ctrl-C, the I/O limit or a failure ended it), in real seconds by the clock's rate over
    // the whole run.
    let units = results
        .iter()
        .map(|(_, r)| r.measured_units)
        .max()
        .unwrap_or(0);
    summary.time_s = units as f64 * summary.ns_per_unit / 1e9;
    summary.clock = format!(
        "{} (clocksource {})",
        if clock.is_tsc() { "tsc" } else { "instant" },
        clock::current_clocksource().unwrap_or_else(|| "unknown".into())
    );
    summary.interrupted = results.iter().any(|(_, r)| r.stopped);
    let summary = summary.merge(results)?;
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
    if summary.errors > 0 && !args.continue_on_error {
        anyhow::bail!(
            "{} I/Os failed (first: {}): check the namespace's state and the controller's error log (--continue-on-error counts failures and goes on)",
            summary.errors,
            summary.first_error.as_deref().unwrap_or("unknown")
        );
    }
    Ok(())
}

/// `--model`: the run on the in-memory controller.
#[cfg(feature = "model")]
fn run_on_model(
    args: &PerfArgs,
    read_pct: u8,
    summary: &mut Summary,
    clock: &Clock,
    show_progress: bool,
) -> Result<Vec<(RowId, WorkerResult)>> {
    let platform = ModelPlatform::new(model_config()).context("creating the model")?;
    let ctrl = open::open_platform(platform, "model", controller_options(args))?;
    let jobs = prepare_jobs(&ctrl, "model", args, read_pct, args.seed)?;
    describe(summary, "model".into(), &jobs);
    run_jobs(
        jobs,
        clock,
        vec![events::Watched::new(&ctrl, "model")],
        show_progress,
    )
}

/// `--model --paths N`: the run on a head of a model subsystem of N controllers.
#[cfg(feature = "model")]
fn run_on_model_head(
    args: &PerfArgs,
    paths: u16,
    read_pct: u8,
    summary: &mut Summary,
    clock: &Clock,
    show_progress: bool,
) -> Result<Vec<(RowId, WorkerResult)>> {
    use vfnvme::multipath::{HeadOptions, Subsystem};
    let model = crate::model_subsys::build(paths, &[])?;
    let ctrls = crate::model_subsys::bring_up(&model, &controller_options(args))?;
    let policy = args.policy.unwrap_or_default();
    let mp = Subsystem::from_controllers(
        ctrls,
        HeadOptions {
            policy,
            ..HeadOptions::default()
        },
    )
    .context("forming the model subsystem's heads")?;
    let name = format!("model head ({paths} paths)");
    multipath::run_head(
        &mp,
        &name,
        args,
        policy,
        read_pct,
        summary,
        clock,
        show_progress,
    )
}

/// `--model` in a build without the model: a typed refusal saying how to get it.
#[cfg(not(feature = "model"))]
fn run_on_model_head(
    _args: &PerfArgs,
    _paths: u16,
    _read_pct: u8,
    _summary: &mut Summary,
    _clock: &Clock,
    _show_progress: bool,
) -> Result<Vec<(RowId, WorkerResult)>> {
    run_on_model(_args, _read_pct, _summary, _clock, _show_progress)
}

/// `--model` in a build without the model: a typed refusal saying how to get it.
#[cfg(not(feature = "model"))]
fn run_on_model(
    _args: &PerfArgs,
    _read_pct: u8,
    _summary: &mut Summary,
    _clock: &Clock,
    _show_progress: bool,
) -> Result<Vec<(RowId, WorkerResult)>> {
    anyhow::bail!(
        "--model: this vfnvme was built without the in-memory model; rebuild with \
         `cargo build -p vfnvme-tools --features model` (on by default)"
    )
}

fn describe<P: Platform>(summary: &mut Summary, target: String, jobs: &[Job<P>]) {
    summary.targets.push(target);
    summary.workers += jobs.len();
    if let Some(j) = jobs.first() {
        summary.nsid = j.ns.nsid();
        summary.shadow_doorbells = j.qp.uses_shadow_doorbells();
        summary.queue_size = j.qp.depth();
    }
}

#[cfg(all(test, feature = "model"))]
mod namespace_tests {
    use super::*;
    use vfnvme_model::ModelMetadata;

    /// Namespace 1 formatted with 8 B of extended metadata, namespace 2 without.
    fn ctrl() -> Controller<ModelPlatform> {
        let mut cfg = model_config();
        cfg.namespace_metadata = vec![(
            1,
            ModelMetadata {
                ms: 8,
                extended: true,
                pi: 0,
            },
        )];
        Controller::new(
            ModelPlatform::new(cfg).unwrap(),
            ControllerOptions::default(),
        )
        .unwrap()
    }

    #[test]
    fn metadata_namespaces_run_when_asked_for_and_are_skipped_by_default() {
        let c = ctrl();
        let picked = pick_namespaces(&c, "model", &[]).unwrap();
        assert_eq!(picked.iter().map(|n| n.nsid()).collect::<Vec<_>>(), [2]);
        for nsids in [&[1u32][..], &[2, 1]] {
            let picked = pick_namespaces(&c, "model", nsids).unwrap();
            assert_eq!(picked.iter().map(|n| n.nsid()).collect::<Vec<_>>(), nsids);
        }
    }
}
