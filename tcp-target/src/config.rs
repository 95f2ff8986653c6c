//! What one target serves and how: the listening address, the exported subsystem, who may
//! connect, and the transport limits offered to hosts.

use std::net::SocketAddr;
use std::time::Duration;

/// The well-known NQN of the discovery subsystem.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// The NVM subsystem a target exports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubsystemConfig {
    /// Its NQN (`nqn.2014-08.org.example:name`).
    pub nqn: String,
    /// Host NQNs allowed to connect; empty: nobody (every Connect is refused and logged).
    pub allowed_hosts: Vec<String>,
    /// Serial number reported in Identify Controller (up to 20 ASCII characters).
    pub serial: String,
    /// Model number reported in Identify Controller (up to 40 ASCII characters).
    pub model: String,
}

impl SubsystemConfig {
    /// A subsystem named `nqn` that nobody may use yet.
    pub fn new(nqn: impl Into<String>) -> Self {
        SubsystemConfig {
            nqn: nqn.into(),
            allowed_hosts: Vec::new(),
            serial: "vfnvme-serve".into(),
            model: "vfnvme NVMe/TCP target".into(),
        }
    }

    /// Whether `hostnqn` is on the allow list.
    pub fn allows(&self, hostnqn: &str) -> bool {
        self.allowed_hosts.iter().any(|h| h == hostnqn)
    }

    /// Checks the names: an NQN must be 1..=223 bytes, start with `nqn.` and not be the
    /// discovery NQN.
    pub fn validate(&self) -> Result<(), String> {
        let ok = |n: &str| !n.is_empty() && n.len() <= 223 && n.starts_with("nqn.");
        if !ok(&self.nqn) || self.nqn == DISCOVERY_NQN {
            return Err(format!(
                "subsystem NQN {:?}: give one of 1..=223 bytes starting with \"nqn.\" (e.g. nqn.2026-12.io.vfnvme:disk0), not the discovery NQN",
                self.nqn
            ));
        }
        if let Some(h) = self.allowed_hosts.iter().find(|h| !ok(h)) {
            return Err(format!(
                "host NQN {h:?}: give one of 1..=223 bytes starting with \"nqn.\" (a host's is in /etc/nvme/hostnqn)"
            ));
        }
        Ok(())
    }
}

/// Everything a [`Target`](crate::server::Target) needs besides its backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetConfig {
    /// Where to listen (127.0.0.1:4420 by default: only this machine).
    pub listen: SocketAddr,
    /// The exported subsystem.
    pub subsystem: SubsystemConfig,
    /// MAXH2CDATA offered in ICResp (≥ 4096, a multiple of 4).
    pub maxh2cdata: u32,
    /// In-capsule data accepted on I/O queues (IOCCSZ × 16 − 64); the admin queue takes 8 KiB.
    pub in_capsule: u32,
    /// The most entries of one queue (MAXCMD, CAP.MQES + 1).
    pub max_queue_size: u16,
    /// The most I/O queues per controller.
    pub max_io_queues: u16,
    /// Connections at most (each holds a receive buffer for the largest PDU, about 200 KiB);
    /// more are closed at once, logged.
    pub max_connections: usize,
    /// How long a new connection may take to send ICReq and Connect before it is closed.
    pub connect_timeout: Duration,
}

impl TargetConfig {
    /// Defaults for `subsystem`: 127.0.0.1:4420, 128 KiB MAXH2CDATA, 8 KiB in-capsule data,
    /// 128-entry queues, 16 I/O queues, 128 connections, 10 s to connect.
    pub fn new(subsystem: SubsystemConfig) -> Self {
        TargetConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 4420)),
            subsystem,
            maxh2cdata: 128 * 1024,
            in_capsule: 8192,
            max_queue_size: 128,
            max_io_queues: 16,
            max_connections: 128,
            connect_timeout: Duration::from_secs(10),
        }
    }

    /// Checks the limits and the names.
    pub fn validate(&self) -> Result<(), String> {
        self.subsystem.validate()?;
        if self.maxh2cdata < 4096 || !self.maxh2cdata.is_multiple_of(4) {
            return Err(format!(
                "MAXH2CDATA {}: give at least 4096, a multiple of 4 (Linux's host refuses less)",
                self.maxh2cdata
            ));
        }
        if !self.in_capsule.is_multiple_of(16) || self.in_capsule > 1 << 20 {
            return Err(format!(
                "in-capsule data {}: give a multiple of 16 of at most 1 MiB",
                self.in_capsule
            ));
        }
        if !(16..=1024).contains(&self.max_queue_size) {
            return Err(format!(
                "queue size {}: give 16..=1024 (the range `nvme connect` uses)",
                self.max_queue_size
            ));
        }
        if self.max_connections == 0 {
            return Err("at least one connection".into());
        }
        if self.max_io_queues == 0 {
            return Err("at least one I/O queue".into());
        }
        Ok(())
    }
}
