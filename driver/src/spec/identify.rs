//! Identify data structures: controller, namespace, active namespace list, namespace
//! identification descriptors. Parsing never panics; short or malformed data is an error.

use thiserror::Error;

/// Size of every Identify data structure.
pub const IDENTIFY_SIZE: usize = 4096;

/// Malformed Identify data.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ParseError {
    /// Fewer bytes than the structure needs.
    #[error("identify data is {len} bytes, but {what} needs {needed}: the controller returned a short transfer; retry, or report the device as broken")]
    TooShort {
        /// What was parsed.
        what: &'static str,
        /// Bytes given.
        len: usize,
        /// Bytes needed.
        needed: usize,
    },
    /// A field holds a value the spec does not allow.
    #[error("identify data field {field} has invalid value {value}: the controller reported bad data; check its firmware")]
    BadField {
        /// The field.
        field: &'static str,
        /// The value.
        value: u64,
    },
}

fn need(what: &'static str, b: &[u8], needed: usize) -> Result<(), ParseError> {
    if b.len() < needed {
        return Err(ParseError::TooShort {
            what,
            len: b.len(),
            needed,
        });
    }
    Ok(())
}

/// Reads fixed-width little-endian fields; callers check the length first, and every access is
/// still checked so that no input can panic.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn arr<const N: usize>(&self, off: usize) -> [u8; N] {
        let mut out = [0u8; N];
        if let Some(s) = self.0.get(off..off + N) {
            out.copy_from_slice(s);
        }
        out
    }
    fn u8(&self, off: usize) -> u8 {
        self.0.get(off).copied().unwrap_or(0)
    }
    fn u16(&self, off: usize) -> u16 {
        u16::from_le_bytes(self.arr(off))
    }
    fn u32(&self, off: usize) -> u32 {
        u32::from_le_bytes(self.arr(off))
    }
    fn u64(&self, off: usize) -> u64 {
        u64::from_le_bytes(self.arr(off))
    }
    fn text(&self, off: usize, len: usize) -> String {
        let raw = self.0.get(off..off + len).unwrap_or(&[]);
        let s: String = raw
            .iter()
            .map(|&c| {
                if c.is_ascii_graphic() || c == b' ' {
                    c as char
                } else {
                    ' '
                }
            })
            .collect();
        s.trim().to_string()
    }
}

/// Identify Controller data (CNS 01h), the fields the driver uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentifyController {
    /// PCI Vendor ID.
    pub vid: u16,
    /// PCI Subsystem Vendor ID.
    pub ssvid: u16,
    /// Serial number (trimmed).
    pub sn: String,
    /// Model number (trimmed).
    pub mn: String,
    /// Firmware revision (trimmed).
    pub fr: String,
    /// Recommended arbitration burst.
    pub rab: u8,
    /// IEEE OUI.
    pub ieee: [u8; 3],
    /// Controller Multi-path I/O and Namespace Sharing Capabilities.
    pub cmic: u8,
    /// Maximum Data Transfer Size, as a power of two of CAP.MPSMIN pages (0 = no limit).
    pub mdts: u8,
    /// Controller ID.
    pub cntlid: u16,
    /// Version.
    pub ver: u32,
    /// Optional Asynchronous Events Supported.
    pub oaes: u32,
    /// Controller Attributes.
    pub ctratt: u32,
    /// Optional Admin Command Support (bit 3 namespace management, bit 8 doorbell buffer config).
    pub oacs: u16,
    /// Abort Command Limit (0's based).
    pub acl: u8,
    /// Asynchronous Event Request Limit (0's based).
    pub aerl: u8,
    /// Log Page Attributes.
    pub lpa: u8,
    /// Error Log Page Entries (0's based).
    pub elpe: u8,
    /// ANA Transition Time.
    pub anatt: u8,
    /// ANA Capabilities.
    pub anacap: u8,
    /// ANA Group Identifier Maximum.
    pub anagrpmax: u32,
    /// Number of ANA Group Identifiers.
    pub nanagrpid: u32,
    /// SQ entry size: required (3:0) and maximum (7:4), log2.
    pub sqes: u8,
    /// CQ entry size: required (3:0) and maximum (7:4), log2.
    pub cqes: u8,
    /// Maximum outstanding commands (0 = not reported).
    pub maxcmd: u16,
    /// Number of Namespaces: the largest valid nsid.
    pub nn: u32,
    /// Optional NVM Command Support (bit 2 DSM, bit 3 write zeroes).
    pub oncs: u16,
    /// Volatile Write Cache.
    pub vwc: u8,
    /// SGL support.
    pub sgls: u32,
    /// Maximum Number of Allowed Namespaces.
    pub mnan: u32,
    /// NVM Subsystem NVMe Qualified Name.
    pub subnqn: String,
}

