//! Log pages the target returns: Error Information (01h), SMART / Health (02h), Changed
//! Namespace List (04h) and, on the discovery controller, Discovery (70h); ANA (0Ch) is
//! [`crate::ana::AnaView::log`].

use crate::config::DISCOVERY_NQN;
use crate::export::Export;
use std::net::SocketAddr;

/// Log identifier: Error Information.
pub const LID_ERROR: u8 = 0x01;
/// Log identifier: SMART / Health Information.
pub const LID_SMART: u8 = 0x02;
/// Log identifier: Changed Namespace List.
pub const LID_CHANGED_NS: u8 = 0x04;
/// Log identifier: Asymmetric Namespace Access.
pub const LID_ANA: u8 = 0x0C;
/// Log identifier: Discovery.
pub const LID_DISCOVERY: u8 = 0x70;

/// Bytes of one discovery log entry (and of the discovery log header).
pub const DISCOVERY_ENTRY_LEN: usize = 1024;

/// One Error Information entry, all zero (no errors recorded).
pub fn error_log() -> Vec<u8> {
    vec![0u8; 64]
}

/// SMART / Health: temperature 300 K, spare 100 %, nothing worn or failed.
pub fn smart_log() -> Vec<u8> {
    let mut p = vec![0u8; 512];
    p[1..3].copy_from_slice(&300u16.to_le_bytes()); // composite temperature (K)
    p[3] = 100; // available spare
    p[4] = 10; // spare threshold
    p
}

/// Changed Namespace List: no changes since it was last read (namespaces are fixed while the
/// target runs).
pub fn changed_ns_log() -> Vec<u8> {
    vec![0u8; 4096]
}

/// The discovery log for a host: one entry, the exported subsystem at `local` over TCP, if
/// `allowed`; none otherwise (a host not on the allow list learns nothing).
pub fn discovery_log(export: &Export, local: SocketAddr, allowed: bool) -> Vec<u8> {
    let n = usize::from(allowed);
    let mut p = vec![0u8; DISCOVERY_ENTRY_LEN * (1 + n)];
    p[0..8].copy_from_slice(&1u64.to_le_bytes()); // GENCTR
    p[8..16].copy_from_slice(&(n as u64).to_le_bytes()); // NUMREC
    if allowed {
        let e = &mut p[DISCOVERY_ENTRY_LEN..];
        e[0] = 3; // TRTYPE: TCP
        e[1] = if local.is_ipv4() { 1 } else { 2 }; // ADRFAM
        e[2] = 2; // SUBTYPE: NVM subsystem
        e[3] = 0; // TREQ: not specified
        e[4..6].copy_from_slice(&1u16.to_le_bytes()); // PORTID
        e[6..8].copy_from_slice(&0xFFFFu16.to_le_bytes()); // CNTLID: dynamic
        e[8..10].copy_from_slice(&32u16.to_le_bytes()); // ASQSZ
        put(e, 32, 32, &local.port().to_string());
        put(e, 256, 256, &export.config.subsystem.nqn);
        put(e, 512, 256, &local.ip().to_string());
        // TSAS (768..1024): TCP security type 0, none.
    }
    debug_assert!(export.config.subsystem.nqn != DISCOVERY_NQN);
    p
}

fn put(e: &mut [u8], at: usize, len: usize, s: &str) {
    let n = s.len().min(len);
    e[at..at + n].copy_from_slice(&s.as_bytes()[..n]);
}
