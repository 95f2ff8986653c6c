//! `vfnvme perf` input: sizes with suffixes, access patterns, and the checks that turn user
//! input into clear errors before any device is touched.

use clap::ValueEnum;
use thiserror::Error;

/// Largest I/O size `perf` accepts (larger requests are split by the driver anyway, and this
/// keeps `qd × io-size` of DMA memory reasonable).
pub const MAX_IO_SIZE: u64 = 8 << 20;

/// Longest `--time` and `--ramp`: a year, in seconds.
pub const MAX_SECONDS: u64 = 365 * 24 * 3600;

/// Most DMA memory the I/O buffers of one queue pair may take (`qd × io-size`).
pub const MAX_BUFFER_BYTES: u64 = 256 << 20;

/// The access pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Pattern {
    /// Random reads.
    Randread,
    /// Random writes.
    Randwrite,
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Random mix of reads and writes (`--rwmix-read` percent reads).
    Randrw,
    /// Sequential mix of reads and writes (`--rwmix-read` percent reads), as spdk_nvme_perf's
    /// `-w rw`.
    Rw,
}

impl Pattern {
    /// Whether offsets are random.
    pub fn is_random(self) -> bool {
        matches!(
            self,
            Pattern::Randread | Pattern::Randwrite | Pattern::Randrw
        )
    }

    /// The percentage of reads.
    pub fn read_percent(self, rwmix_read: u8) -> u8 {
        match self {
            Pattern::Randread | Pattern::Read => 100,
            Pattern::Randwrite | Pattern::Write => 0,
            Pattern::Randrw | Pattern::Rw => rwmix_read,
        }
    }

    /// The name as given on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Randread => "randread",
            Pattern::Randwrite => "randwrite",
            Pattern::Read => "read",
            Pattern::Write => "write",
            Pattern::Randrw => "randrw",
            Pattern::Rw => "rw",
        }
    }
}