/// OACS bit: Namespace Management and Attachment supported.
pub const OACS_NS_MANAGEMENT: u16 = 1 << 3;
/// OACS bit: Doorbell Buffer Config supported.
pub const OACS_DOORBELL_BUFFER_CONFIG: u16 = 1 << 8;
/// ONCS bit: Dataset Management supported.
pub const ONCS_DSM: u16 = 1 << 2;
/// ONCS bit: Write Zeroes supported.
pub const ONCS_WRITE_ZEROES: u16 = 1 << 3;

impl IdentifyController {
    /// Parses 4096 bytes of Identify Controller data.
    pub fn parse(b: &[u8]) -> Result<Self, ParseError> {
        need("Identify Controller", b, IDENTIFY_SIZE)?;
        let f = Fields(b);
        Ok(IdentifyController {
            vid: f.u16(0),
            ssvid: f.u16(2),
            sn: f.text(4, 20),
            mn: f.text(24, 40),
            fr: f.text(64, 8),
            rab: f.u8(72),
            ieee: f.arr(73),
            cmic: f.u8(76),
            mdts: f.u8(77),
            cntlid: f.u16(78),
            ver: f.u32(80),
            oaes: f.u32(92),
            ctratt: f.u32(96),
            oacs: f.u16(256),
            acl: f.u8(258),
            aerl: f.u8(259),
            lpa: f.u8(261),
            elpe: f.u8(262),
            anatt: f.u8(342),
            anacap: f.u8(343),
            anagrpmax: f.u32(344),
            nanagrpid: f.u32(348),
            sqes: f.u8(512),
            cqes: f.u8(513),
            maxcmd: f.u16(514),
            nn: f.u32(516),
            oncs: f.u16(520),
            vwc: f.u8(525),
            sgls: f.u32(536),
            mnan: f.u32(540),
            subnqn: f.text(768, 256),
        })
    }
    /// The largest transfer in bytes (`None` = no limit), given CAP.MPSMIN.
    pub fn max_transfer_bytes(&self, mpsmin: u8) -> Option<u64> {
        if self.mdts == 0 {
            return None;
        }
        let shift = 12u32 + mpsmin as u32 + self.mdts as u32;
        1u64.checked_shl(shift)
            .filter(|&v| v != 0)
            .or(Some(u64::MAX))
    }
    /// Whether Doorbell Buffer Config is supported.
    pub fn supports_doorbell_buffer_config(&self) -> bool {
        self.oacs & OACS_DOORBELL_BUFFER_CONFIG != 0
    }
}

/// One LBA format entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LbaFormat {
    /// Metadata bytes per LBA.
    pub ms: u16,
    /// log2 of the LBA data size.
    pub lbads: u8,
    /// Relative performance.
    pub rp: u8,
}

/// Identify Namespace data (CNS 00h, NVM command set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentifyNamespace {
    /// Namespace size in logical blocks.
    pub nsze: u64,
    /// Namespace capacity.
    pub ncap: u64,
    /// Namespace utilization.
    pub nuse: u64,
    /// Namespace features.
    pub nsfeat: u8,
    /// Number of LBA formats (0's based).
    pub nlbaf: u8,
    /// Formatted LBA size, raw.
    pub flbas: u8,
    /// Metadata capabilities (bit 0: extended LBAs, bit 1: a separate buffer).
    pub mc: u8,
    /// End-to-end data protection capabilities (bits 0..2: types 1..3; bits 3, 4: PI in the
    /// first, last bytes of the metadata).
    pub dpc: u8,
    /// Data protection settings.
    pub dps: u8,
    /// Multi-path I/O and namespace sharing capabilities.
    pub nmic: u8,
    /// Deallocate logical block features.
    pub dlfeat: u8,
    /// ANA group identifier.
    pub anagrpid: u32,
    /// Namespace attributes.
    pub nsattr: u8,
    /// Namespace globally unique identifier.
    pub nguid: [u8; 16],
    /// IEEE extended unique identifier.
    pub eui64: [u8; 8],
    /// The LBA formats (nlbaf + 1 entries).
    pub lbaf: Vec<LbaFormat>,
}

