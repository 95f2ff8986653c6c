//! A minimal NVMe/TCP host for testing `vfnvme serve` (crate `vfnvme-target`): ICReq, Fabrics
//! Connect, Property Get/Set, Identify, Read and Write (in-capsule or by R2T/H2CData), with
//! header and data digests. Written from the NVMe/TCP layouts independently of the target's
//! codec, so that an encoding mistake on either side shows. Blocking socket with a read
//! timeout: every wait has a deadline.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The discovery subsystem's NQN.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// CRC32C (Castagnoli, reflected), bitwise: slow and obviously right.
pub fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A completion as the host sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// DW0–DW1.
    pub result: u64,
    /// SQ head.
    pub sqhd: u16,
    /// SQ id.
    pub sqid: u16,
    /// Command id.
    pub cid: u16,
    /// 15-bit status field.
    pub status: u16,
}

/// A PDU received from the target.
#[derive(Debug)]
pub enum Received {
    /// ICResp: digests and MAXH2CDATA.
    IcResp {
        /// Header digest on.
        hdgst: bool,
        /// Data digest on.
        ddgst: bool,
        /// Largest H2CData.
        maxh2cdata: u32,
    },
    /// A response capsule.
    Resp(Completion),
    /// Data for command `cid` at `offset`.
    Data {
        /// Command id.
        cid: u16,
        /// Offset.
        offset: u32,
        /// Bytes.
        data: Vec<u8>,
    },
    /// R2T.
    R2t {
        /// Command id.
        cid: u16,
        /// Transfer tag.
        ttag: u16,
        /// Offset asked for.
        offset: u32,
        /// Length asked for.
        len: u32,
    },
    /// The target ended the connection.
    Term {
        /// Fatal error status.
        fes: u16,
    },
}

/// One host connection.
pub struct Client {
    /// The socket.
    pub stream: TcpStream,
    hdgst: bool,
    ddgst: bool,
    maxh2cdata: u32,
    next_cid: u16,
    /// In-capsule data limit for writes (bytes).
    pub in_capsule: usize,
}