/// Bad `perf` input, found before or right after opening the device.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PerfInputError {
    /// A size that does not parse.
    #[error("'{text}' is not a size: write bytes, optionally with a k, m or g suffix (powers of 1024), e.g. 4096, 4k, 128k, 1m")]
    BadSize {
        /// What was given.
        text: String,
    },
    /// Queue depth 0.
    #[error("--qd 0: keep at least one I/O outstanding (--qd 1 or more)")]
    ZeroQueueDepth,
    /// Queue depth above what the controller's queues hold.
    #[error("--qd {qd} needs {commands} commands in flight per queue pair, but one queue pair holds at most {max} (CAP.MQES+1 = {depth} entries, and at most vfnvme's {} per queue pair): use --qd {max_qd} or less", vfnvme::queue::MAX_IN_FLIGHT)]
    QueueDepthTooLarge {
        /// The queue depth asked for.
        qd: u32,
        /// Commands in flight that needs (qd × commands per I/O).
        commands: u64,
        /// Most commands in flight on one queue pair.
        max: u32,
        /// CAP.MQES + 1.
        depth: u32,
        /// The largest queue depth that fits.
        max_qd: u32,
    },
    /// I/O size 0 or not a multiple of the LBA size.
    #[error("--io-size {size} is not a multiple of namespace {nsid}'s LBA size ({lba_size} bytes): use a multiple of {lba_size}, e.g. {suggestion}")]
    IoSizeNotMultiple {
        /// The size asked for.
        size: u64,
        /// The namespace.
        nsid: u32,
        /// Its LBA size.
        lba_size: u32,
        /// A size that works.
        suggestion: u64,
    },
    /// I/O size above [`MAX_IO_SIZE`].
    #[error("--io-size {size} is larger than perf supports ({MAX_IO_SIZE} bytes): use 8m or less")]
    IoSizeTooLarge {
        /// The size asked for.
        size: u64,
    },
    /// I/O size larger than the namespace.
    #[error("--io-size {size} is larger than namespace {nsid} ({ns_bytes} bytes): use a smaller --io-size")]
    IoSizeAboveNamespace {
        /// The size asked for.
        size: u64,
        /// The namespace.
        nsid: u32,
        /// Its size in bytes.
        ns_bytes: u64,
    },
    /// Too much buffer memory.
    #[error("--qd {qd} × --io-size {size} needs {bytes} bytes of DMA buffers per queue pair, more than perf allows ({MAX_BUFFER_BYTES}): lower --qd or --io-size")]
    TooMuchMemory {
        /// Queue depth.
        qd: u32,
        /// I/O size.
        size: u64,
        /// The product.
        bytes: u64,
    },
    /// No such namespace.
    #[error("namespace {nsid} is not active on {device}: active namespaces are {active}")]
    NoSuchNamespace {
        /// The nsid asked for.
        nsid: u32,
        /// The device.
        device: String,
        /// The active nsids, comma-separated (or "none").
        active: String,
    },
    /// The controller has no namespace at all.
    #[error("{device} has no active namespace: create or attach one first (e.g. with nvme-cli while it is on the kernel driver)")]
    NoNamespace {
        /// The device.
        device: String,
    },
    /// The namespace takes no I/O from vfnvme (e.g. its format has metadata).
    #[error("{device}: {reason}")]
    NamespaceRefused {
        /// The device.
        device: String,
        /// Why (the driver's submission error).
        reason: vfnvme::SubmitErrorKind,
    },
    /// `--time 0`.
    #[error("--time 0: measure for at least 1 second")]
    ZeroTime,
    /// `--time` or `--ramp` beyond [`MAX_SECONDS`].
    #[error("--{what} {seconds}: that is more than a year; use at most {MAX_SECONDS} seconds (stop a long run early with Ctrl-C: perf prints what it measured)")]
    TooLong {
        /// `time` or `ramp`.
        what: &'static str,
        /// The value given.
        seconds: u64,
    },
    /// `--io-size 0`.
    #[error("--io-size 0: an I/O moves at least one logical block; give its size, e.g. 512 or 4k")]
    ZeroIoSize,
    /// `--lat-sample 0`.
    #[error("--lat-sample 0: time every Nth completion batch with N at least 1 (1 = every I/O)")]
    ZeroLatSample,
    /// `--threads 0`.
    #[error("--threads 0: use at least one thread")]
    ZeroThreads,
    /// More threads than queue pairs.
    #[error("--threads {threads} on {namespaces} namespace(s) needs {} I/O queue pairs but {device} granted {granted}: use --threads {} or less", threads * namespaces, u32::from(*granted) / (*namespaces).max(1))]
    TooManyThreads {
        /// Threads per namespace asked for.
        threads: u32,
        /// Namespaces measured on the device.
        namespaces: u32,
        /// The device.
        device: String,
        /// Queue pairs granted.
        granted: u16,
    },
    /// `--rwmix-read` above 100.
    #[error("--rwmix-read {pct}: give a percentage from 0 to 100")]
    BadRwmix {
        /// The value given.
        pct: u8,
    },
    /// `--rwmix-read` with a pattern other than rw or randrw.
    #[error("--rwmix-read (-M) only applies to --pattern rw or randrw (the pattern is {pattern}): drop it, or use -w rw / -w randrw")]
    RwmixWithoutRandrw {
        /// The pattern given.
        pattern: &'static str,
    },
    /// `--ios 0`.
    #[error("--ios 0: give the number of I/Os each queue pair does (1 or more), or leave --ios out to run for --time")]
    ZeroIos,
    /// A zipf skew that is not usable.
    #[error("--zipf {theta}: give a skew above 0 and not 1 (at most 100), e.g. --zipf 1.2 or --zipf 0.8")]
    BadZipf {
        /// The value given.
        theta: String,
    },
    /// `--zipf` with a sequential pattern.
    #[error(
        "--zipf applies to random patterns (randread, randwrite, randrw); the pattern is {pattern}"
    )]
    ZipfNotRandom {
        /// The pattern given.
        pattern: &'static str,
    },
    /// `--queue-size` outside what one I/O needs ..= CAP.MQES+1.
    #[error("--queue-size {size}: this controller's queues hold at most {max} entries (CAP.MQES+1) and one I/O of this size needs {min} (its commands + 1): use --queue-size {min} to {max}")]
    BadQueueSize {
        /// The size asked for.
        size: u32,
        /// The smallest that works: commands per I/O + 1 (at least 2).
        min: u32,
        /// CAP.MQES + 1.
        max: u32,
    },
    /// Neither or both of `--device` and `--model`.
    #[error("say what to measure: --device BDF (a controller on vfio-pci; repeatable), --head BDF+BDF (a multipath head of one subsystem's controllers) or --model (the in-memory model)")]
    NoTarget,
}

