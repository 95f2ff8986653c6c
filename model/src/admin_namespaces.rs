//! Namespace Attachment and Namespace Management admin commands.

use super::config::{
    validate_namespace, Backing, ModelError, ModelMetadata, ModelNamespaceConfig, MAX_NAMESPACES,
};
use super::core::{Core, CtrlState};
use super::namespaces::ModelNamespace;
use super::prp;
use super::sqe::{Outcome, Sqe, Status};
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub(super) fn ns_attachment(core: &Core, c: &mut CtrlState, sqe: &Sqe) -> Outcome {
    let sel = sqe.cdw(10) & 0xF;
    if sel > 1 {
        return Status::INVALID_FIELD.into();
    }
    let mut list = [0u8; 4096];
    if let Err(s) = prp::read_in(&core.iommu, sqe.prp1(), sqe.prp2(), c.page, &mut list) {
        return s.into();
    }
    let count = usize::from(u16::from_le_bytes([list[0], list[1]])).min(2047);
    let ours = list[2..2 + 2 * count]
        .chunks_exact(2)
        .any(|id| u16::from_le_bytes([id[0], id[1]]) == core.cfg.cntlid);
    if !ours {
        return Status::CONTROLLER_LIST_INVALID.into();
    }
    let nsid = sqe.nsid();
    let Some(ns) = core.ns_read().get(&nsid).cloned() else {
        return Status::INVALID_NAMESPACE.into();
    };
    let attach = sel == 0;
    if ns.is_attached() == attach {
        return if attach {
            Status::NS_ALREADY_ATTACHED
        } else {
            Status::NS_NOT_ATTACHED
        }
        .into();
    }
    ns.attached.store(attach, Ordering::Release);
    core.ns_changed(c, nsid);
    Outcome::ok(0)
}

/// Namespace Management: create (a detached, RAM-backed namespace at the lowest free nsid) or
/// delete (one nsid, or all with the broadcast nsid).
pub(super) fn ns_management(core: &Core, c: &mut CtrlState, sqe: &Sqe) -> Outcome {
    match sqe.cdw(10) & 0xF {
        0 => {
            let mut data = [0u8; 4096];
            if let Err(s) = prp::read_in(&core.iommu, sqe.prp1(), sqe.prp2(), c.page, &mut data) {
                return s.into();
            }
            let mut nsze = [0u8; 8];
            nsze.copy_from_slice(&data[..8]);
            let blocks = u64::from_le_bytes(nsze);
            let lba_size = match data[26] & 0xF {
                0 => 512,
                1 => 4096,
                _ => return Status::INVALID_FORMAT.into(),
            };
            core.ns_write(|table| {
                let Some(nsid) = (1..=core.nn).find(|n| !table.contains_key(n)) else {
                    return Status::NSID_UNAVAILABLE.into();
                };
                if table.len() >= MAX_NAMESPACES {
                    return Status::NSID_UNAVAILABLE.into();
                }
                let cfg = ModelNamespaceConfig {
                    nsid,
                    blocks,
                    lba_size,
                    backing: Backing::Ram,
                };
                if validate_namespace(&cfg, core.nn).is_err() {
                    return Status::INVALID_FIELD.into();
                }
                let ns = ModelNamespace::new(&cfg, core.cfg.seed);
                ns.attached.store(false, Ordering::Release);
                table.insert(nsid, Arc::new(ns));
                Outcome::ok(nsid)
            })
        }
        1 => {
            let nsid = sqe.nsid();
            let removed: Vec<(u32, bool)> = core.ns_write(|table| {
                if nsid == u32::MAX {
                    std::mem::take(table)
                        .into_iter()
                        .map(|(id, ns)| (id, ns.is_attached()))
                        .collect()
                } else {
                    table
                        .remove(&nsid)
                        .map(|ns| (nsid, ns.is_attached()))
                        .into_iter()
                        .collect()
                }
            });
            if removed.is_empty() && nsid != u32::MAX {
                return Status::INVALID_NAMESPACE.into();
            }
            for (id, attached) in removed {
                if attached {
                    core.ns_changed(c, id);
                }
            }
            Outcome::ok(0)
        }
        _ => Status::INVALID_FIELD.into(),
    }
}

/// Replaces namespace `nsid` by a freshly formatted one: `lba_size` bytes per block with
/// `metadata` or without, data erased, size in data bytes kept (in whole blocks), attached or
/// not as before; raises a namespace change event if it is attached.
pub(super) fn reformat(
    core: &Core,
    c: &mut CtrlState,
    nsid: u32,
    lba_size: u32,
    metadata: Option<ModelMetadata>,
) -> Result<(), ModelError> {
    let old = core
        .ns_read()
        .get(&nsid)
        .cloned()
        .ok_or(ModelError::NoSuchNamespace { nsid })?;
    let cfg = ModelNamespaceConfig {
        nsid,
        blocks: (old.blocks() << old.lba_shift) / u64::from(lba_size),
        lba_size,
        backing: if old.store.is_some() {
            Backing::Ram
        } else {
            Backing::Null
        },
    };
    validate_namespace(&cfg, core.nn)?;
    let new = ModelNamespace::new(&cfg, core.cfg.seed)
        .offering(old.offered_ms)
        .with_metadata(metadata);
    let attached = old.is_attached();
    new.attached.store(attached, Ordering::Release);
    core.ns_write(|table| table.insert(nsid, Arc::new(new)));
    if attached {
        core.ns_changed(c, nsid);
    }
    Ok(())
}
