//! Parsing and building NVMe/TCP PDUs on one connection: [`Codec`] holds what ICReq/ICResp
//! negotiated (digests, MAXH2CDATA, the in-capsule limit) and checks every PDU against it.
//!
//! Parsing is strict and total: any byte string gives a [`Pdu`], "need more bytes" (`None`)
//! or a typed [`PduError`]; it never panics and never reads past the PDU's PLEN. The common
//! header is checked before the rest of a PDU is waited for, so a garbage stream fails at its
//! first 8 bytes instead of stalling on a huge PLEN.

use crate::digest::{crc32c, DIGEST_LEN};
use crate::error::PduError;
use crate::pdu::*;

/// The largest MAXH2CDATA the target offers (bytes of data per H2CData PDU).
pub const DEFAULT_MAXH2CDATA: u32 = 128 * 1024;

/// The negotiated state of one connection's PDU stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Codec {
    /// ICReq was received and answered: the connection carries capsules now.
    pub ready: bool,
    /// Header digests on every PDU after ICResp.
    pub hdgst: bool,
    /// Data digests on every PDU with data after ICResp.
    pub ddgst: bool,
    /// The most data bytes in one H2CData PDU (MAXH2CDATA offered in ICResp).
    pub maxh2cdata: u32,
    /// The most in-capsule data bytes of a command capsule.
    pub in_capsule_max: u32,
}

impl Codec {
    /// A codec waiting for ICReq, offering `maxh2cdata` and accepting `in_capsule_max` bytes
    /// of in-capsule data.
    pub fn new(maxh2cdata: u32, in_capsule_max: u32) -> Self {
        Codec {
            ready: false,
            hdgst: false,
            ddgst: false,
            maxh2cdata,
            in_capsule_max,
        }
    }

    fn hd(&self) -> usize {
        if self.hdgst {
            DIGEST_LEN
        } else {
            0
        }
    }

    /// The largest PLEN accepted for a PDU of type `t` (0 for a type never accepted).
    pub fn max_plen(&self, t: u8) -> u32 {
        let d = 2 * DIGEST_LEN as u32;
        match t {
            ICREQ => IC_LEN as u32,
            CAPSULE_CMD => (CAPSULE_CMD_HLEN as u32 + d).saturating_add(self.in_capsule_max),
            H2C_DATA => (SHORT_HLEN as u32 + d).saturating_add(self.maxh2cdata),
            H2C_TERM_REQ => (SHORT_HLEN + TERM_DATA_MAX) as u32 + d,
            _ => 0,
        }
    }

