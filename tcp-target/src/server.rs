//! The target: a listening socket and every connection, served by one thread that polls them
//! all (non-blocking sockets, no thread per connection or per I/O), the controllers they
//! form, keep-alive timers, and a clean shutdown.

use crate::ana::{AnaView, AEC_ANA_CHANGE, AER_ANA_CHANGE};
use crate::backend::Backend;
use crate::codec::Codec;
use crate::command::*;
use crate::config::TargetConfig;
use crate::conn::{Conn, Role};
use crate::ctrl::CtrlState;
use crate::error::TargetError;
use crate::export::Export;
use crate::session::Ctx;
use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Completions taken from one I/O queue per poll.
const POLL_BATCH: usize = 64;
/// Idle polls in a row that only yield the CPU before [`Target::run`] starts napping.
pub const IDLE_YIELDS: u32 = 10_000;
/// The nap of an idle [`Target::run`] between two polls.
pub const IDLE_NAP: Duration = Duration::from_micros(100);
/// Polls between two runs of the backend's admin housekeeping.
const ADMIN_EVERY: u32 = 1024;

/// What a shutdown did with the commands it found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Connections closed.
    pub connections: usize,
    /// Writes still waiting for data, and held AERs, answered "aborted due to SQ deletion".
    pub aborted: usize,
    /// Commands in the backend when the grace period ended (their queue pairs delete them).
    pub abandoned: usize,
}

/// An NVMe/TCP target serving one subsystem from `B`.
pub struct Target<B: Backend> {
    // Connections (with their backend queues) drop before the backend.
    conns: Vec<Option<Conn<B::Queue>>>,
    listener: TcpListener,
    backend: B,
    export: Export,
    ctrls: BTreeMap<u16, CtrlState>,
    ana: AnaView,
    polls: u32,
}

impl<B: Backend> Target<B> {
    /// Listens on `config.listen` and exports `backend`'s namespaces.
    pub fn bind(config: TargetConfig, backend: B) -> Result<Self, TargetError> {
        let mut config = config;
        config.validate().map_err(TargetError::Config)?;
        let most = backend.max_queue_size();
        if most < 16 {
            return Err(TargetError::Config(format!(
                "the backend's queues hold {most} commands; hosts need at least 16"
            )));
        }
        if config.max_queue_size > most {
            log::info!(
                "queue size {} lowered to {most}, what one backend queue holds",
                config.max_queue_size
            );
            config.max_queue_size = most;
        }
        let listen = |source| TargetError::Listen {
            addr: config.listen.to_string(),
            source,
        };
        let listener = TcpListener::bind(config.listen).map_err(listen)?;
        listener.set_nonblocking(true).map_err(listen)?;
        let mut export = Export::new(
            config,
            backend.namespaces().to_vec(),
            backend.max_transfer(),
        );
        export.oncs = backend.oncs();
        log::info!(
            "serving {} ({} namespaces, MDTS {} KiB) on {}; hosts allowed: {}",
            export.config.subsystem.nqn,
            export.namespaces.len(),
            export.max_transfer() / 1024,
            listener
                .local_addr()
                .map_or_else(|_| "?".into(), |a| a.to_string()),
            if export.config.subsystem.allowed_hosts.is_empty() {
                "none (add --allow-host NQN)".into()
            } else {
                export.config.subsystem.allowed_hosts.join(", ")
            }
        );
        let ana = AnaView::new(&export);
        Ok(Target {
            ana,
            listener,
            backend,
            export,
            conns: Vec::new(),
            ctrls: BTreeMap::new(),
            polls: 0,
        })
    }