/// Parses a byte count: digits with an optional `k`, `m`, `g` suffix (powers of 1024; `kb`,
/// `kib` also accepted, case-insensitive).
pub fn parse_size(text: &str) -> Result<u64, PerfInputError> {
    let bad = || PerfInputError::BadSize {
        text: text.to_string(),
    };
    let t = text.trim().to_ascii_lowercase();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(digits_end);
    let n: u64 = num.parse().map_err(|_| bad())?;
    let shift = match suffix {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err(bad()),
    };
    n.checked_mul(1u64 << shift).ok_or_else(bad)
}

/// Checks the I/O size against the namespace's LBA size and size.
pub fn check_io_size(
    size: u64,
    nsid: u32,
    lba_size: u32,
    ns_bytes: u64,
) -> Result<(), PerfInputError> {
    let lba = u64::from(lba_size.max(1));
    if size == 0 || !size.is_multiple_of(lba) {
        return Err(PerfInputError::IoSizeNotMultiple {
            size,
            nsid,
            lba_size,
            suggestion: size.div_ceil(lba).max(1) * lba,
        });
    }
    if size > MAX_IO_SIZE {
        return Err(PerfInputError::IoSizeTooLarge { size });
    }
    if size > ns_bytes {
        return Err(PerfInputError::IoSizeAboveNamespace {
            size,
            nsid,
            ns_bytes,
        });
    }
    Ok(())
}

/// Fewest entries of a default ring (where the controller allows it): 64 submission entries
/// fill one 4 KiB page. At a low queue depth, twice the commands in flight + 1 is a tiny ring
/// whose CQ head doorbell the driver must write after nearly every completion (a ring of 3 at
/// QD 1: one head write per I/O); with 64 entries it writes one per ~30 completions. On an
/// emulated controller each doorbell is a trapped MMIO write, and a head write per I/O costs
/// `vfnvme perf` much of its QD 1 IOPS on a busy host (docs/peers.md).
pub const MIN_DEFAULT_RING: u32 = 64;

/// Entries of a default ring where the controller allows it (80 KiB of SQ and CQ): the driver
/// writes the CQ head doorbell once the ring could run short of CQ slots, so with 1024 entries
/// and up to 63 commands in flight about once per 480 completions. Each is a trapped MMIO write
/// on an emulated controller that lands while QEMU's main loop holds its global lock (just after
/// an SQ doorbell), so the vCPU waits on the lock (docs/peers.md); `scripts/peers/side-by-side.sh`
/// with `--vfnvme-variant "--queue-size N"` measures it. The trackers (a 4 KiB PRP list page
/// each) stay as [`queue_depth_for`] says.
pub const DEFAULT_RING_ENTRIES: u32 = 1024;

/// The ring entries of a queue pair whose commands in flight need `slots_depth` (what
/// [`queue_depth_for`] returns): [`DEFAULT_RING_ENTRIES`] or CAP.MQES+1 (`max_entries`) if
/// smaller, and never fewer than `slots_depth`.
pub fn ring_entries_for(slots_depth: u32, max_entries: u32) -> u32 {
    slots_depth.max(DEFAULT_RING_ENTRIES.min(max_entries))
}

/// The ring entries and the commands in flight at most (0: the ring's) of each queue pair:
/// `--queue-size` as given (checked), else [`ring_entries_for`] the [`queue_depth_for`] `qd`.
pub fn ring_and_in_flight(
    queue_size: Option<u32>,
    qd: u32,
    commands_per_io: u64,
    max_entries: u32,
) -> Result<(u32, u32), PerfInputError> {
    Ok(match queue_size {
        Some(size) => {
            // The commands in flight stay within what one queue pair takes, whatever the ring.
            queue_depth_for(qd, commands_per_io, max_entries)?;
            (check_queue_size(size, commands_per_io, max_entries)?, 0)
        }
        None => {
            let slots = queue_depth_for(qd, commands_per_io, max_entries)?;
            (ring_entries_for(slots, max_entries), slots - 1)
        }
    })
}

