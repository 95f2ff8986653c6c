//! Known controller defects, keyed by PCI vendor and device ID: the one table of them.
//!
//! Each entry states its public source. The facts (which device needs what) come from SPDK's
//! `lib/nvme/nvme_quirks.c` and the Linux kernel's `nvme_id_table` (drivers/nvme/host/pci.c);
//! only quirks for behaviours vfnvme has are listed. Where each flag takes effect:
//!
//! | flag | effect |
//! |---|---|
//! | [`Quirks::DELAY_BEFORE_CHK_RDY`] | bring-up waits [`CHK_RDY_DELAY_NS`] after each CC.EN write before it reads CSTS.RDY |
//! | [`Quirks::IDENTIFY_CNS`] | the namespace scan sends only Identify CNS 00h/01h: it probes nsids 1..=NN instead of reading the Active Namespace ID list (02h) and skips the descriptor list (03h) |
//! | [`Quirks::NO_NS_DESC_LIST`] | the scan skips the Namespace Identification Descriptor list (CNS 03h) |
//! | [`Quirks::DISABLE_WRITE_ZEROES`] | Write Zeroes is refused (as if ONCS bit 3 were clear) |

use std::fmt;

/// A set of quirk flags.
#[derive(Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Quirks(pub u32);

impl Quirks {
    /// None.
    pub const NONE: Quirks = Quirks(0);
    /// The controller needs a delay after CC.EN changes before CSTS.RDY may be read.
    pub const DELAY_BEFORE_CHK_RDY: Quirks = Quirks(1 << 0);
    /// The controller mishandles Identify CNS values other than 00h and 01h.
    pub const IDENTIFY_CNS: Quirks = Quirks(1 << 1);
    /// The controller fails the Namespace Identification Descriptor list (CNS 03h).
    pub const NO_NS_DESC_LIST: Quirks = Quirks(1 << 2);
    /// The controller's Write Zeroes must not be used although ONCS reports it.
    pub const DISABLE_WRITE_ZEROES: Quirks = Quirks(1 << 3);

    const NAMES: [(Quirks, &'static str); 4] = [
        (Quirks::DELAY_BEFORE_CHK_RDY, "delay-before-chk-rdy"),
        (Quirks::IDENTIFY_CNS, "identify-cns"),
        (Quirks::NO_NS_DESC_LIST, "no-ns-desc-list"),
        (Quirks::DISABLE_WRITE_ZEROES, "disable-write-zeroes"),
    ];

    /// Whether every flag of `other` is set.
    #[inline]
    pub fn contains(self, other: Quirks) -> bool {
        self.0 & other.0 == other.0
    }
    /// Whether no flag is set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl std::ops::BitOr for Quirks {
    type Output = Quirks;
    fn bitor(self, rhs: Quirks) -> Quirks {
        Quirks(self.0 | rhs.0)
    }
}

impl fmt::Debug for Quirks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Quirks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        let names: Vec<&str> = Self::NAMES
            .iter()
            .filter(|(q, _)| self.contains(*q))
            .map(|(_, n)| *n)
            .collect();
        f.write_str(&names.join(","))
    }
}

/// How long [`Quirks::DELAY_BEFORE_CHK_RDY`] waits: the Linux kernel's empirically found
/// `NVME_QUIRK_DELAY_AMOUNT` (2300 ms).
pub const CHK_RDY_DELAY_NS: u64 = 2_300_000_000;

/// One device with known defects.
#[derive(Debug, Clone, Copy)]
pub struct QuirkEntry {
    /// PCI vendor ID.
    pub vendor: u16,
    /// PCI device ID.
    pub device: u16,
    /// The product, as the sources name it.
    pub product: &'static str,
    /// What vfnvme works around.
    pub quirks: Quirks,
    /// Where the fact is published.
    pub source: &'static str,
}

const LINUX: &str = "Linux nvme_id_table (drivers/nvme/host/pci.c)";
const LINUX_SPDK: &str = "Linux nvme_id_table and SPDK nvme_quirks.c";

