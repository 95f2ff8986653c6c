//! `-r 'trtype:PCIe traddr:0000:00:04.0'`: spdk_nvme_perf's transport IDs, read as SPDK reads
//! them (whitespace-separated `key:value` or `key=value` pairs, keys in any case), for the
//! PCIe transport vfnvme drives.

use thiserror::Error;
use vfnvme::hal::PciAddress;

/// A transport ID vfnvme can measure: a PCIe controller, and optionally one namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportId {
    /// The controller's address.
    pub addr: PciAddress,
    /// `ns:N`: the namespace to measure, if given.
    pub nsid: Option<u32>,
}

/// A transport ID that does not parse or that vfnvme cannot drive.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TridError {
    /// A word without `:` or `=`, or a key without a value.
    #[error("-r '{text}': '{word}' is not a key:value pair; write e.g. -r 'trtype:PCIe traddr:0000:00:04.0'")]
    Syntax {
        /// The whole transport ID.
        text: String,
        /// The word that does not parse.
        word: String,
    },
    /// A key SPDK does not know either.
    #[error("-r '{text}': unknown key '{key}'; vfnvme reads trtype, traddr and ns (e.g. -r 'trtype:PCIe traddr:0000:00:04.0 ns:1')")]
    UnknownKey {
        /// The whole transport ID.
        text: String,
        /// The key.
        key: String,
    },
    /// A transport other than PCIe.
    #[error("-r '{text}': trtype {trtype} is not supported: vfnvme drives PCIe controllers bound to vfio-pci only (trtype:PCIe); use spdk_nvme_perf (or the kernel's NVMe host drivers) for {trtype}")]
    Transport {
        /// The whole transport ID.
        text: String,
        /// The transport asked for.
        trtype: String,
    },
    /// A key that only fabrics transports take (trsvcid, subnqn, adrfam, hostaddr, …).
    #[error("-r '{text}': {key} applies to NVMe over Fabrics; vfnvme drives PCIe only, where traddr (the PCI address) is all it needs")]
    FabricsKey {
        /// The whole transport ID.
        text: String,
        /// The key.
        key: String,
    },
    /// No `traddr`.
    #[error("-r '{text}': no traddr; give the controller's PCI address, e.g. -r 'trtype:PCIe traddr:0000:00:04.0'")]
    NoAddress {
        /// The whole transport ID.
        text: String,
    },
    /// A `traddr` that is not a PCI address.
    #[error("-r '{text}': traddr '{traddr}' is not a PCI address; write DDDD:BB:DD.F, BB:DD.F or SPDK's DDDD.BB.DD.F (e.g. 0000:00:04.0)")]
    BadAddress {
        /// The whole transport ID.
        text: String,
        /// The address given.
        traddr: String,
    },
    /// An `ns` that is not 1..=65535 (SPDK's limit).
    #[error("-r '{text}': ns '{ns}' is not a namespace ID; give 1 to 65535")]
    BadNamespace {
        /// The whole transport ID.
        text: String,
        /// The value given.
        ns: String,
    },
    /// The same key twice.
    #[error("-r '{text}': {key} is given twice; give it once")]
    Duplicate {
        /// The whole transport ID.
        text: String,
        /// The key.
        key: String,
    },
}

/// Parses a PCI address as SPDK does: with or without the domain, `:` or `.` separators, and
/// the function optional (`0000:00:04.0`, `00:04.0`, `0000.00.04.0`, `00:04`).
pub fn parse_pci_address(text: &str) -> Option<PciAddress> {
    PciAddress::parse(text).ok().or_else(|| {
        let t = text.trim();
        // Without a function: SPDK takes DDDD:BB:DD and BB:DD (and BB.DD) as function 0.
        let colons = t.matches(':').count();
        let dots = t.matches('.').count();
        let no_function = (colons == 2 && dots == 0) || (colons + dots == 1);
        if no_function {
            let joined = if colons == 0 {
                t.replacen('.', ":", 1)
            } else {
                t.to_string()
            };
            PciAddress::parse(&format!("{joined}.0")).ok()
        } else {
            None
        }
    })
}

