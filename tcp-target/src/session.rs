//! One connection's PDUs, in order: ICReq, command capsules (Connect and Disconnect here,
//! admin commands through [`crate::admin`], I/O through the connection's [`IoQueue`]),
//! H2CData and H2CTermReq. Whatever is wrong in the stream is a [`PduError`], which ends the
//! connection; whatever is wrong in a command is a status.

use crate::admin::{self, AdminCtx, AdminReply, FCTYPE_CONNECT, FCTYPE_DISCONNECT, OPC_FABRICS};
use crate::ana::AnaView;
use crate::backend::Backend;
use crate::command::*;
use crate::conn::Role;
use crate::connect::{self, ConnectKind};
use crate::ctrl::CtrlState;
use crate::error::PduError;
use crate::export::Export;
use crate::io::IoQueue;
use crate::pdu::Pdu;
use crate::tx::Tx;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Instant;

/// Everything a connection's PDUs may touch besides the connection.
pub(crate) struct Ctx<'a, B: Backend> {
    /// The storage (I/O queues are opened on it).
    pub(crate) backend: &'a B,
    /// What hosts see.
    pub(crate) export: &'a Export,
    /// Every live controller, by CNTLID.
    pub(crate) ctrls: &'a mut BTreeMap<u16, CtrlState>,
    /// The ANA states (for the ANA log).
    pub(crate) ana: &'a AnaView,
    /// This connection's index (a new controller's admin queue).
    pub(crate) conn: usize,
    /// The host's address (for the log).
    pub(crate) peer: SocketAddr,
    /// The address the host reached (for the discovery log).
    pub(crate) local: SocketAddr,
    /// Now (keep-alive).
    pub(crate) now: Instant,
    /// Set when the host sent Disconnect: close after the response.
    pub(crate) disconnect: bool,
}

