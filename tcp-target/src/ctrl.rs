//! The state of one target controller (one admin queue's association): its properties
//! (CAP, VS, CC, CSTS), keep-alive timer, features and held Asynchronous Event Requests.

use std::time::{Duration, Instant};

/// Property offsets (NVMe over Fabrics: the controller registers as properties).
pub mod prop {
    /// Controller Capabilities (8 bytes).
    pub const CAP: u32 = 0x00;
    /// Version (4 bytes).
    pub const VS: u32 = 0x08;
    /// Controller Configuration (4 bytes).
    pub const CC: u32 = 0x14;
    /// Controller Status (4 bytes).
    pub const CSTS: u32 = 0x1C;
    /// NVM Subsystem Reset (4 bytes).
    pub const NSSR: u32 = 0x20;
}

/// The version reported (VS and Identify Controller VER): NVMe 1.4.
pub const VERSION: u32 = 0x0001_0400;

/// The most AERs held per controller (AERL + 1).
pub const MAX_AERS: usize = 4;

/// One controller's state.
#[derive(Debug)]
pub struct CtrlState {
    /// Controller ID, returned by Connect and in Identify Controller.
    pub cntlid: u16,
    /// A controller of the discovery subsystem.
    pub discovery: bool,
    /// The host's NQN (I/O queue Connects must match it).
    pub hostnqn: String,
    /// The host identifier from Connect.
    pub hostid: [u8; 16],
    /// CC as the host set it.
    pub cc: u32,
    /// Keep Alive Timeout in ms (0: none).
    pub kato_ms: u32,
    /// When the keep-alive timer last restarted.
    pub last_keep_alive: Instant,
    /// Asynchronous Event Configuration (feature 0Bh).
    pub aec: u32,
    /// Number of Queues granted (feature 07h: NSQA/NCQA − 1, 0 until set).
    pub queues: u32,
    /// I/O queue ids connected (bit per qid, up to 64).
    pub io_qids: u64,
    /// Command identifiers of the held AERs.
    pub aers: Vec<u16>,
    /// Connection index of the admin queue.
    pub admin_conn: usize,
}

impl CtrlState {
    /// A fresh controller for `hostnqn`, its admin queue on connection `admin_conn`.
    pub fn new(
        cntlid: u16,
        discovery: bool,
        hostnqn: String,
        hostid: [u8; 16],
        kato_ms: u32,
        admin_conn: usize,
        now: Instant,
    ) -> Self {
        CtrlState {
            cntlid,
            discovery,
            hostnqn,
            hostid,
            cc: 0,
            kato_ms,
            last_keep_alive: now,
            aec: 0,
            queues: 0,
            io_qids: 0,
            aers: Vec::with_capacity(MAX_AERS),
            admin_conn,
        }
    }

    /// Whether CC.EN is set (I/O queues may connect).
    pub fn enabled(&self) -> bool {
        self.cc & 1 != 0
    }

    /// CAP for a queue of at most `max_queue_size` entries: MQES, CQR, TO 15 s (in 500 ms
    /// units), CSS NVM, MPSMIN/MPSMAX 4 KiB.
    pub fn cap(max_queue_size: u16) -> u64 {
        let mqes = u64::from(max_queue_size - 1);
        let cqr = 1 << 16;
        let to = 30 << 24;
        let css_nvm = 1 << 37;
        mqes | cqr | to | css_nvm
    }

    /// CSTS: RDY follows CC.EN at once; SHST reports a finished shutdown once CC.SHN is set.
    pub fn csts(&self) -> u32 {
        let rdy = self.cc & 1;
        let shst = if (self.cc >> 14) & 3 != 0 { 2 << 2 } else { 0 };
        rdy | shst
    }

    /// Property Get: the value, or None for an offset or size the target doesn't have.
    pub fn property_get(&self, offset: u32, eight: bool, max_queue_size: u16) -> Option<u64> {
        match (offset, eight) {
            (prop::CAP, true) => Some(Self::cap(max_queue_size)),
            (prop::VS, false) => Some(VERSION.into()),
            (prop::CC, false) => Some(self.cc.into()),
            (prop::CSTS, false) => Some(self.csts().into()),
            (prop::NSSR, false) => Some(0),
            _ => None,
        }
    }

    /// Property Set: false for an offset or size that can't be written.
    pub fn property_set(&mut self, offset: u32, eight: bool, value: u64) -> bool {
        match (offset, eight) {
            (prop::CC, false) => {
                self.cc = value as u32;
                true
            }
            _ => false,
        }
    }

    /// Restarts the keep-alive timer.
    pub fn keep_alive(&mut self, now: Instant) {
        self.last_keep_alive = now;
    }

    /// Whether the keep-alive timer ran out at `now`.
    pub fn keep_alive_expired(&self, now: Instant) -> bool {
        self.kato_ms != 0
            && now.saturating_duration_since(self.last_keep_alive)
                > Duration::from_millis(self.kato_ms.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csts_follows_cc_and_the_keep_alive_timer_runs_out() {
        let t0 = Instant::now();
        let mut c = CtrlState::new(1, false, "nqn.h".into(), [0; 16], 5000, 0, t0);
        assert_eq!(c.property_get(prop::CSTS, false, 128), Some(0));
        assert!(c.property_set(prop::CC, false, 0x0046_0001));
        assert_eq!(c.property_get(prop::CSTS, false, 128), Some(1));
        assert!(c.property_set(prop::CC, false, 0x0046_4001));
        assert_eq!(c.csts() >> 2 & 3, 2);
        assert_eq!(
            c.property_get(prop::CAP, true, 128).map(|v| v & 0xffff),
            Some(127)
        );
        assert_eq!(c.property_get(prop::CAP, false, 128), None);
        assert!(!c.property_set(prop::CAP, true, 0));
        assert!(!c.keep_alive_expired(t0 + Duration::from_millis(5000)));
        assert!(c.keep_alive_expired(t0 + Duration::from_millis(5001)));
        c.keep_alive(t0 + Duration::from_millis(5001));
        assert!(!c.keep_alive_expired(t0 + Duration::from_millis(9000)));
    }
}
