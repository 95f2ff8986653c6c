//! spdk_nvme_perf's flags that have no vfnvme twin of their own (`-r`, `-b`, `-c`, `-Q`),
//! folded into vfnvme's (`--device`, `--nsid`, `--cpus`, `--continue-on-error`) before
//! anything else looks at the arguments; and the check that no controller is given twice.
//! Flags that are the same option (`-q`/`--qd`, `-o`/`--io-size`, …) are one clap argument,
//! which clap already refuses twice.

use super::trid::{self, TransportId};
use super::PerfArgs;
use thiserror::Error;

/// spdk_nvme_perf-style arguments that contradict each other or vfnvme's.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SpdkArgError {
    /// One controller named twice (e.g. by `-r` and `--device`).
    #[error("controller {addr} is given twice ({first} and {second}): name each controller once")]
    DuplicateDevice {
        /// The controller.
        addr: String,
        /// How it was first given.
        first: String,
        /// How it was given again.
        second: String,
    },
    /// `-r … ns:N` and `--nsid` both, or `-r` IDs with different `ns:`.
    #[error("the namespace is given twice ({first} and {second}): vfnvme measures the same namespaces on every controller; give ns: once in -r, or --nsid")]
    NamespaceConflict {
        /// One choice.
        first: String,
        /// The other.
        second: String,
    },
    /// A `--device`/`-b` value that is not a PCI address.
    #[error("'{text}' is not a PCI address: write DDDD:BB:DD.F (e.g. 0000:00:04.0), BB:DD.F or SPDK's DDDD.BB.DD.F")]
    BadAddress {
        /// What was given.
        text: String,
    },
}

/// The arguments with `-r`, `-b`, `-c` and `-Q` folded into vfnvme's own options: every
/// controller in `devices` (normalised to `DDDD:BB:DD.F`), a `-c` mask in `cpus`, `-Q N` as
/// `--continue-on-error`.
pub fn resolve(args: &PerfArgs) -> Result<PerfArgs, SpdkArgError> {
    let mut out = args.clone();
    let mut seen: Vec<(String, String)> = Vec::new();
    let mut devices = Vec::new();
    let mut add = |addr: String, how: String| {
        if let Some((_, first)) = seen.iter().find(|(a, _)| *a == addr) {
            return Err(SpdkArgError::DuplicateDevice {
                addr,
                first: first.clone(),
                second: how,
            });
        }
        seen.push((addr.clone(), how));
        devices.push(addr);
        Ok(())
    };
    for (flag, list) in [
        ("--device", &args.devices),
        ("BDF", &args.positional),
        ("-b", &args.allowed),
    ] {
        for text in list {
            // Addresses that do not parse go on as given: opening them says why.
            let addr = match trid::parse_pci_address(text) {
                Some(a) => a.to_string(),
                None if flag == "-b" => {
                    return Err(SpdkArgError::BadAddress { text: text.clone() })
                }
                None => text.clone(),
            };
            add(addr, format!("{flag} {text}"))?;
        }
    }
    let mut trid_ns: Option<(u32, String)> = None;
    for TransportId { addr, nsid } in &args.trids {
        add(addr.to_string(), format!("-r traddr:{addr}"))?;
        if let Some(n) = nsid {
            let how = format!("-r … ns:{n}");
            match &trid_ns {
                Some((m, first)) if m != n => {
                    return Err(SpdkArgError::NamespaceConflict {
                        first: first.clone(),
                        second: how,
                    })
                }
                _ => trid_ns = Some((*n, how)),
            }
        }
    }
    if let Some((n, how)) = trid_ns {
        if let Some(given) = args
            .nsid
            .first()
            .filter(|&&g| args.nsid.len() > 1 || g != n)
        {
            return Err(SpdkArgError::NamespaceConflict {
                first: how,
                second: format!("--nsid {given}"),
            });
        }
        out.nsid = vec![n];
    }
    out.devices = devices;
    out.positional.clear();
    out.allowed.clear();
    out.trids.clear();
    if let Some(mask) = out.core_mask.take() {
        out.cpus = Some(mask);
    }
    if out.continue_every.is_some() {
        out.continue_on_error = true;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        perf: PerfArgs,
    }

    fn parse(args: &[&str]) -> Result<PerfArgs, String> {
        let mut all = vec!["perf"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all)
            .map(|c| c.perf)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn spdk_command_lines_become_vfnvme_options() {
        let a = parse(&[
            "-q",
            "16",
            "-o",
            "8192",
            "-w",
            "rw",
            "-M",
            "70",
            "-t",
            "3",
            "-c",
            "0x3",
            "-r",
            "trtype:PCIe traddr:00:04.0 ns:2",
            "-LL",
            "-a",
            "1",
            "-Q",
            "10",
        ])
        .unwrap();
        let r = resolve(&a).unwrap();
        assert_eq!(r.qd, 16);
        assert_eq!(r.io_size, 8192);
        assert_eq!(r.pattern, crate::perf::options::Pattern::Rw);
        assert_eq!(r.rwmix_read, Some(70));
        assert_eq!((r.time, r.ramp), (3, 1));
        assert_eq!(r.cpus.map(|c| c.0), Some(vec![0, 1]));
        assert_eq!(r.devices, ["0000:00:04.0"]);
        assert_eq!(r.nsid, [2]);
        assert_eq!(r.latency, 2);
        assert!(r.continue_on_error);
        // The long flags as before.
        let r =
            resolve(&parse(&["--qd", "4", "--device", "0000:00:04.0", "--cpus", "0,1"]).unwrap())
                .unwrap();
        assert_eq!((r.qd, r.devices.len()), (4, 1));
        assert_eq!(r.cpus.map(|c| c.0), Some(vec![0, 1]));
    }

    #[test]
    fn duplicates_and_conflicts_are_refused() {
        for dup in [
            &["-q", "4", "--qd", "8"][..],
            &["-o", "4k", "--io-size", "8k"],
            &["-t", "1", "--time", "1"],
            &["-w", "read", "--pattern", "read"],
            &["-M", "50", "--rwmix-read", "50"],
            &["-c", "0x1", "--cpus", "0"],
            &["-Q", "1", "--continue-on-error"],
            &["-r", "traddr:00:04.0", "--model"],
        ] {
            let e = parse(dup).err().unwrap_or_default();
            assert!(
                e.contains("cannot be used multiple times") || e.contains("cannot be used with"),
                "{dup:?}: {e}"
            );
        }
        let a = parse(&["-r", "traddr:0000:00:04.0", "--device", "00:04.0"]).unwrap();
        let e = resolve(&a).unwrap_err();
        assert!(matches!(e, SpdkArgError::DuplicateDevice { .. }), "{e}");
        assert!(e.to_string().contains("0000:00:04.0 is given twice"), "{e}");
        let a = parse(&["-r", "traddr:00:04.0 ns:1", "--nsid", "2"]).unwrap();
        assert!(matches!(
            resolve(&a),
            Err(SpdkArgError::NamespaceConflict { .. })
        ));
        let a = parse(&["-r", "traddr:00:04.0 ns:1", "-r", "traddr:00:05.0 ns:2"]).unwrap();
        assert!(matches!(
            resolve(&a),
            Err(SpdkArgError::NamespaceConflict { .. })
        ));
        let e = parse(&["-r", "trtype:TCP traddr:10.0.0.1 trsvcid:4420"]).unwrap_err();
        assert!(e.contains("vfnvme drives PCIe"), "{e}");
        let e = parse(&["-c", "0,1"]).unwrap_err();
        assert!(e.contains("-c [0,1]"), "{e}");
    }
}