/// Checks the queue depth against the controller's largest queue; returns the depth whose
/// `depth - 1` commands may be in flight (the ring is [`ring_entries_for`] it): twice the
/// commands in flight + 1 where the controller allows it (so the driver can write the CQ head
/// doorbell after the resubmissions' SQ doorbell, see `IoQueue::reap`), and at least
/// [`MIN_DEFAULT_RING`] (or CAP.MQES+1 if smaller), else commands in flight + 1.
///
/// `commands_per_io` is how many NVMe commands one I/O takes (more than 1 when it is split at
/// the controller's transfer limit); `max_entries` is CAP.MQES+1.
pub fn queue_depth_for(
    qd: u32,
    commands_per_io: u64,
    max_entries: u32,
) -> Result<u32, PerfInputError> {
    if qd == 0 {
        return Err(PerfInputError::ZeroQueueDepth);
    }
    let commands = u64::from(qd) * commands_per_io.max(1);
    let max = max_entries
        .saturating_sub(1)
        .min(vfnvme::queue::MAX_IN_FLIGHT as u32);
    if commands > u64::from(max) {
        return Err(PerfInputError::QueueDepthTooLarge {
            qd,
            commands,
            max,
            depth: max_entries,
            max_qd: (u64::from(max) / commands_per_io.max(1)) as u32,
        });
    }
    let roomy = 2 * commands + 1;
    Ok(if roomy <= u64::from(max_entries) {
        (roomy as u32).max(MIN_DEFAULT_RING.min(max_entries))
    } else {
        commands as u32 + 1
    })
}

/// Checks `--queue-size` against CAP.MQES+1 (`max_entries`) and against the
/// `commands_per_io` one I/O takes (a ring of N entries holds N-1 commands); returns the ring
/// depth.
pub fn check_queue_size(
    size: u32,
    commands_per_io: u64,
    max_entries: u32,
) -> Result<u32, PerfInputError> {
    let min = u32::try_from(commands_per_io.max(1) + 1).unwrap_or(u32::MAX);
    if size < min || size > max_entries {
        return Err(PerfInputError::BadQueueSize {
            size,
            min,
            max: max_entries,
        });
    }
    Ok(size)
}

/// Checks the buffer memory one queue pair needs.
pub fn check_memory(qd: u32, size: u64) -> Result<(), PerfInputError> {
    let bytes = u64::from(qd).saturating_mul(size);
    if bytes > MAX_BUFFER_BYTES {
        return Err(PerfInputError::TooMuchMemory { qd, size, bytes });
    }
    Ok(())
}