impl IdentifyNamespace {
    /// Parses 4096 bytes of Identify Namespace data. A zero-filled structure (inactive nsid)
    /// parses to `nsze == 0`.
    pub fn parse(b: &[u8]) -> Result<Self, ParseError> {
        need("Identify Namespace", b, IDENTIFY_SIZE)?;
        let f = Fields(b);
        let nlbaf = f.u8(25);
        if nlbaf > 63 {
            return Err(ParseError::BadField {
                field: "NLBAF",
                value: nlbaf as u64,
            });
        }
        let lbaf = (0..=nlbaf as usize)
            .map(|i| {
                let v = f.u32(128 + 4 * i);
                LbaFormat {
                    ms: v as u16,
                    lbads: (v >> 16) as u8,
                    rp: ((v >> 24) & 3) as u8,
                }
            })
            .collect();
        Ok(IdentifyNamespace {
            nsze: f.u64(0),
            ncap: f.u64(8),
            nuse: f.u64(16),
            nsfeat: f.u8(24),
            nlbaf,
            flbas: f.u8(26),
            mc: f.u8(27),
            dpc: f.u8(28),
            dps: f.u8(29),
            nmic: f.u8(30),
            dlfeat: f.u8(33),
            anagrpid: f.u32(92),
            nsattr: f.u8(99),
            nguid: f.arr(104),
            eui64: f.arr(120),
            lbaf,
        })
    }
    /// The index of the formatted LBA format: FLBAS bits 3:0, plus bits 6:5 as bits 5:4 of
    /// the index when more than 16 formats exist.
    pub fn format_index(&self) -> usize {
        let low = (self.flbas & 0xf) as usize;
        if self.nlbaf >= 16 {
            low | (((self.flbas >> 5) & 0x3) as usize) << 4
        } else {
            low
        }
    }
    /// Whether metadata is transferred at the end of each LBA (extended LBA).
    pub fn metadata_extended(&self) -> bool {
        self.flbas & 0x10 != 0
    }
    /// The formatted LBA format; an error if the index is past the table or LBADS is not
    /// 9..=16 (512 bytes .. 64 KiB).
    pub fn current_format(&self) -> Result<LbaFormat, ParseError> {
        let idx = self.format_index();
        let fmt = self.lbaf.get(idx).copied().ok_or(ParseError::BadField {
            field: "FLBAS",
            value: self.flbas as u64,
        })?;
        if !(9..=16).contains(&fmt.lbads) {
            return Err(ParseError::BadField {
                field: "LBADS",
                value: fmt.lbads as u64,
            });
        }
        Ok(fmt)
    }
}

/// Parses an Active Namespace ID list (CNS 02h): the nsids up to the first zero.
pub fn parse_active_ns_list(b: &[u8]) -> Result<Vec<u32>, ParseError> {
    need("Active Namespace ID list", b, IDENTIFY_SIZE)?;
    Ok(b.chunks_exact(4)
        .take(1024)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .take_while(|&n| n != 0)
        .collect())
}

/// Namespace Identification Descriptor types.
pub mod nidt {
    /// IEEE EUI-64.
    pub const EUI64: u8 = 1;
    /// NGUID.
    pub const NGUID: u8 = 2;
    /// UUID.
    pub const UUID: u8 = 3;
    /// Command Set Identifier.
    pub const CSI: u8 = 4;
}

/// The contents of a Namespace Identification Descriptor list (CNS 03h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NsDescriptors {
    /// EUI-64, if reported.
    pub eui64: Option<[u8; 8]>,
    /// NGUID, if reported.
    pub nguid: Option<[u8; 16]>,
    /// UUID, if reported.
    pub uuid: Option<[u8; 16]>,
    /// Command Set Identifier, if reported.
    pub csi: Option<u8>,
}