    /// Parses the PDU at the start of `buf`: `Ok(None)` if more bytes are needed, else the PDU
    /// and the bytes it took. Errors end the connection.
    pub fn decode<'a>(&self, buf: &'a [u8]) -> Result<Option<(Pdu<'a>, usize)>, PduError> {
        let Some(first) = buf.first_chunk::<COMMON_HEADER_LEN>() else {
            return Ok(None);
        };
        let ch = CommonHeader::read(first);
        let hlen = match ch.pdu_type {
            ICREQ if self.ready => {
                return Err(PduError::Sequence {
                    what: "ICReq",
                    why: "the connection is already initialized",
                })
            }
            ICREQ => IC_LEN,
            CAPSULE_CMD | H2C_DATA if !self.ready => {
                return Err(PduError::Sequence {
                    what: "PDU before ICReq",
                    why: "the first PDU of a connection must be ICReq",
                })
            }
            CAPSULE_CMD => CAPSULE_CMD_HLEN,
            H2C_DATA | H2C_TERM_REQ => SHORT_HLEN,
            t => return Err(PduError::BadType(t)),
        };
        if usize::from(ch.hlen) != hlen {
            return Err(bad(
                "HLEN",
                2,
                ch.hlen.into(),
                "the PDU type's header length",
            ));
        }
        let max = self.max_plen(ch.pdu_type);
        if ch.plen > max {
            return Err(PduError::TooLong { plen: ch.plen, max });
        }
        let plen = ch.plen as usize;
        if plen < hlen {
            return Err(bad("PLEN", 4, ch.plen.into(), "at least the header length"));
        }
        let Some(pdu) = buf.get(..plen) else {
            return Ok(None);
        };
        let parsed = match ch.pdu_type {
            ICREQ => self.icreq(&ch, pdu)?,
            H2C_TERM_REQ => Pdu::H2cTermReq {
                fes: u16::from_le_bytes([pdu[8], pdu[9]]),
            },
            _ => {
                let data = self.body(&ch, pdu, hlen)?;
                if ch.pdu_type == CAPSULE_CMD {
                    self.capsule(pdu, data)?
                } else {
                    self.h2c_data(&ch, pdu, data)?
                }
            }
        };
        Ok(Some((parsed, plen)))
    }

    fn icreq(&self, ch: &CommonHeader, pdu: &[u8]) -> Result<Pdu<'static>, PduError> {
        if ch.plen as usize != IC_LEN {
            return Err(bad("PLEN", 4, ch.plen.into(), "128 for ICReq"));
        }
        if ch.pdo != 0 {
            return Err(bad("PDO", 3, ch.pdo.into(), "0 for ICReq"));
        }
        let pfv = u16::from_le_bytes([pdu[8], pdu[9]]);
        if pfv != 0 {
            return Err(PduError::Unsupported {
                field: "PFV",
                offset: 8,
                value: pfv.into(),
                why: "only PDU format version 0 exists",
            });
        }
        let hpda = pdu[10];
        if hpda > 31 {
            return Err(bad("HPDA", 10, hpda.into(), "0..=31"));
        }
        let dgst = pdu[11];
        if dgst & !3 != 0 {
            return Err(bad(
                "DGST",
                11,
                dgst.into(),
                "bits 0 (header) and 1 (data) only",
            ));
        }
        Ok(Pdu::IcReq(IcReq {
            pfv,
            hpda,
            hdgst: dgst & 1 != 0,
            ddgst: dgst & 2 != 0,
            maxr2t: u32::from_le_bytes([pdu[12], pdu[13], pdu[14], pdu[15]]),
        }))
    }

    /// Checks the digests and the data offset of a capsule or data PDU; returns its data.
    fn body<'a>(
        &self,
        ch: &CommonHeader,
        pdu: &'a [u8],
        hlen: usize,
    ) -> Result<&'a [u8], PduError> {
        if (ch.flags & FLAG_HDGST != 0) != self.hdgst {
            return Err(bad(
                "FLAGS",
                1,
                ch.flags.into(),
                "HDGSTF as negotiated in ICReq",
            ));
        }
        if ch.flags & FLAG_DDGST != 0 && !self.ddgst {
            return Err(bad(
                "FLAGS",
                1,
                ch.flags.into(),
                "no DDGSTF: no data digest was negotiated",
            ));
        }
        let hd = self.hd();
        let header_end = hlen + hd;
        if pdu.len() < header_end {
            return Err(bad(
                "PLEN",
                4,
                pdu.len() as u64,
                "header plus header digest",
            ));
        }
        if self.hdgst {
            let got = le32(&pdu[hlen..header_end]);
            let want = crc32c(&pdu[..hlen]);
            if got != want {
                return Err(PduError::HeaderDigest { got, want });
            }
        }
        if pdu.len() == header_end {
            if ch.pdo != 0 {
                return Err(bad("PDO", 3, ch.pdo.into(), "0 for a PDU without data"));
            }
            return Ok(&[]);
        }
        if usize::from(ch.pdo) != header_end {
            return Err(bad(
                "PDO",
                3,
                ch.pdo.into(),
                "the header length plus its digest (CPDA 0)",
            ));
        }
        let dd = if ch.flags & FLAG_DDGST != 0 {
            DIGEST_LEN
        } else if self.ddgst {
            return Err(bad(
                "FLAGS",
                1,
                ch.flags.into(),
                "DDGSTF on a PDU with data",
            ));
        } else {
            0
        };
        if pdu.len() < header_end + dd + 1 {
            return Err(bad(
                "PLEN",
                4,
                pdu.len() as u64,
                "room for data and its digest",
            ));
        }
        let data_end = pdu.len() - dd;
        let data = &pdu[header_end..data_end];
        if dd != 0 {
            let got = le32(&pdu[data_end..]);
            let want = crc32c(data);
            if got != want {
                return Err(PduError::DataDigest { got, want });
            }
        }
        Ok(data)
    }

    fn capsule<'a>(&self, pdu: &'a [u8], data: &'a [u8]) -> Result<Pdu<'a>, PduError> {
        if data.len() > self.in_capsule_max as usize {
            return Err(PduError::TooLong {
                plen: pdu.len() as u32,
                max: self.max_plen(CAPSULE_CMD),
            });
        }
        let Some(sqe) = pdu[COMMON_HEADER_LEN..].first_chunk::<SQE_LEN>() else {
            return Err(bad("PLEN", 4, pdu.len() as u64, "a whole SQE"));
        };
        Ok(Pdu::CapsuleCmd { sqe, data })
    }

    fn h2c_data<'a>(
        &self,
        ch: &CommonHeader,
        pdu: &'a [u8],
        data: &'a [u8],
    ) -> Result<Pdu<'a>, PduError> {
        let header = H2cDataHeader {
            cccid: u16::from_le_bytes([pdu[8], pdu[9]]),
            ttag: u16::from_le_bytes([pdu[10], pdu[11]]),
            datao: le32(&pdu[12..16]),
            datal: le32(&pdu[16..20]),
            last: ch.flags & FLAG_LAST_PDU != 0,
        };
        if data.is_empty() || header.datal as usize != data.len() {
            return Err(bad(
                "DATAL",
                16,
                header.datal.into(),
                "the bytes of data the PDU carries",
            ));
        }
        Ok(Pdu::H2cData { header, data })
    }

    // ----- building PDUs (appended to `out`) -----

    fn header(&self, out: &mut Vec<u8>, t: u8, flags: u8, hlen: usize, data_len: usize) {
        let hd = self.hd();
        let dd = if data_len > 0 && self.ddgst {
            DIGEST_LEN
        } else {
            0
        };
        let mut f = flags;
        if self.hdgst {
            f |= FLAG_HDGST;
        }
        if dd != 0 {
            f |= FLAG_DDGST;
        }
        let pdo = if data_len > 0 { (hlen + hd) as u8 } else { 0 };
        let plen = (hlen + hd + data_len + dd) as u32;
        out.extend_from_slice(&[t, f, hlen as u8, pdo]);
        out.extend_from_slice(&plen.to_le_bytes());
    }

    /// Appends the header digest of the header that ends `out` (`hlen` bytes), if negotiated.
    fn seal_header(&self, out: &mut Vec<u8>, hlen: usize) {
        if self.hdgst {
            let d = crc32c(&out[out.len() - hlen..]);
            out.extend_from_slice(&d.to_le_bytes());
        }
    }

    /// ICResp: PFV 0, CPDA 0, the digests as negotiated, MAXH2CDATA. Sent without digests.
    pub fn icresp(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[ICRESP, 0, IC_LEN as u8, 0]);
        out.extend_from_slice(&(IC_LEN as u32).to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes()); // PFV
        out.push(0); // CPDA
        out.push(u8::from(self.hdgst) | (u8::from(self.ddgst) << 1));
        out.extend_from_slice(&self.maxh2cdata.to_le_bytes());
        out.resize(start + IC_LEN, 0);
    }

    /// A response capsule carrying `cqe`.
    pub fn capsule_resp(&self, out: &mut Vec<u8>, cqe: &[u8; CQE_LEN]) {
        self.header(out, CAPSULE_RESP, 0, SHORT_HLEN, 0);
        out.extend_from_slice(cqe);
        self.seal_header(out, SHORT_HLEN);
    }

    /// A C2HData PDU for command `cccid` with `data` at offset `datao`; `last` sets LAST_PDU.
    pub fn c2h_data(&self, out: &mut Vec<u8>, cccid: u16, datao: u32, data: &[u8], last: bool) {
        self.header(
            out,
            C2H_DATA,
            if last { FLAG_LAST_PDU } else { 0 },
            SHORT_HLEN,
            data.len(),
        );
        out.extend_from_slice(&cccid.to_le_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&datao.to_le_bytes());
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        self.seal_header(out, SHORT_HLEN);
        out.extend_from_slice(data);
        if self.ddgst && !data.is_empty() {
            out.extend_from_slice(&crc32c(data).to_le_bytes());
        }
    }

    /// An R2T asking for `r2tl` bytes at offset `r2to` of command `cccid`, tagged `ttag`.
    pub fn r2t(&self, out: &mut Vec<u8>, cccid: u16, ttag: u16, r2to: u32, r2tl: u32) {
        self.header(out, R2T, 0, SHORT_HLEN, 0);
        out.extend_from_slice(&cccid.to_le_bytes());
        out.extend_from_slice(&ttag.to_le_bytes());
        out.extend_from_slice(&r2to.to_le_bytes());
        out.extend_from_slice(&r2tl.to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        self.seal_header(out, SHORT_HLEN);
    }

    /// A C2HTermReq with `fes`/`fei` and up to 152 bytes of the offending PDU (no digests).
    pub fn c2h_term(out: &mut Vec<u8>, fes: u16, fei: u32, offending: &[u8]) {
        let data = &offending[..offending.len().min(TERM_DATA_MAX)];
        let plen = (SHORT_HLEN + data.len()) as u32;
        let pdo = if data.is_empty() { 0 } else { SHORT_HLEN as u8 };
        out.extend_from_slice(&[C2H_TERM_REQ, 0, SHORT_HLEN as u8, pdo]);
        out.extend_from_slice(&plen.to_le_bytes());
        out.extend_from_slice(&fes.to_le_bytes());
        out.extend_from_slice(&fei.to_le_bytes());
        out.extend_from_slice(&[0; 10]);
        out.extend_from_slice(data);
    }
}

fn bad(field: &'static str, offset: u32, value: u64, expected: &'static str) -> PduError {
    PduError::BadField {
        field,
        offset,
        value,
        expected,
    }
}

fn le32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}