/// Checks `--rwmix-read` against the pattern; returns the read percentage to use.
pub fn check_rwmix(pattern: Pattern, rwmix_read: Option<u8>) -> Result<u8, PerfInputError> {
    match (pattern, rwmix_read) {
        (_, Some(pct)) if pct > 100 => Err(PerfInputError::BadRwmix { pct }),
        (Pattern::Randrw | Pattern::Rw, pct) => Ok(pct.unwrap_or(50)),
        (p, Some(_)) => Err(PerfInputError::RwmixWithoutRandrw { pattern: p.name() }),
        (p, None) => Ok(p.read_percent(0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("128K"), Ok(128 << 10));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("2MiB"), Ok(2 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        for bad in [
            "",
            "k",
            "4x",
            "-4k",
            "4.5k",
            "99999999999999999999g",
            "4 k k",
        ] {
            assert!(
                matches!(parse_size(bad), Err(PerfInputError::BadSize { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn io_size_checks() {
        assert_eq!(check_io_size(4096, 1, 4096, 1 << 30), Ok(()));
        assert_eq!(check_io_size(512, 1, 512, 1 << 30), Ok(()));
        let e = check_io_size(512, 1, 4096, 1 << 30).unwrap_err();
        assert!(matches!(
            e,
            PerfInputError::IoSizeNotMultiple {
                suggestion: 4096,
                ..
            }
        ));
        assert!(e.to_string().contains("multiple of 4096"), "{e}");
        assert!(check_io_size(0, 1, 512, 1 << 30).is_err());
        assert_eq!(
            check_io_size(16 << 20, 1, 4096, 1 << 30),
            Err(PerfInputError::IoSizeTooLarge { size: 16 << 20 })
        );
        assert!(matches!(
            check_io_size(8192, 1, 4096, 4096),
            Err(PerfInputError::IoSizeAboveNamespace { .. })
        ));
    }

    #[test]
    fn queue_depth_checks() {
        assert_eq!(queue_depth_for(32, 1, 1024), Ok(65));
        assert_eq!(queue_depth_for(1, 1, 1024), Ok(MIN_DEFAULT_RING));
        assert_eq!(queue_depth_for(31, 1, 1024), Ok(MIN_DEFAULT_RING));
        assert_eq!(queue_depth_for(1, 1, 16), Ok(16));
        assert_eq!(queue_depth_for(1, 1, 2), Ok(2));
        assert_eq!(queue_depth_for(4, 4, 1024), Ok(MIN_DEFAULT_RING));
        assert_eq!(queue_depth_for(511, 1, 1024), Ok(1023));
        assert_eq!(queue_depth_for(512, 1, 1024), Ok(513));
        // The ring: 1024 entries where the controller allows it, never fewer than needed.
        assert_eq!(
            ring_entries_for(MIN_DEFAULT_RING, 2048),
            DEFAULT_RING_ENTRIES
        );
        assert_eq!(ring_entries_for(MIN_DEFAULT_RING, 64), 64);
        assert_eq!(ring_entries_for(1023, 1024), 1024);
        assert_eq!(ring_entries_for(1025, 2048), 1025);
        assert_eq!(ring_entries_for(16, 16), 16);
        assert_eq!(queue_depth_for(1023, 1, 1024), Ok(1024));
        let e = queue_depth_for(1024, 1, 1024).unwrap_err();
        assert!(
            matches!(e, PerfInputError::QueueDepthTooLarge { max_qd: 1023, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("--qd 1023"), "{e}");
        // Split I/O: 4 commands each.
        assert!(matches!(
            queue_depth_for(300, 4, 1024),
            Err(PerfInputError::QueueDepthTooLarge { max_qd: 255, .. })
        ));
        assert_eq!(
            queue_depth_for(0, 1, 1024),
            Err(PerfInputError::ZeroQueueDepth)
        );
    }

    #[test]
    fn errors_of_the_small_checks_say_what_to_give() {
        let e = PerfInputError::ZeroIoSize.to_string();
        assert!(e.contains("--io-size 0") && !e.contains("multiple"), "{e}");
        let e = PerfInputError::TooLong {
            what: "time",
            seconds: u64::MAX,
        }
        .to_string();
        assert!(
            e.contains("--time 18446744073709551615") && e.contains("31536000"),
            "{e}"
        );
        assert!(PerfInputError::ZeroLatSample
            .to_string()
            .contains("--lat-sample 0"));
    }

    #[test]
    fn queue_size_checks() {
        assert_eq!(check_queue_size(2, 1, 1024), Ok(2));
        assert_eq!(check_queue_size(1024, 1, 1024), Ok(1024));
        let e = check_queue_size(1025, 1, 1024).unwrap_err();
        assert!(e.to_string().contains("use --queue-size 2 to 1024"), "{e}");
        // A 1 MiB I/O split into 8 commands needs 9 entries.
        assert!(check_queue_size(8, 8, 1024).is_err());
        assert_eq!(check_queue_size(9, 8, 1024), Ok(9));
    }

    #[test]
    fn memory_and_rwmix_checks() {
        assert_eq!(check_memory(32, 4096), Ok(()));
        assert!(matches!(
            check_memory(1024, 1 << 20),
            Err(PerfInputError::TooMuchMemory { .. })
        ));
        assert_eq!(check_rwmix(Pattern::Randrw, None), Ok(50));
        assert_eq!(check_rwmix(Pattern::Randrw, Some(70)), Ok(70));
        assert_eq!(check_rwmix(Pattern::Rw, Some(30)), Ok(30));
        assert_eq!(check_rwmix(Pattern::Rw, None), Ok(50));
        assert!(!Pattern::Rw.is_random());
        assert_eq!(check_rwmix(Pattern::Randread, None), Ok(100));
        assert_eq!(check_rwmix(Pattern::Write, None), Ok(0));
        assert_eq!(
            check_rwmix(Pattern::Randrw, Some(101)),
            Err(PerfInputError::BadRwmix { pct: 101 })
        );
        assert!(matches!(
            check_rwmix(Pattern::Read, Some(50)),
            Err(PerfInputError::RwmixWithoutRandrw { .. })
        ));
    }
}