/// Parses a Namespace Identification Descriptor list; unknown descriptor types are skipped.
/// A descriptor that runs past the 4 KiB structure is an error, even when `b` is longer.
pub fn parse_ns_descriptors(b: &[u8]) -> Result<NsDescriptors, ParseError> {
    need("Namespace Identification Descriptor list", b, IDENTIFY_SIZE)?;
    // Bytes past the structure (a longer buffer) are not part of the list.
    let b = b.get(..IDENTIFY_SIZE).unwrap_or(b);
    let mut out = NsDescriptors::default();
    let mut off = 0usize;
    while off + 4 <= IDENTIFY_SIZE {
        let t = b.get(off).copied().unwrap_or(0);
        let len = b.get(off + 1).copied().unwrap_or(0) as usize;
        if t == 0 {
            break;
        }
        let body = b.get(off + 4..off + 4 + len).ok_or(ParseError::BadField {
            field: "NIDL",
            value: len as u64,
        })?;
        let bad = || ParseError::BadField {
            field: "NIDL",
            value: len as u64,
        };
        match t {
            nidt::EUI64 => out.eui64 = Some(body.try_into().map_err(|_| bad())?),
            nidt::NGUID => out.nguid = Some(body.try_into().map_err(|_| bad())?),
            nidt::UUID => out.uuid = Some(body.try_into().map_err(|_| bad())?),
            nidt::CSI => out.csi = Some(*body.first().ok_or_else(bad)?),
            _ => {}
        }
        off += 4 + len;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(b: &mut [u8], off: usize, v: &[u8]) {
        b[off..off + v.len()].copy_from_slice(v);
    }

    #[test]
    fn controller_fields() {
        let mut b = vec![0u8; 4096];
        put(&mut b, 0, &0x1b36u16.to_le_bytes());
        put(&mut b, 4, b"SERIAL42            ");
        put(&mut b, 24, b"vfnvme model");
        put(&mut b, 64, b"1.0     ");
        b[77] = 5;
        put(&mut b, 78, &7u16.to_le_bytes());
        put(&mut b, 80, &0x0002_0000u32.to_le_bytes());
        put(&mut b, 256, &(1u16 << 8).to_le_bytes());
        b[259] = 3;
        b[343] = 0x5;
        b[512] = 0x66;
        b[513] = 0x44;
        put(&mut b, 516, &128u32.to_le_bytes());
        put(&mut b, 520, &0x0cu16.to_le_bytes());
        b[525] = 1;
        put(&mut b, 768, b"nqn.2014-08.org.example");
        let c = IdentifyController::parse(&b).unwrap();
        assert_eq!(c.vid, 0x1b36);
        assert_eq!(c.sn, "SERIAL42");
        assert_eq!(c.mn, "vfnvme model");
        assert_eq!(c.fr, "1.0");
        assert_eq!(c.mdts, 5);
        assert_eq!(c.cntlid, 7);
        assert_eq!(c.ver, 0x20000);
        assert!(c.supports_doorbell_buffer_config());
        assert_eq!(c.aerl, 3);
        assert_eq!(c.anacap, 5);
        assert_eq!((c.sqes, c.cqes), (0x66, 0x44));
        assert_eq!(c.nn, 128);
        assert_eq!(c.oncs, 0x0c);
        assert_eq!(c.vwc, 1);
        assert_eq!(c.subnqn, "nqn.2014-08.org.example");
        assert_eq!(c.max_transfer_bytes(0), Some(128 << 10));
    }

    #[test]
    fn namespace_fields_and_upper_flbas() {
        let mut b = vec![0u8; 4096];
        put(&mut b, 0, &1000u64.to_le_bytes());
        put(&mut b, 8, &900u64.to_le_bytes());
        b[25] = 19; // 20 formats
        b[26] = 0x20 | 0x1; // index 0x11 = 17
        b[30] = 1;
        b[33] = 0x9;
        put(&mut b, 92, &4u32.to_le_bytes());
        put(&mut b, 104, &[0xab; 16]);
        put(&mut b, 120, &[0xcd; 8]);
        put(&mut b, 128 + 4 * 17, &((12u32 << 16) | 8).to_le_bytes());
        let n = IdentifyNamespace::parse(&b).unwrap();
        assert_eq!(n.nsze, 1000);
        assert_eq!(n.ncap, 900);
        assert_eq!(n.lbaf.len(), 20);
        assert_eq!(n.format_index(), 17);
        let f = n.current_format().unwrap();
        assert_eq!((f.lbads, f.ms), (12, 8));
        assert_eq!(n.nmic, 1);
        assert_eq!(n.dlfeat, 9);
        assert_eq!(n.anagrpid, 4);
        assert_eq!(n.nguid, [0xab; 16]);
        assert_eq!(n.eui64, [0xcd; 8]);
        // With at most 16 formats, bits 6:5 are ignored.
        b[25] = 3;
        b[26] = 0x60 | 0x2;
        put(&mut b, 128 + 8, &(9u32 << 16).to_le_bytes());
        let n = IdentifyNamespace::parse(&b).unwrap();
        assert_eq!(n.format_index(), 2);
        assert_eq!(n.current_format().unwrap().lbads, 9);
    }

    #[test]
    fn bad_namespace_data_is_an_error() {
        let mut b = vec![0u8; 4096];
        b[25] = 200;
        assert!(IdentifyNamespace::parse(&b).is_err());
        b[25] = 0;
        b[26] = 5; // past the table
        assert!(IdentifyNamespace::parse(&b)
            .unwrap()
            .current_format()
            .is_err());
        b[26] = 0; // LBADS 0
        assert!(IdentifyNamespace::parse(&b)
            .unwrap()
            .current_format()
            .is_err());
        assert!(IdentifyNamespace::parse(&b[..100]).is_err());
        assert!(IdentifyController::parse(&[]).is_err());
    }

    #[test]
    fn active_list_and_descriptors() {
        let mut b = vec![0u8; 4096];
        for (i, n) in [1u32, 2, 7].iter().enumerate() {
            put(&mut b, i * 4, &n.to_le_bytes());
        }
        assert_eq!(parse_active_ns_list(&b).unwrap(), vec![1, 2, 7]);
        let full: Vec<u8> = (1..=1024u32).flat_map(|n| n.to_le_bytes()).collect();
        assert_eq!(parse_active_ns_list(&full).unwrap().len(), 1024);

        let mut d = vec![0u8; 4096];
        put(&mut d, 0, &[nidt::EUI64, 8, 0, 0]);
        put(&mut d, 4, &[1; 8]);
        put(&mut d, 12, &[nidt::UUID, 16, 0, 0]);
        put(&mut d, 16, &[2; 16]);
        put(&mut d, 32, &[9, 2, 0, 0, 0, 0]); // unknown, skipped
        put(&mut d, 38, &[nidt::CSI, 1, 0, 0, 2]);
        let p = parse_ns_descriptors(&d).unwrap();
        assert_eq!(p.eui64, Some([1; 8]));
        assert_eq!(p.uuid, Some([2; 16]));
        assert_eq!(p.nguid, None);
        assert_eq!(p.csi, Some(2));
        // A wrong length for a typed descriptor is an error, as is running off the end.
        let mut bad = vec![0u8; 4096];
        put(&mut bad, 0, &[nidt::EUI64, 4, 0, 0]);
        assert!(parse_ns_descriptors(&bad).is_err());
        let mut bad = vec![0u8; 4096];
        put(&mut bad, 0, &[9, 252, 0, 0]);
        // Chain unknown descriptors up to near the end, then one that runs past it.
        let mut off = 256;
        while off + 256 < 4096 {
            put(&mut bad, off, &[9, 252, 0, 0]);
            off += 256;
        }
        put(&mut bad, off, &[nidt::NGUID, 255, 0, 0]);
        assert!(parse_ns_descriptors(&bad).is_err());
    }

    #[test]
    fn parsing_arbitrary_bytes_never_panics() {
        // A deterministic pseudo-random sweep over many inputs and lengths.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        // Miri interprets every step: it checks the first rounds (every length once or more).
        for round in 0..if cfg!(miri) { 12 } else { 200 } {
            let len = [0, 1, 100, 4095, 4096, 5000][round % 6];
            let b: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = IdentifyController::parse(&b);
            if let Ok(n) = IdentifyNamespace::parse(&b) {
                let _ = n.current_format();
            }
            let _ = parse_active_ns_list(&b);
            let _ = parse_ns_descriptors(&b);
        }
    }
}
