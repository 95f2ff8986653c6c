//! One TCP connection to a host: its non-blocking socket, receive buffer, sender ([`Tx`]),
//! and what queue it carries once Connect made it one ([`Role`]).

use crate::backend::BackendQueue;
use crate::codec::Codec;
use crate::error::PduError;
use crate::io::IoQueue;
use crate::tx::Tx;
use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

/// What a connection carries.
pub enum Role<Q: BackendQueue> {
    /// ICReq not yet answered, or no Connect yet.
    Fresh,
    /// The admin queue of controller `cntlid`.
    Admin {
        /// The controller.
        cntlid: u16,
    },
    /// I/O queue `qid` of controller `cntlid`.
    Io {
        /// The controller.
        cntlid: u16,
        /// The queue id.
        qid: u16,
        /// Its commands.
        queue: IoQueue<Q>,
    },
}

/// One host connection.
pub struct Conn<Q: BackendQueue> {
    /// The socket (non-blocking).
    pub stream: TcpStream,
    /// The host's address.
    pub peer: SocketAddr,
    /// The address the host connected to.
    pub local: SocketAddr,
    rx: Box<[u8]>,
    rx_len: usize,
    /// The sending side.
    pub tx: Tx,
    /// The queue carried.
    pub role: Role<Q>,
    /// Why the connection is ending (it sends what it has, then closes).
    pub closing: Option<String>,
    /// The peer closed its side.
    pub eof: bool,
    /// When the connection was accepted (it must be connected within the connect timeout).
    pub accepted: Instant,
}

impl<Q: BackendQueue> Conn<Q> {
    /// A connection over `stream` (made non-blocking here) using `codec` limits, accepted at
    /// `now`.
    pub fn new(stream: TcpStream, codec: Codec, now: Instant) -> std::io::Result<Self> {
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        let peer = stream.peer_addr()?;
        let local = stream.local_addr()?;
        let biggest = [
            crate::pdu::ICREQ,
            crate::pdu::CAPSULE_CMD,
            crate::pdu::H2C_DATA,
            crate::pdu::H2C_TERM_REQ,
        ]
        .map(|t| codec.max_plen(t))
        .into_iter()
        .max()
        .unwrap_or(0) as usize;
        Ok(Conn {
            stream,
            peer,
            local,
            rx: vec![0u8; biggest + 64 * 1024].into_boxed_slice(),
            rx_len: 0,
            tx: Tx::new(codec),
            role: Role::Fresh,
            closing: None,
            eof: false,
            accepted: now,
        })
    }

    /// The controller this connection belongs to, if connected.
    pub fn cntlid(&self) -> Option<u16> {
        match self.role {
            Role::Fresh => None,
            Role::Admin { cntlid } | Role::Io { cntlid, .. } => Some(cntlid),
        }
    }

    /// Reads what the socket has into the receive buffer; returns the bytes read (0 also at
    /// end of stream, which sets `eof`).
    pub fn fill(&mut self) -> std::io::Result<usize> {
        let mut total = 0;
        while self.rx_len < self.rx.len() {
            match self.stream.read(&mut self.rx[self.rx_len..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => {
                    self.rx_len += n;
                    total += n;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(total)
    }

    /// Runs `f` on each whole PDU in the receive buffer, in order, until it returns an error
    /// or the connection starts closing; keeps a partial PDU for the next read.
    pub fn each_pdu(
        &mut self,
        mut f: impl FnMut(&mut Tx, &mut Role<Q>, crate::pdu::Pdu<'_>) -> Result<(), PduError>,
    ) -> Result<(), (PduError, Vec<u8>)> {
        let mut at = 0;
        let mut result = Ok(());
        while self.closing.is_none() && self.tx.pending() < crate::tx::TX_HIGH_WATER {
            let codec = self.tx.codec;
            match codec.decode(&self.rx[at..self.rx_len]) {
                Ok(None) => break,
                Ok(Some((pdu, used))) => {
                    if let Err(e) = f(&mut self.tx, &mut self.role, pdu) {
                        let end = (at + used).min(at + crate::pdu::TERM_DATA_MAX);
                        result = Err((e, self.rx[at..end].to_vec()));
                        break;
                    }
                    at += used;
                }
                Err(e) => {
                    let end = self.rx_len.min(at + crate::pdu::TERM_DATA_MAX);
                    result = Err((e, self.rx[at..end].to_vec()));
                    break;
                }
            }
        }
        self.rx.copy_within(at..self.rx_len, 0);
        self.rx_len -= at;
        result
    }

    /// Ends the connection for `e`: a C2HTermReq, then close once it is sent.
    pub fn terminate(&mut self, e: &PduError, offending: &[u8]) {
        log::warn!("{}: ending the connection: {e}", self.peer);
        self.tx.term(e.fes() as u16, e.fei(), offending);
        self.closing = Some(e.to_string());
    }

    /// Sends what it can.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.tx.flush(&mut self.stream)
    }
}
