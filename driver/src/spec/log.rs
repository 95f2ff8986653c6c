//! Log page identifiers and asynchronous event decoding.

/// Log page identifiers.
pub mod log_id {
    /// Error Information.
    pub const ERROR: u8 = 0x01;
    /// SMART / Health Information.
    pub const SMART: u8 = 0x02;
    /// Firmware Slot Information.
    pub const FIRMWARE_SLOT: u8 = 0x03;
    /// Changed Namespace List.
    pub const CHANGED_NS_LIST: u8 = 0x04;
    /// Asymmetric Namespace Access.
    pub const ANA: u8 = 0x0c;
}

/// Asynchronous event types (AER completion DW0 bits 2:0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncEventType {
    /// Error status.
    Error,
    /// SMART / health status.
    Smart,
    /// Notice (e.g. namespace attribute changed, ANA change).
    Notice,
    /// Immediate.
    Immediate,
    /// I/O command specific status.
    IoCommandSpecific,
    /// Vendor specific.
    Vendor,
    /// A reserved value.
    Reserved(u8),
}

/// Notice event information values (type Notice).
pub mod notice {
    /// Namespace Attribute Changed.
    pub const NS_ATTRIBUTE_CHANGED: u8 = 0x00;
    /// Firmware Activation Starting.
    pub const FIRMWARE_ACTIVATION: u8 = 0x01;
    /// Telemetry Log Changed.
    pub const TELEMETRY: u8 = 0x02;
    /// Asymmetric Namespace Access Change.
    pub const ANA_CHANGE: u8 = 0x03;
}

/// A decoded Asynchronous Event Request completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEvent {
    /// Event type.
    pub kind: AsyncEventType,
    /// Event information (meaning depends on the type).
    pub info: u8,
    /// The log page to read (which also clears the event).
    pub log_page: u8,
}

impl AsyncEvent {
    /// Decodes AER completion DW0.
    pub const fn from_dw0(dw0: u32) -> Self {
        let t = (dw0 & 0x7) as u8;
        AsyncEvent {
            kind: match t {
                0 => AsyncEventType::Error,
                1 => AsyncEventType::Smart,
                2 => AsyncEventType::Notice,
                3 => AsyncEventType::Immediate,
                6 => AsyncEventType::IoCommandSpecific,
                7 => AsyncEventType::Vendor,
                r => AsyncEventType::Reserved(r),
            },
            info: (dw0 >> 8) as u8,
            log_page: (dw0 >> 16) as u8,
        }
    }
    /// Whether this is the Namespace Attribute Changed notice.
    pub fn is_namespace_changed(&self) -> bool {
        self.kind == AsyncEventType::Notice && self.info == notice::NS_ATTRIBUTE_CHANGED
    }
}

/// Parses a Changed Namespace List log page: the nsids up to the first zero. `None` means
/// more than 1024 namespaces changed (first entry FFFFFFFFh): rescan everything.
pub fn parse_changed_ns_list(b: &[u8]) -> Option<Vec<u32>> {
    let list: Vec<u32> = b
        .chunks_exact(4)
        .take(1024)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .take_while(|&n| n != 0)
        .collect();
    if list.first() == Some(&u32::MAX) {
        None
    } else {
        Some(list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn aer_decoding() {
        let e = AsyncEvent::from_dw0(2 | ((log_id::CHANGED_NS_LIST as u32) << 16));
        assert!(e.is_namespace_changed());
        assert_eq!(e.log_page, 4);
        let a = AsyncEvent::from_dw0(2 | (3 << 8) | (0x0c << 16));
        assert_eq!(a.info, notice::ANA_CHANGE);
        assert_eq!(a.log_page, log_id::ANA);
        assert_eq!(AsyncEvent::from_dw0(4).kind, AsyncEventType::Reserved(4));
    }
    #[test]
    fn changed_list() {
        let mut b = vec![0u8; 4096];
        b[0..4].copy_from_slice(&3u32.to_le_bytes());
        b[4..8].copy_from_slice(&9u32.to_le_bytes());
        assert_eq!(parse_changed_ns_list(&b), Some(vec![3, 9]));
        b[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(parse_changed_ns_list(&b), None);
    }
}
