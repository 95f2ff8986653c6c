//! `vfnvme perf` on a multipath head: each worker does its I/O through its own
//! [`IoChannel`] (one queue pair per path, a path per request by the head's policy), while a
//! control thread polls the subsystem (ANA changes, lost controllers). The report adds the
//! I/Os each path carried.

use super::clock::Clock;
use super::options::{self, PerfInputError};
use super::path_counts::PathCounts;
use super::progress::{self, Counter};
use super::report::Summary;
use super::rows::RowId;
use super::worker::{self, IoFailure, IoTarget, WorkerResult};
use super::{plan_for, PerfArgs};
use anyhow::{bail, Context, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use vfnvme::hal::DmaBuffer;
use vfnvme::multipath::{
    ChannelError, ChannelOptions, Head, IoChannel, PathPolicy, Subsystem, MAX_PATHS,
};
use vfnvme::platform::Platform;
use vfnvme::{DoorbellStats, QpairOptions};

/// How often the control thread polls the subsystem.
const CONTROL_PERIOD: Duration = Duration::from_millis(10);

/// Bad input for a run on a head.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum HeadInputError {
    /// `--policy` without a head to apply it to.
    #[error("--policy {policy} applies to a multipath head: add --paths N to --model (a model subsystem of N controllers), or give --head BDF+BDF on devices")]
    PolicyWithoutHead {
        /// The policy given.
        policy: String,
    },
    /// No head for the namespace.
    #[error("namespace {nsid} has no multipath head in subsystem {nqn}: its heads are {heads}; see `vfnvme list --subsystems`")]
    NoSuchHead {
        /// The namespace asked for.
        nsid: u32,
        /// The subsystem.
        nqn: String,
        /// The nsids that have heads.
        heads: String,
    },
    /// Several heads under one nsid (the controllers disagree about its identifier).
    #[error("namespace {nsid} has {count} heads in subsystem {nqn}: its controllers report different identifiers (NGUID/EUI64/UUID), so vfnvme keeps them apart and can't measure one head; see `vfnvme list --subsystems`")]
    AmbiguousHead {
        /// The namespace asked for.
        nsid: u32,
        /// The subsystem.
        nqn: String,
        /// How many heads it has.
        count: usize,
    },
    /// The head has no usable path when the run starts.
    #[error("namespace {nsid} has no usable path now (paths: {paths}): every path is inaccessible, in transition or gone; see `vfnvme list --subsystems`")]
    NoUsablePath {
        /// The namespace.
        nsid: u32,
        /// Each path's controller and state.
        paths: String,
    },
}

/// Parses `--policy`: the Linux names; an unknown one lists the valid ones.
pub fn parse_policy(text: &str) -> Result<PathPolicy, String> {
    text.parse::<PathPolicy>().map_err(|e| e.to_string())
}

/// A multipath channel as the measuring loop's target.
pub struct ChannelTarget<P: Platform> {
    ch: IoChannel<P>,
}

impl<P: Platform> IoTarget for ChannelTarget<P> {
    #[inline]
    fn submit(
        &mut self,
        read: bool,
        lba: u64,
        blocks: u32,
        buf: DmaBuffer,
        tag: u64,
    ) -> Result<Option<DmaBuffer>> {
        let r = if read {
            self.ch.read(lba, blocks, buf, tag)
        } else {
            self.ch.write(lba, blocks, buf, tag)
        };
        match r {
            Ok(()) => Ok(None),
            Err(e) if matches!(e.error, ChannelError::ChannelFull { .. }) => match e.buffer {
                Some(buf) => Ok(Some(buf)),
                None => bail!("the channel kept no buffer of a refused I/O"),
            },
            Err(e) => Err(e.error.into()),
        }
    }
    #[inline]
    fn commit(&mut self) {
        self.ch.commit();
    }
    #[inline]
    fn poll<F: FnMut(u64, Option<IoFailure>, Option<DmaBuffer>)>(
        &mut self,
        max: usize,
        mut f: F,
    ) -> usize {
        self.ch.poll(max, |c| {
            f(c.tag, c.result.err().map(IoFailure::Channel), c.buffer);
        })
    }
    fn outstanding(&self) -> usize {
        self.ch.outstanding()
    }
    fn qid(&self) -> u16 {
        0
    }
    fn doorbell_stats(&self) -> Option<DoorbellStats> {
        None
    }
    fn per_path(&self) -> Vec<u64> {
        self.ch.stats().per_path
    }
}