/// Parses `-r`'s value.
pub fn parse(text: &str) -> Result<TransportId, TridError> {
    let mut trtype: Option<String> = None;
    let mut traddr: Option<String> = None;
    let mut nsid: Option<u32> = None;
    let mut fabrics_key: Option<String> = None;
    for word in text.split_whitespace() {
        // The key ends at the first ':' or '=' (a traddr has more ':' after it).
        let split = word.find([':', '=']);
        let (key, value) = match split {
            Some(i) if i > 0 && i + 1 < word.len() => (&word[..i], &word[i + 1..]),
            _ => {
                return Err(TridError::Syntax {
                    text: text.to_string(),
                    word: word.to_string(),
                })
            }
        };
        let duplicate = || TridError::Duplicate {
            text: text.to_string(),
            key: key.to_ascii_lowercase(),
        };
        match key.to_ascii_lowercase().as_str() {
            "trtype" => {
                if trtype.replace(value.to_string()).is_some() {
                    return Err(duplicate());
                }
            }
            "traddr" => {
                if traddr.replace(value.to_string()).is_some() {
                    return Err(duplicate());
                }
            }
            "ns" => {
                let n = value
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=65535).contains(n))
                    .ok_or_else(|| TridError::BadNamespace {
                        text: text.to_string(),
                        ns: value.to_string(),
                    })?;
                if nsid.replace(n).is_some() {
                    return Err(duplicate());
                }
            }
            "adrfam" | "trsvcid" | "subnqn" | "hostaddr" | "hostsvcid" | "hostnqn"
            | "alt_traddr" | "priority" => {
                // Refused below, after a non-PCIe trtype (the likelier mistake) is.
                fabrics_key.get_or_insert_with(|| key.to_ascii_lowercase());
            }
            _ => {
                return Err(TridError::UnknownKey {
                    text: text.to_string(),
                    key: key.to_string(),
                })
            }
        }
    }
    // SPDK's default transport is PCIe.
    if let Some(t) = trtype.filter(|t| !t.eq_ignore_ascii_case("pcie")) {
        return Err(TridError::Transport {
            text: text.to_string(),
            trtype: t,
        });
    }
    if let Some(key) = fabrics_key {
        return Err(TridError::FabricsKey {
            text: text.to_string(),
            key,
        });
    }
    let traddr = traddr.ok_or_else(|| TridError::NoAddress {
        text: text.to_string(),
    })?;
    let addr = parse_pci_address(&traddr).ok_or_else(|| TridError::BadAddress {
        text: text.to_string(),
        traddr: traddr.clone(),
    })?;
    Ok(TransportId { addr, nsid })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> PciAddress {
        PciAddress::parse(text).unwrap()
    }

    #[test]
    fn spdk_spellings_of_a_pcie_transport_id() {
        let want = TransportId {
            addr: addr("0000:00:04.0"),
            nsid: None,
        };
        for t in [
            "trtype:PCIe traddr:0000:00:04.0",
            "trtype=pcie traddr=0000.00.04.0",
            "  TRTYPE:PCIE\tTRADDR:00:04.0 ",
            "traddr:00.04.0",
            "traddr:0000:00:04",
            "traddr:00:04",
        ] {
            assert_eq!(parse(t), Ok(want.clone()), "{t}");
        }
        assert_eq!(
            parse("trtype:PCIe traddr:0001:3b:00.1 ns:2"),
            Ok(TransportId {
                addr: addr("0001:3b:00.1"),
                nsid: Some(2)
            })
        );
    }

    #[test]
    fn other_transports_and_bad_ids_are_refused() {
        let e = parse("trtype:TCP adrfam:IPv4 traddr:10.0.0.1 trsvcid:4420").unwrap_err();
        assert!(matches!(e, TridError::Transport { ref trtype, .. } if trtype == "TCP"));
        assert!(e.to_string().contains("vfnvme drives PCIe"), "{e}");
        assert!(matches!(
            parse("trtype:RDMA traddr:1.2.3.4"),
            Err(TridError::Transport { .. })
        ));
        assert!(matches!(
            parse("traddr:0000:00:04.0 subnqn:nqn.x"),
            Err(TridError::FabricsKey { .. })
        ));
        assert!(matches!(
            parse("trtype:PCIe"),
            Err(TridError::NoAddress { .. })
        ));
        assert!(matches!(
            parse("trtype:PCIe traddr:0000:00:40.0"),
            Err(TridError::BadAddress { .. })
        ));
        assert!(matches!(parse("PCIe"), Err(TridError::Syntax { .. })));
        assert!(matches!(parse("traddr:"), Err(TridError::Syntax { .. })));
        assert!(matches!(
            parse("traddr:00:04.0 ns:0"),
            Err(TridError::BadNamespace { .. })
        ));
        assert!(matches!(
            parse("traddr:00:04.0 traddr:00:05.0"),
            Err(TridError::Duplicate { .. })
        ));
        assert!(matches!(
            parse("traddr:00:04.0 colour:blue"),
            Err(TridError::UnknownKey { .. })
        ));
    }
}
