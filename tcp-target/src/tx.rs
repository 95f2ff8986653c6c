//! The sending side of one connection: PDUs built into one growing buffer (its capacity is
//! kept, so a steady state allocates nothing) and written to the non-blocking socket as far as
//! it takes them.

use crate::codec::Codec;
use crate::command::Cqe;
use std::io::{ErrorKind, Write};

/// Bytes waiting to be sent above which the connection stops reading new commands.
pub const TX_HIGH_WATER: usize = 8 << 20;

/// One connection's outgoing PDUs and the queue fields every response carries.
#[derive(Debug)]
pub struct Tx {
    buf: Vec<u8>,
    pos: usize,
    /// The connection's negotiated PDU format.
    pub codec: Codec,
    /// The queue id responses report (SQID).
    pub sqid: u16,
    /// Entries of the queue (SQSIZE + 1), for SQHD; 0 before Connect.
    pub queue_size: u16,
    sqhd: u16,
}

impl Tx {
    /// An empty sender using `codec`.
    pub fn new(codec: Codec) -> Self {
        Tx {
            buf: Vec::with_capacity(64 * 1024),
            pos: 0,
            codec,
            sqid: 0,
            queue_size: 0,
            sqhd: 0,
        }
    }

    /// Moves SQHD past one more command taken from the queue.
    pub fn consumed_sqe(&mut self) {
        if self.queue_size != 0 {
            self.sqhd = (self.sqhd + 1) % self.queue_size;
        }
    }

    /// Queues a response capsule for command `cid`.
    pub fn respond(&mut self, cid: u16, status: u16, result: u64) {
        let cqe = Cqe {
            result,
            sqhd: self.sqhd,
            sqid: self.sqid,
            cid,
            status,
        };
        self.codec.capsule_resp(&mut self.buf, &cqe.to_bytes());
    }

    /// Queues `data` for command `cid` as one C2HData PDU (LAST_PDU set).
    pub fn data(&mut self, cid: u16, data: &[u8]) {
        self.codec.c2h_data(&mut self.buf, cid, 0, data, true);
    }

    /// Queues an R2T.
    pub fn r2t(&mut self, cid: u16, ttag: u16, offset: u32, len: u32) {
        self.codec.r2t(&mut self.buf, cid, ttag, offset, len);
    }

    /// Queues the ICResp.
    pub fn icresp(&mut self) {
        self.codec.icresp(&mut self.buf);
    }

    /// Queues a C2HTermReq.
    pub fn term(&mut self, fes: u16, fei: u32, offending: &[u8]) {
        Codec::c2h_term(&mut self.buf, fes, fei, offending);
    }

    /// Bytes queued and not yet written.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Writes as much as the socket takes; Err on a connection error (not on WouldBlock).
    pub fn flush<W: Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        while self.pos < self.buf.len() {
            match w.write(&self.buf[self.pos..]) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => self.pos += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
        Ok(())
    }
}