/// One worker on a head, ready to run.
pub struct HeadJob<P: Platform> {
    target: ChannelTarget<P>,
    blocks: u64,
    lba_shift: u32,
    buffers: Vec<DmaBuffer>,
    plan: worker::WorkerPlan,
    /// The row it reports as.
    pub id: RowId,
    /// Entries of each of its queue pairs' rings.
    pub depth: u32,
    progress: Arc<Counter>,
}

/// The one head of `nsid`, checked: it exists, is not ambiguous, and has a usable path.
fn head_of<P: Platform>(mp: &Subsystem<P>, nsid: u32) -> Result<Arc<Head>, HeadInputError> {
    let heads = mp.heads_for(nsid);
    match heads.len() {
        0 => {
            let mut all: Vec<String> = mp.heads().iter().map(|h| h.nsid().to_string()).collect();
            all.dedup();
            Err(HeadInputError::NoSuchHead {
                nsid,
                nqn: mp.nqn().to_string(),
                heads: if all.is_empty() {
                    "none".into()
                } else {
                    all.join(",")
                },
            })
        }
        1 => {
            let head = heads.into_iter().next().ok_or(HeadInputError::NoSuchHead {
                nsid,
                nqn: mp.nqn().to_string(),
                heads: "none".into(),
            })?;
            if !head.has_usable_path() {
                let paths: Vec<String> = head
                    .paths()
                    .paths
                    .iter()
                    .map(|p| format!("controller {} {}", p.controller, p.state))
                    .collect();
                return Err(HeadInputError::NoUsablePath {
                    nsid,
                    paths: if paths.is_empty() {
                        "none".into()
                    } else {
                        paths.join(", ")
                    },
                });
            }
            Ok(head)
        }
        count => Err(HeadInputError::AmbiguousHead {
            nsid,
            nqn: mp.nqn().to_string(),
            count,
        }),
    }
}

/// Sets `policy` on the heads of `--nsid` (default: the first head) and opens `threads`
/// channels on each, with their buffers (from the subsystem's one DMA pool).
pub fn prepare<P: Platform>(
    mp: &Arc<Subsystem<P>>,
    name: &str,
    args: &PerfArgs,
    policy: PathPolicy,
    read_pct: u8,
) -> Result<Vec<HeadJob<P>>> {
    let first = mp
        .controller(0)
        .context("the subsystem has no controller")?
        .clone();
    let nsids: Vec<u32> = if args.nsid.is_empty() {
        let h = mp
            .heads()
            .into_iter()
            .next()
            .ok_or_else(|| HeadInputError::NoSuchHead {
                nsid: 1,
                nqn: mp.nqn().to_string(),
                heads: "none".into(),
            })?;
        vec![h.nsid()]
    } else {
        args.nsid.clone()
    };
    let info = first.identify();
    let per_cmd = info.max_transfer_bytes.max(4096) as u64;
    let commands_per_io = args.io_size.div_ceil(per_cmd);
    let (depth, max_in_flight) = options::ring_and_in_flight(
        args.queue_size,
        args.qd,
        commands_per_io,
        info.max_queue_depth,
    )?;
    let threads = args.threads();
    for (_, c, _) in mp.controllers() {
        let granted = c.identify().io_queue_pairs;
        if args.queue_pairs() > u32::from(granted) {
            return Err(PerfInputError::TooManyThreads {
                threads,
                namespaces: nsids.len() as u32,
                device: c.platform().name(),
                granted,
            }
            .into());
        }
    }
    let io_size = usize::try_from(args.io_size)?;
    let mut jobs = Vec::new();
    for &nsid in &nsids {
        let head = head_of(mp, nsid)?;
        head.set_policy(policy);
        let list = head.paths();
        let ns = list
            .paths
            .first()
            .map(|p| p.namespace.clone())
            .context("the head has no path")?;
        options::check_io_size(args.io_size, nsid, ns.lba_size(), ns.size_bytes())?;
        for t in 0..threads {
            let n = jobs.len() as u64;
            let ch = IoChannel::open(
                mp.clone(),
                head.clone(),
                ChannelOptions {
                    qpair: QpairOptions {
                        depth,
                        max_in_flight,
                        ..QpairOptions::default()
                    },
                    capacity: args.qd as usize,
                    numa_node: None,
                },
            )
            .with_context(|| format!("opening I/O channel {} on {name}", n + 1))?;
            let buffers = (0..args.qd)
                .map(|_| first.dma().alloc(io_size))
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
            jobs.push(HeadJob {
                target: ChannelTarget { ch },
                blocks: ns.blocks(),
                lba_shift: u32::from(ns.lba_shift()),
                buffers,
                plan: plan_for(args, read_pct, args.seed.wrapping_add(n)),
                id: RowId {
                    target: name.to_string(),
                    nsid,
                    thread: t,
                    cpu,
                    ran_on: None,
                },
                depth,
                progress: Arc::default(),
            });
        }
    }
    Ok(jobs)
}

