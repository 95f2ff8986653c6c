//! PCI addresses in the `DDDD:BB:DD.F` form used by sysfs, with the short `BB:DD.F` form and
//! SPDK's `DDDD.BB.DD.F` spelling accepted on input.

use crate::error::HalError;
use std::fmt;
use std::str::FromStr;

/// A PCI function address: domain, bus, device and function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddress {
    /// PCI domain (segment), 0..=0xffff.
    pub domain: u16,
    /// Bus number.
    pub bus: u8,
    /// Device number, 0..=31.
    pub device: u8,
    /// Function number, 0..=7.
    pub function: u8,
}

impl PciAddress {
    /// Parses `0000:00:10.0`, `00:10.0`, or SPDK's `0000.00.10.0`.
    pub fn parse(text: &str) -> Result<Self, HalError> {
        let bad = || HalError::BadPciAddress {
            text: text.to_string(),
        };
        let t = text.trim();
        // Split off the function after the last '.'.
        let (rest, function) = t.rsplit_once('.').ok_or_else(bad)?;
        let parts: Vec<&str> = rest.split([':', '.']).collect();
        let (domain, bus, device) = match parts.as_slice() {
            [d, b, dev] => (*d, *b, *dev),
            [b, dev] => ("0", *b, *dev),
            _ => return Err(bad()),
        };
        let hex = |s: &str, max: u32| -> Result<u32, HalError> {
            if s.is_empty() || s.len() > 4 {
                return Err(bad());
            }
            let v = u32::from_str_radix(s, 16).map_err(|_| bad())?;
            if v > max {
                return Err(bad());
            }
            Ok(v)
        };
        Ok(PciAddress {
            domain: hex(domain, 0xffff)? as u16,
            bus: hex(bus, 0xff)? as u8,
            device: hex(device, 0x1f)? as u8,
            function: hex(function, 7)? as u8,
        })
    }

    /// The sysfs directory of this function.
    pub fn sysfs_path(&self) -> std::path::PathBuf {
        std::path::PathBuf::from(format!("/sys/bus/pci/devices/{self}"))
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl FromStr for PciAddress {
    type Err = HalError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_all_spellings() {
        let want = PciAddress {
            domain: 0,
            bus: 0,
            device: 0x10,
            function: 0,
        };
        assert_eq!(PciAddress::parse("0000:00:10.0").unwrap(), want);
        assert_eq!(PciAddress::parse("00:10.0").unwrap(), want);
        assert_eq!(PciAddress::parse("0000.00.10.0").unwrap(), want);
        assert_eq!(want.to_string(), "0000:00:10.0");
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "0000:00:10",
            "zz:00.0",
            "0000:00:20.0",
            "0000:00:10.8",
            "1:2:3:4.0",
        ] {
            let err = PciAddress::parse(bad).unwrap_err();
            assert!(matches!(err, HalError::BadPciAddress { .. }), "{bad}");
            assert!(
                err.to_string().contains("0000:00:10.0"),
                "message shows the format"
            );
        }
    }
}