impl Client {
    /// Connects the socket (no ICReq yet).
    pub fn open(addr: SocketAddr) -> std::io::Result<Self> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
        stream.set_read_timeout(Some(Duration::from_secs(20)))?;
        stream.set_nodelay(true)?;
        Ok(Client {
            stream,
            hdgst: false,
            ddgst: false,
            maxh2cdata: 0,
            next_cid: 1,
            in_capsule: 8192,
        })
    }

    /// Sends raw bytes.
    pub fn send_raw(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(b)
    }

    /// ICReq asking for the digests given; returns the ICResp's MAXH2CDATA.
    pub fn icreq(&mut self, hdgst: bool, ddgst: bool) -> u32 {
        let mut p = vec![0u8; 128];
        p[0] = 0;
        p[2] = 128;
        p[4..8].copy_from_slice(&128u32.to_le_bytes());
        p[11] = u8::from(hdgst) | (u8::from(ddgst) << 1);
        self.stream.write_all(&p).expect("send ICReq");
        match self.recv() {
            Received::IcResp {
                hdgst: h,
                ddgst: d,
                maxh2cdata,
            } => {
                assert_eq!((h, d), (hdgst, ddgst), "ICResp digests");
                assert!(
                    maxh2cdata >= 4096 && maxh2cdata % 4 == 0,
                    "MAXH2CDATA {maxh2cdata}"
                );
                self.hdgst = h;
                self.ddgst = d;
                self.maxh2cdata = maxh2cdata;
                maxh2cdata
            }
            other => panic!("expected ICResp, got {other:?}"),
        }
    }

    fn pdu(&self, t: u8, flags: u8, header: &[u8], data: &[u8]) -> Vec<u8> {
        let hlen = header.len() + 8;
        let hd = if self.hdgst { 4 } else { 0 };
        let dd = if self.ddgst && !data.is_empty() { 4 } else { 0 };
        let mut f = flags;
        if self.hdgst {
            f |= 1;
        }
        if dd != 0 {
            f |= 2;
        }
        let pdo = if data.is_empty() {
            0
        } else {
            (hlen + hd) as u8
        };
        let plen = (hlen + hd + data.len() + dd) as u32;
        let mut p = vec![t, f, hlen as u8, pdo];
        p.extend_from_slice(&plen.to_le_bytes());
        p.extend_from_slice(header);
        if self.hdgst {
            let d = crc32c(&p);
            p.extend_from_slice(&d.to_le_bytes());
        }
        p.extend_from_slice(data);
        if dd != 0 {
            p.extend_from_slice(&crc32c(data).to_le_bytes());
        }
        p
    }

    /// Sends a command capsule; returns its cid (set in the SQE here).
    pub fn send_cmd(&mut self, mut sqe: [u8; 64], data: &[u8]) -> u16 {
        let cid = self.next_cid;
        self.next_cid = self.next_cid.wrapping_add(1).max(1);
        sqe[2..4].copy_from_slice(&cid.to_le_bytes());
        let p = self.pdu(4, 0, &sqe, data);
        self.stream.write_all(&p).expect("send capsule");
        cid
    }

    /// Whether the target closed the connection: the next read ends the stream (a PDU, or the
    /// read timeout running out, is not a close).
    pub fn closed(&mut self) -> bool {
        match self.try_recv() {
            Err(e) => matches!(
                e.kind(),
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
            ),
            Ok(_) => false,
        }
    }

    /// Receives one PDU (panics on a malformed one or a timeout).
    pub fn recv(&mut self) -> Received {
        self.try_recv().expect("receive a PDU")
    }

    /// Receives one PDU; an I/O error (closed, timeout) comes back as is.
    pub fn try_recv(&mut self) -> std::io::Result<Received> {
        let mut ch = [0u8; 8];
        self.stream.read_exact(&mut ch)?;
        let plen = u32::from_le_bytes([ch[4], ch[5], ch[6], ch[7]]) as usize;
        assert!((8..=(1 << 24)).contains(&plen), "PLEN {plen}");
        let mut rest = vec![0u8; plen - 8];
        self.stream.read_exact(&mut rest)?;
        let mut p = ch.to_vec();
        p.extend_from_slice(&rest);
        let (t, flags, hlen, pdo) = (p[0], p[1], usize::from(p[2]), usize::from(p[3]));
        let u16_at = |o: usize| u16::from_le_bytes([p[o], p[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes([p[o], p[o + 1], p[o + 2], p[o + 3]]);
        if t == 1 {
            assert_eq!(plen, 128);
            return Ok(Received::IcResp {
                hdgst: p[11] & 1 != 0,
                ddgst: p[11] & 2 != 0,
                maxh2cdata: u32_at(12),
            });
        }
        if t == 3 {
            return Ok(Received::Term { fes: u16_at(8) });
        }
        assert_eq!(flags & 1 != 0, self.hdgst, "HDGSTF on type {t}");
        if self.hdgst {
            assert_eq!(
                u32_at(hlen),
                crc32c(&p[..hlen]),
                "header digest of type {t}"
            );
        }
        let hd = if self.hdgst { 4 } else { 0 };
        match t {
            5 => {
                assert_eq!(hlen, 24);
                Ok(Received::Resp(Completion {
                    result: u64::from(u32_at(8)) | (u64::from(u32_at(12)) << 32),
                    sqhd: u16_at(16),
                    sqid: u16_at(18),
                    cid: u16_at(20),
                    status: u16_at(22) >> 1,
                }))
            }
            7 => {
                assert_eq!(pdo, hlen + hd, "C2HData PDO");
                let dd = if flags & 2 != 0 { 4 } else { 0 };
                assert_eq!(dd != 0, self.ddgst, "DDGSTF");
                let data = p[pdo..plen - dd].to_vec();
                assert_eq!(u32_at(16) as usize, data.len(), "DATAL");
                if dd != 0 {
                    assert_eq!(u32_at(plen - 4), crc32c(&data), "data digest");
                }
                Ok(Received::Data {
                    cid: u16_at(8),
                    offset: u32_at(12),
                    data,
                })
            }
            9 => Ok(Received::R2t {
                cid: u16_at(8),
                ttag: u16_at(10),
                offset: u32_at(12),
                len: u32_at(16),
            }),
            other => panic!("PDU type {other} from the target"),
        }
    }

    /// Waits for the response to `cid`, collecting C2H data on the way.
    pub fn wait(&mut self, cid: u16) -> (Completion, Vec<u8>) {
        let mut data = Vec::new();
        loop {
            match self.recv() {
                Received::Resp(c) if c.cid == cid => return (c, data),
                Received::Data {
                    cid: c,
                    offset,
                    data: d,
                } if c == cid => {
                    assert_eq!(offset as usize, data.len(), "C2HData in order");
                    data.extend_from_slice(&d);
                }
                other => panic!("waiting for command {cid:#x}: got {other:?}"),
            }
        }
    }

    /// Fabrics Connect of queue `qid` (KATO 5 s on the admin queue); returns the completion.
    pub fn connect(
        &mut self,
        qid: u16,
        sqsize: u16,
        cntlid: u16,
        subnqn: &str,
        hostnqn: &str,
    ) -> Completion {
        let kato = if qid == 0 { 5000 } else { 0 };
        self.connect_kato(qid, sqsize, cntlid, subnqn, hostnqn, kato)
    }

    /// Fabrics Connect of queue `qid` with a Keep Alive Timeout of `kato_ms`.
    pub fn connect_kato(
        &mut self,
        qid: u16,
        sqsize: u16,
        cntlid: u16,
        subnqn: &str,
        hostnqn: &str,
        kato_ms: u32,
    ) -> Completion {
        let mut sqe = [0u8; 64];
        sqe[0] = 0x7F;
        sqe[4] = 0x01;
        sqe[32..36].copy_from_slice(&1024u32.to_le_bytes());
        sqe[39] = 0x01; // data block, offset
        sqe[42..44].copy_from_slice(&qid.to_le_bytes());
        sqe[44..46].copy_from_slice(&sqsize.to_le_bytes());
        sqe[48..52].copy_from_slice(&kato_ms.to_le_bytes());
        let mut data = vec![0u8; 1024];
        data[0..16].copy_from_slice(b"vfnvme-test-host");
        data[16..18].copy_from_slice(&cntlid.to_le_bytes());
        data[256..256 + subnqn.len()].copy_from_slice(subnqn.as_bytes());
        data[512..512 + hostnqn.len()].copy_from_slice(hostnqn.as_bytes());
        let cid = self.send_cmd(sqe, &data);
        self.wait(cid).0
    }

    /// Property Get (8 bytes when `eight`).
    pub fn prop_get(&mut self, offset: u32, eight: bool) -> Completion {
        let mut sqe = [0u8; 64];
        sqe[0] = 0x7F;
        sqe[4] = 0x04;
        sqe[40] = u8::from(eight);
        sqe[44..48].copy_from_slice(&offset.to_le_bytes());
        let cid = self.send_cmd(sqe, &[]);
        self.wait(cid).0
    }

    /// Property Set of a 4-byte property.
    pub fn prop_set(&mut self, offset: u32, value: u32) -> Completion {
        let mut sqe = [0u8; 64];
        sqe[0] = 0x7F;
        sqe[4] = 0x00;
        sqe[44..48].copy_from_slice(&offset.to_le_bytes());
        sqe[48..52].copy_from_slice(&value.to_le_bytes());
        let cid = self.send_cmd(sqe, &[]);
        self.wait(cid).0
    }

    fn transport_sgl(sqe: &mut [u8; 64], len: u32) {
        sqe[32..36].copy_from_slice(&len.to_le_bytes());
        sqe[39] = 0x5A;
    }

    /// An admin command reading `len` bytes (Identify, Get Log Page, ...).
    pub fn admin_read(
        &mut self,
        opcode: u8,
        nsid: u32,
        cdw10: u32,
        cdw11: u32,
        len: u32,
    ) -> (Completion, Vec<u8>) {
        let mut sqe = [0u8; 64];
        sqe[0] = opcode;
        sqe[4..8].copy_from_slice(&nsid.to_le_bytes());
        sqe[40..44].copy_from_slice(&cdw10.to_le_bytes());
        sqe[44..48].copy_from_slice(&cdw11.to_le_bytes());
        Self::transport_sgl(&mut sqe, len);
        let cid = self.send_cmd(sqe, &[]);
        self.wait(cid)
    }

    /// An admin command without data.
    pub fn admin(&mut self, opcode: u8, cdw10: u32, cdw11: u32) -> Completion {
        let mut sqe = [0u8; 64];
        sqe[0] = opcode;
        sqe[40..44].copy_from_slice(&cdw10.to_le_bytes());
        sqe[44..48].copy_from_slice(&cdw11.to_le_bytes());
        Self::transport_sgl(&mut sqe, 0);
        let cid = self.send_cmd(sqe, &[]);
        self.wait(cid).0
    }

    fn rw_sqe(opcode: u8, nsid: u32, lba: u64, blocks: u32) -> [u8; 64] {
        let mut sqe = [0u8; 64];
        sqe[0] = opcode;
        sqe[1] = 0x40; // PSDT: SGL
        sqe[4..8].copy_from_slice(&nsid.to_le_bytes());
        sqe[40..48].copy_from_slice(&lba.to_le_bytes());
        sqe[48..52].copy_from_slice(&(blocks - 1).to_le_bytes());
        sqe
    }

    /// Reads `blocks` blocks of `block_size` at `lba`.
    pub fn read(
        &mut self,
        nsid: u32,
        lba: u64,
        blocks: u32,
        block_size: u32,
    ) -> (Completion, Vec<u8>) {
        let mut sqe = Self::rw_sqe(0x02, nsid, lba, blocks);
        Self::transport_sgl(&mut sqe, blocks * block_size);
        let cid = self.send_cmd(sqe, &[]);
        self.wait(cid)
    }

    /// Writes `data` at `lba`: in-capsule when it fits, else answering R2Ts with H2CData of at
    /// most MAXH2CDATA bytes each.
    pub fn write(&mut self, nsid: u32, lba: u64, data: &[u8], block_size: u32) -> Completion {
        let blocks = (data.len() / block_size as usize) as u32;
        let mut sqe = Self::rw_sqe(0x01, nsid, lba, blocks);
        sqe[32..36].copy_from_slice(&(data.len() as u32).to_le_bytes());
        if data.len() <= self.in_capsule {
            sqe[39] = 0x01;
            let cid = self.send_cmd(sqe, data);
            return self.wait(cid).0;
        }
        sqe[39] = 0x5A;
        let cid = self.send_cmd(sqe, &[]);
        loop {
            match self.recv() {
                Received::Resp(c) if c.cid == cid => return c,
                Received::R2t {
                    cid: c,
                    ttag,
                    offset,
                    len,
                } if c == cid => {
                    let mut at = offset as usize;
                    let end = (offset + len) as usize;
                    while at < end {
                        let n = (end - at).min(self.maxh2cdata as usize);
                        let mut h = [0u8; 16];
                        h[0..2].copy_from_slice(&cid.to_le_bytes());
                        h[2..4].copy_from_slice(&ttag.to_le_bytes());
                        h[4..8].copy_from_slice(&(at as u32).to_le_bytes());
                        h[8..12].copy_from_slice(&(n as u32).to_le_bytes());
                        let last = if at + n == end { 0x04 } else { 0 };
                        let p = self.pdu(6, last, &h, &data[at..at + n]);
                        self.stream.write_all(&p).expect("send H2CData");
                        at += n;
                    }
                }
                other => panic!("write {cid:#x}: got {other:?}"),
            }
        }
    }
}