/// Runs one job on the calling thread, pinned to its core if it has one.
fn run_job<P: Platform>(mut j: HeadJob<P>, clock: &Clock) -> Result<(RowId, WorkerResult)> {
    if let Some(cpu) = j.id.cpu {
        super::cpus::pin(cpu)?;
    }
    let r = worker::run_on(
        &mut j.target,
        j.blocks,
        j.lba_shift,
        j.buffers,
        &j.plan,
        clock,
        Some(&j.progress),
    )?;
    j.id.ran_on = j.id.cpu.or_else(super::cpus::current);
    Ok((j.id, r))
}

/// Polls the subsystem every [`CONTROL_PERIOD`] until `done`, telling on standard error what
/// changed (lost or reset controllers, ANA changes).
fn control<P: Platform>(mp: &Subsystem<P>, done: &AtomicBool) {
    loop {
        let last = done.load(Ordering::Acquire);
        let r = mp.poll();
        for i in &r.controllers_lost {
            eprintln!("vfnvme perf: path {i} lost (controller failed or removed)");
        }
        for i in &r.controllers_reset {
            eprintln!("vfnvme perf: path {i} back after a controller reset");
        }
        if r.ana_notices > 0 {
            eprintln!(
                "vfnvme perf: ANA change ({} notices): {} heads changed",
                r.ana_notices, r.heads_changed
            );
        }
        if last {
            return;
        }
        std::thread::park_timeout(CONTROL_PERIOD);
    }
}

/// Runs every job on its own thread (the first on the calling thread) while the control
/// thread polls the subsystem and (on a terminal) one prints IOPS each second.
pub fn run_jobs<P: Platform>(
    jobs: Vec<HeadJob<P>>,
    mp: &Subsystem<P>,
    clock: &Clock,
    show_progress: bool,
) -> Result<Vec<(RowId, WorkerResult)>> {
    let done = AtomicBool::new(false);
    let counters: Vec<_> = jobs.iter().map(|j| j.progress.clone()).collect();
    let io_size = jobs.first().map_or(0, |j| j.plan.io_size);
    std::thread::scope(|s| {
        let done = &done;
        let ctl = s.spawn(move || control(mp, done));
        let printer = show_progress.then(|| s.spawn(|| progress::run(&counters, io_size, done)));
        let mut jobs = jobs.into_iter();
        let results = match jobs.next() {
            None => Ok(Vec::new()),
            Some(first) => {
                let handles: Vec<_> = jobs.map(|j| s.spawn(move || run_job(j, clock))).collect();
                let first = run_job(first, clock);
                let mut results = Vec::new();
                let mut error = first.as_ref().err().map(|e| anyhow::anyhow!("{e:#}"));
                if let Ok(r) = first {
                    results.push(r);
                }
                for h in handles {
                    match h.join() {
                        Ok(Ok(r)) => results.push(r),
                        Ok(Err(e)) => {
                            error.get_or_insert(e);
                        }
                        Err(_) => {
                            error.get_or_insert(anyhow::anyhow!("a perf worker thread panicked"));
                        }
                    }
                }
                match error {
                    Some(e) => Err(e),
                    None => Ok(results),
                }
            }
        };
        done.store(true, Ordering::Release);
        ctl.thread().unpark();
        let _ = ctl.join();
        if let Some(p) = printer {
            p.thread().unpark();
            let _ = p.join();
        }
        results
    })
}