    /// The address listened on (the port chosen when 0 was asked for).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.conns.iter().flatten().count()
    }

    /// Live controllers.
    pub fn controllers(&self) -> usize {
        self.ctrls.len()
    }

    /// The export (configuration, namespaces, limits).
    pub fn export(&self) -> &Export {
        &self.export
    }

    /// Serves until `stop` is set, then shuts down within `grace`. Idle, it yields the CPU
    /// between polls, and after [`IDLE_YIELDS`] idle polls in a row (nothing received,
    /// completed or in flight) naps [`IDLE_NAP`] per poll: a host's next command then waits at
    /// most that long; commands in flight never wait for a nap.
    pub fn run(&mut self, stop: &AtomicBool, grace: Duration) -> ShutdownReport {
        let mut idle = 0u32;
        while !stop.load(Ordering::Relaxed) {
            if self.poll(Instant::now()) > 0 || self.commands_in_flight() {
                idle = 0;
            } else {
                idle = idle.saturating_add(1);
                if idle > IDLE_YIELDS {
                    std::thread::sleep(IDLE_NAP);
                } else {
                    std::thread::yield_now();
                }
            }
        }
        self.shutdown(grace)
    }

    /// Whether any I/O queue has commands in the backend or waiting for data (then
    /// [`run`](Self::run) never naps: a completion may come at any poll).
    pub fn commands_in_flight(&self) -> bool {
        self.conns.iter().flatten().any(|c| match &c.role {
            Role::Io { queue, .. } => queue.busy() > 0,
            _ => false,
        })
    }

    /// One pass over the listener and every connection; returns a measure of the work done
    /// (0: nothing happened).
    pub fn poll(&mut self, now: Instant) -> usize {
        let mut work = self.accept(now);
        for i in 0..self.conns.len() {
            let Some(mut c) = self.conns[i].take() else {
                continue;
            };
            let (w, keep) = self.service(i, &mut c, now);
            work += w;
            if keep {
                self.conns[i] = Some(c);
            } else {
                self.close(c);
            }
        }
        self.keep_alive(now);
        self.polls = self.polls.wrapping_add(1);
        if self.polls.is_multiple_of(ADMIN_EVERY) {
            self.backend.poll_admin();
            if self.ana.refresh(&self.export, &self.backend) {
                self.announce_ana_change();
            }
        }
        work
    }

    fn accept(&mut self, now: Instant) -> usize {
        let mut n = 0;
        loop {
            match self.listener.accept() {
                Ok((s, peer)) => {
                    let cfg = &self.export.config;
                    if self.connections() >= cfg.max_connections {
                        log::warn!(
                            "{peer}: refused: already {} connections (the limit)",
                            cfg.max_connections
                        );
                        drop(s);
                        continue;
                    }
                    match Conn::new(s, Codec::new(cfg.maxh2cdata, cfg.in_capsule), now) {
                        Ok(c) => {
                            log::debug!("{peer}: connected");
                            match self.conns.iter().position(Option::is_none) {
                                Some(i) => self.conns[i] = Some(c),
                                None => self.conns.push(Some(c)),
                            }
                            n += 1;
                        }
                        Err(e) => log::warn!("{peer}: could not set the socket up: {e}"),
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn!("accept: {e}");
                    return n;
                }
            }
        }
    }

    /// Serves one connection; returns the work done and whether to keep it.
    fn service(&mut self, i: usize, c: &mut Conn<B::Queue>, now: Instant) -> (usize, bool) {
        if let Some(id) = c.cntlid() {
            if !self.ctrls.contains_key(&id) && c.closing.is_none() {
                c.closing = Some(format!("controller {id} is gone"));
            }
        }
        let timeout = self.export.config.connect_timeout;
        if matches!(c.role, Role::Fresh)
            && c.closing.is_none()
            && now.saturating_duration_since(c.accepted) > timeout
        {
            log::warn!(
                "{}: no ICReq and Connect within {timeout:?}; closing",
                c.peer
            );
            c.closing = Some("connect timeout".into());
        }
        let mut work = 0;
        if c.closing.is_none() {
            match c.fill() {
                Ok(n) => work += n,
                Err(e) => {
                    log::debug!("{}: {e}", c.peer);
                    return (work, false);
                }
            }
            let mut cx = Ctx {
                backend: &self.backend,
                export: &self.export,
                ctrls: &mut self.ctrls,
                ana: &self.ana,
                conn: i,
                peer: c.peer,
                local: c.local,
                now,
                disconnect: false,
            };
            let r = c.each_pdu(|tx, role, pdu| cx.pdu(tx, role, pdu));
            if let Err((e, offending)) = r {
                c.terminate(&e, &offending);
            } else if cx.disconnect {
                c.closing = Some("Disconnect".into());
            }
        }
        if let Role::Io { queue, .. } = &mut c.role {
            queue.commit();
            work += queue.poll(POLL_BATCH, &mut c.tx);
        }
        if let Err(e) = c.flush() {
            log::debug!("{}: {e}", c.peer);
            return (work, false);
        }
        if c.closing.is_some() && c.tx.pending() == 0 {
            return (work, false);
        }
        let idle_io = match &c.role {
            Role::Io { queue, .. } => queue.busy() == 0,
            _ => true,
        };
        if c.eof && idle_io && c.tx.pending() == 0 {
            return (work, false);
        }
        (work, true)
    }

    /// Completes one held AER of every I/O controller that enabled ANA change notices, with
    /// the ANA change notice: the host reads the ANA log again.
    fn announce_ana_change(&mut self) {
        for ctrl in self.ctrls.values_mut() {
            if ctrl.discovery || ctrl.aec & AEC_ANA_CHANGE == 0 {
                continue;
            }
            let Some(Some(conn)) = self.conns.get_mut(ctrl.admin_conn) else {
                continue;
            };
            if conn.cntlid() != Some(ctrl.cntlid) {
                continue;
            }
            if let Some(cid) = ctrl.aers.pop() {
                conn.tx.respond(cid, SC_SUCCESS, AER_ANA_CHANGE);
                if let Err(e) = conn.flush() {
                    log::debug!("{}: {e}", conn.peer);
                }
            }
        }
    }

    fn close(&mut self, c: Conn<B::Queue>) {
        let why = c.closing.as_deref().unwrap_or("closed by the host");
        log::debug!("{}: connection closed ({why})", c.peer);
        match c.role {
            Role::Admin { cntlid } => {
                if self.ctrls.remove(&cntlid).is_some() {
                    log::info!(
                        "controller {cntlid}: admin queue closed ({why}); its I/O queues close too"
                    );
                }
            }
            Role::Io { cntlid, qid, .. } => {
                if let Some(ctrl) = self.ctrls.get_mut(&cntlid) {
                    ctrl.io_qids &= !(1u64 << (qid % 64));
                }
            }
            Role::Fresh => {}
        }
    }

    fn keep_alive(&mut self, now: Instant) {
        let expired: Vec<u16> = self
            .ctrls
            .values()
            .filter(|c| c.keep_alive_expired(now))
            .map(|c| c.cntlid)
            .collect();
        for id in expired {
            if let Some(c) = self.ctrls.remove(&id) {
                log::warn!(
                    "controller {id} (host {}): no Keep Alive within {} ms; ending its queues",
                    c.hostnqn,
                    c.kato_ms
                );
            }
        }
    }

    /// Stops serving: answers writes still waiting for data and held AERs with "aborted due
    /// to SQ deletion", lets commands in the backend finish within `grace` and sends their
    /// responses, then closes every connection.
    pub fn shutdown(&mut self, grace: Duration) -> ShutdownReport {
        let mut report = ShutdownReport::default();
        for c in self.conns.iter_mut().flatten() {
            match &mut c.role {
                Role::Io { queue, .. } => report.aborted += queue.abort_waiting(&mut c.tx),
                Role::Admin { cntlid } => {
                    if let Some(ctrl) = self.ctrls.get_mut(cntlid) {
                        for cid in ctrl.aers.drain(..) {
                            c.tx.respond(cid, SC_ABORTED_SQ_DELETION, 0);
                            report.aborted += 1;
                        }
                    }
                }
                Role::Fresh => {}
            }
            c.closing
                .get_or_insert_with(|| "the target is shutting down".into());
        }
        let deadline = Instant::now() + grace;
        loop {
            let mut busy = 0;
            for c in self.conns.iter_mut().flatten() {
                if let Role::Io { queue, .. } = &mut c.role {
                    queue.commit();
                    queue.poll(POLL_BATCH, &mut c.tx);
                    busy += queue.busy();
                }
                if c.flush().is_ok() {
                    busy += c.tx.pending();
                }
            }
            if busy == 0 || Instant::now() >= deadline {
                break;
            }
            std::thread::yield_now();
        }
        for c in self.conns.drain(..).flatten() {
            if let Role::Io { queue, .. } = &c.role {
                report.abandoned += queue.busy();
            }
            let _ = c.stream.shutdown(std::net::Shutdown::Both);
            report.connections += 1;
        }
        self.ctrls.clear();
        log::info!(
            "shut down: {} connections closed, {} commands aborted, {} left to the backend",
            report.connections,
            report.aborted,
            report.abandoned
        );
        report
    }
}