/// Every known quirky controller.
pub const QUIRK_TABLE: &[QuirkEntry] = &[
    QuirkEntry {
        vendor: 0x8086,
        device: 0x5845,
        product: "QEMU's older emulated NVMe controller (Intel vendor ID)",
        quirks: Quirks(Quirks::IDENTIFY_CNS.0 | Quirks::DISABLE_WRITE_ZEROES.0),
        source: LINUX,
    },
    QuirkEntry {
        vendor: 0x1bb1,
        device: 0x0100,
        product: "Seagate Nytro Flash Storage",
        quirks: Quirks(Quirks::DELAY_BEFORE_CHK_RDY.0 | Quirks::NO_NS_DESC_LIST.0),
        source: LINUX,
    },
    QuirkEntry {
        vendor: 0x1c58,
        device: 0x0003,
        product: "HGST adapter",
        quirks: Quirks::DELAY_BEFORE_CHK_RDY,
        source: LINUX,
    },
    QuirkEntry {
        vendor: 0x1c58,
        device: 0x0023,
        product: "WDC SN200 adapter",
        quirks: Quirks::DELAY_BEFORE_CHK_RDY,
        source: LINUX,
    },
    QuirkEntry {
        vendor: 0x1c5f,
        device: 0x0540,
        product: "Memblaze Pblaze4 adapter",
        quirks: Quirks::DELAY_BEFORE_CHK_RDY,
        source: LINUX_SPDK,
    },
    QuirkEntry {
        vendor: 0x144d,
        device: 0xa821,
        product: "Samsung PM1725",
        quirks: Quirks::DELAY_BEFORE_CHK_RDY,
        source: LINUX_SPDK,
    },
    QuirkEntry {
        vendor: 0x144d,
        device: 0xa822,
        product: "Samsung PM1725a",
        quirks: Quirks::DELAY_BEFORE_CHK_RDY,
        source: LINUX_SPDK,
    },
    QuirkEntry {
        vendor: 0x126f,
        device: 0x2263,
        product: "Silicon Motion SM2263 based SSDs",
        quirks: Quirks::NO_NS_DESC_LIST,
        source: LINUX,
    },
];

/// The quirks of the controller with PCI ID `vendor:device` (none if it is not in the table).
pub fn lookup(vendor: u16, device: u16) -> Quirks {
    QUIRK_TABLE
        .iter()
        .filter(|e| e.vendor == vendor && e.device == device)
        .fold(Quirks::NONE, |q, e| q | e.quirks)
}

/// The table entry of `vendor:device`, if any (for logs and tools).
pub fn entry(vendor: u16, device: u16) -> Option<&'static QuirkEntry> {
    QUIRK_TABLE
        .iter()
        .find(|e| e.vendor == vendor && e.device == device)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_finds_entries_and_nothing_else() {
        assert_eq!(lookup(0x1b36, 0x0010), Quirks::NONE, "QEMU's current ID");
        let q = lookup(0x8086, 0x5845);
        assert!(q.contains(Quirks::IDENTIFY_CNS) && q.contains(Quirks::DISABLE_WRITE_ZEROES));
        assert!(!q.contains(Quirks::DELAY_BEFORE_CHK_RDY));
        assert_eq!(lookup(0x144d, 0xa822), Quirks::DELAY_BEFORE_CHK_RDY);
        assert_eq!(q.to_string(), "identify-cns,disable-write-zeroes");
        assert_eq!(Quirks::NONE.to_string(), "none");
    }

    #[test]
    fn each_id_is_listed_once_with_a_source_and_known_flags() {
        let known = Quirks::NAMES.iter().fold(0, |a, (q, _)| a | q.0);
        for (i, a) in QUIRK_TABLE.iter().enumerate() {
            assert!(!a.quirks.is_empty() && a.quirks.0 & !known == 0, "{a:?}");
            assert!(!a.source.is_empty() && !a.product.is_empty());
            for b in &QUIRK_TABLE[i + 1..] {
                assert!((a.vendor, a.device) != (b.vendor, b.device), "{a:?} twice");
            }
        }
    }
}