/// Runs `args` on the head(s) of `mp` with `policy`, filling `summary`'s description and
/// its per-path counts; returns the rows.
#[allow(clippy::too_many_arguments)]
pub fn run_head<P: Platform>(
    mp: &Arc<Subsystem<P>>,
    name: &str,
    args: &PerfArgs,
    policy: PathPolicy,
    read_pct: u8,
    summary: &mut Summary,
    clock: &Clock,
    show_progress: bool,
) -> Result<Vec<(RowId, WorkerResult)>> {
    let jobs = prepare(mp, name, args, policy, read_pct)?;
    summary.targets.push(name.to_string());
    summary.workers += jobs.len();
    summary.nsid = jobs.first().map_or(0, |j| j.id.nsid);
    summary.queue_size = jobs.first().map_or(0, |j| j.depth);
    let names = path_names(mp);
    summary.paths = Some(PathCounts {
        policy: policy.name(),
        ios: vec![0; names.len()],
        names,
    });
    run_jobs(jobs, mp, clock, show_progress)
}

/// Names of the subsystem's paths, by controller index (for the per-path report).
pub fn path_names<P: Platform>(mp: &Subsystem<P>) -> Vec<String> {
    let ctrls = mp.paths_named();
    let n = ctrls.iter().map(|(i, ..)| i + 1).max().unwrap_or(0);
    let mut names = vec![String::new(); n.min(MAX_PATHS)];
    for (i, name, ..) in ctrls {
        if let Some(slot) = names.get_mut(i) {
            *slot = name;
        }
    }
    names
}

#[cfg(all(test, feature = "model"))]
mod tests {
    use super::*;
    use crate::perf::clock::ClockKind;
    use clap::Parser;
    use vfnvme::multipath::HeadOptions;
    use vfnvme::ControllerOptions;
    use vfnvme_model::{AnaState, ModelPlatform};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        perf: PerfArgs,
    }

    fn args(extra: &[&str]) -> PerfArgs {
        let mut v = vec![
            "perf", "--model", "--paths", "2", "--qd", "4", "--time", "60",
        ];
        v.extend_from_slice(extra);
        Cli::parse_from(v).perf
    }

    fn subsystem(states: &[(usize, u32, AnaState)]) -> Arc<Subsystem<ModelPlatform>> {
        let model = crate::model_subsys::build(2, states).unwrap();
        let ctrls = crate::model_subsys::bring_up(&model, &ControllerOptions::default()).unwrap();
        Subsystem::from_controllers(ctrls, HeadOptions::default()).unwrap()
    }

    #[test]
    fn io_avoids_an_inaccessible_path_and_goes_to_the_optimized_one() {
        // Namespace 1: inaccessible through controller 0, optimized through controller 1.
        let mp = subsystem(&[(0, 1, AnaState::Inaccessible)]);
        let a = args(&["--ios", "500", "--nsid", "1"]);
        let jobs = prepare(&mp, "t", &a, PathPolicy::RoundRobin, 100).unwrap();
        assert_eq!(mp.head(1).unwrap().policy(), PathPolicy::RoundRobin);
        let clock = Clock::start(ClockKind::Instant);
        let rows = run_jobs(jobs, &mp, &clock, false).unwrap();
        let (_, r) = &rows[0];
        assert_eq!((r.reads, r.errors), (500, 0));
        assert_eq!(r.per_path[..2], [0, 500]);
        // Namespace 2 still has both paths: round-robin splits it.
        let a = args(&["--ios", "500", "--nsid", "2"]);
        let jobs = prepare(&mp, "t", &a, PathPolicy::RoundRobin, 0).unwrap();
        let rows = run_jobs(jobs, &mp, &clock, false).unwrap();
        let r = &rows[0].1;
        assert_eq!((r.writes, r.errors), (500, 0));
        assert_eq!(r.per_path[..2], [250, 250]);
    }

    #[test]
    fn a_head_without_a_usable_path_is_refused_before_any_io() {
        let mp = subsystem(&[
            (0, 1, AnaState::Inaccessible),
            (1, 1, AnaState::PersistentLoss),
        ]);
        let e = prepare(&mp, "t", &args(&["--nsid", "1"]), PathPolicy::Numa, 100)
            .err()
            .expect("refused")
            .to_string();
        assert!(
            e.contains("namespace 1 has no usable path now")
                && e.contains("controller 0 inaccessible, controller 1 persistent-loss"),
            "{e}"
        );
        assert_eq!(
            parse_policy("rr").unwrap_err(),
            "unknown path policy \"rr\": use numa, round-robin or queue-depth"
        );
        assert_eq!(parse_policy("queue-depth"), Ok(PathPolicy::QueueDepth));
    }
}