impl<B: Backend> Ctx<'_, B> {
    /// Handles one PDU of the connection whose sender and role are given.
    pub(crate) fn pdu(
        &mut self,
        tx: &mut Tx,
        role: &mut Role<B::Queue>,
        pdu: Pdu<'_>,
    ) -> Result<(), PduError> {
        match pdu {
            Pdu::IcReq(ic) => {
                if ic.hpda != 0 {
                    return Err(PduError::Unsupported {
                        field: "HPDA",
                        offset: 10,
                        value: ic.hpda.into(),
                        why: "this target sends data right after the header (HPDA 0)",
                    });
                }
                tx.codec.hdgst = ic.hdgst;
                tx.codec.ddgst = ic.ddgst;
                tx.icresp();
                tx.codec.ready = true;
                Ok(())
            }
            Pdu::H2cTermReq { fes } => Err(PduError::HostTerminated { fes }),
            Pdu::H2cData { header, data } => match role {
                Role::Io { queue, .. } => queue.h2c_data(&header, data, tx),
                _ => Err(PduError::Sequence {
                    what: "H2CData",
                    why: "this target sends R2Ts only on I/O queues",
                }),
            },
            Pdu::CapsuleCmd { sqe, data } => {
                tx.consumed_sqe();
                let sqe = Sqe(sqe);
                if sqe.opcode() == OPC_FABRICS && sqe.fctype() == FCTYPE_CONNECT {
                    self.connect(tx, role, sqe, data);
                    return Ok(());
                }
                if sqe.opcode() == OPC_FABRICS && sqe.fctype() == FCTYPE_DISCONNECT {
                    tx.respond(sqe.cid(), SC_SUCCESS, 0);
                    self.disconnect = true;
                    return Ok(());
                }
                match role {
                    Role::Fresh => {
                        tx.respond(sqe.cid(), SC_SEQUENCE_ERROR, 0);
                        Ok(())
                    }
                    Role::Io { queue, .. } => queue.command(sqe, data, self.export, tx),
                    Role::Admin { cntlid } => {
                        let Some(ctrl) = self.ctrls.get_mut(cntlid) else {
                            tx.respond(sqe.cid(), SC_SEQUENCE_ERROR, 0);
                            self.disconnect = true;
                            return Ok(());
                        };
                        let mut acx = AdminCtx {
                            export: self.export,
                            ctrl,
                            local: self.local,
                            now: self.now,
                            ana: self.ana,
                        };
                        match admin::execute(&mut acx, sqe, data) {
                            AdminReply::Held => {}
                            AdminReply::Done {
                                status,
                                result,
                                data,
                            } => {
                                if let Some(d) = data.filter(|d| !d.is_empty()) {
                                    tx.data(sqe.cid(), &d);
                                }
                                tx.respond(sqe.cid(), status, result);
                            }
                        }
                        Ok(())
                    }
                }
            }
        }
    }

    fn connect(&mut self, tx: &mut Tx, role: &mut Role<B::Queue>, sqe: Sqe<'_>, data: &[u8]) {
        let cid = sqe.cid();
        let refuse = |tx: &mut Tx, r: connect::Refusal, host: &str| {
            log::warn!(
                "{}: refused Connect from host {host:?}: {}",
                self.peer,
                r.reason
            );
            tx.respond(cid, r.status, r.result);
        };
        if !matches!(role, Role::Fresh) {
            let r = connect::Refusal {
                status: SC_SEQUENCE_ERROR,
                result: 0,
                reason: "a second Connect on one connection".into(),
            };
            return refuse(tx, r, "?");
        }
        let req = match connect::parse(sqe, data) {
            Ok(r) => r,
            Err(r) => return refuse(tx, r, "?"),
        };
        let kind = match connect::admit(&req, self.export) {
            Ok(k) => k,
            Err(r) => return refuse(tx, r, &req.hostnqn),
        };
        let size = req.sqsize + 1;
        match kind {
            ConnectKind::Admin { discovery } => {
                let Some(cntlid) = (1..0xFFF0u16).find(|id| !self.ctrls.contains_key(id)) else {
                    let r = connect::Refusal {
                        status: SC_INTERNAL,
                        result: 0,
                        reason: "no controller ID left".into(),
                    };
                    return refuse(tx, r, &req.hostnqn);
                };
                let ctrl = CtrlState::new(
                    cntlid,
                    discovery,
                    req.hostnqn.clone(),
                    req.hostid,
                    req.kato_ms,
                    self.conn,
                    self.now,
                );
                self.ctrls.insert(cntlid, ctrl);
                log::info!(
                    "{}: host {:?} connected controller {cntlid} of {} (KATO {} ms)",
                    self.peer,
                    req.hostnqn,
                    if discovery {
                        crate::config::DISCOVERY_NQN
                    } else {
                        &self.export.config.subsystem.nqn
                    },
                    req.kato_ms
                );
                *role = Role::Admin { cntlid };
                tx.sqid = 0;
                tx.queue_size = size;
                tx.consumed_sqe();
                tx.respond(cid, SC_SUCCESS, cntlid.into());
            }
            ConnectKind::Io { cntlid } => {
                let bit = 1u64 << (req.qid % 64);
                let why = match self.ctrls.get(&cntlid) {
                    None => Some(format!(
                        "no controller {cntlid}: connect the admin queue first"
                    )),
                    Some(c) if c.hostnqn != req.hostnqn => {
                        Some(format!("controller {cntlid} belongs to another host"))
                    }
                    Some(c) if c.discovery => {
                        Some("the discovery controller has no I/O queues".into())
                    }
                    Some(c) if !c.enabled() => {
                        Some(format!("controller {cntlid} is not enabled (CC.EN = 0)"))
                    }
                    Some(c) if c.io_qids & bit != 0 => Some(format!(
                        "queue {} of controller {cntlid} is already connected",
                        req.qid
                    )),
                    Some(c) if c.queues != 0 && u32::from(req.qid) > (c.queues & 0xffff) + 1 => {
                        Some(format!(
                            "queue {} of controller {cntlid}: Set Features Number of Queues granted {}",
                            req.qid,
                            (c.queues & 0xffff) + 1
                        ))
                    }
                    Some(_) => None,
                };
                if let Some(reason) = why {
                    let r = connect::Refusal {
                        status: SC_CONNECT_INVALID_PARAM,
                        result: (1 << 16) | 16,
                        reason,
                    };
                    return refuse(tx, r, &req.hostnqn);
                }
                let q = match self.backend.open_queue(size.into()) {
                    Ok(q) => q,
                    Err(e) => {
                        let r = connect::Refusal {
                            status: SC_INTERNAL,
                            result: 0,
                            reason: e.to_string(),
                        };
                        return refuse(tx, r, &req.hostnqn);
                    }
                };
                if let Some(c) = self.ctrls.get_mut(&cntlid) {
                    c.io_qids |= bit;
                }
                *role = Role::Io {
                    cntlid,
                    qid: req.qid,
                    queue: IoQueue::new(q, size, self.export),
                };
                tx.sqid = req.qid;
                tx.queue_size = size;
                tx.consumed_sqe();
                tx.respond(cid, SC_SUCCESS, cntlid.into());
                log::debug!(
                    "{}: controller {cntlid} I/O queue {} ({size} entries)",
                    self.peer,
                    req.qid
                );
            }
        }
    }
}
