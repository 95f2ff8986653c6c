//! Simple namespace discovery: the Active Namespace ID list, then Identify Namespace for each.
//! (The namespace layer replaces this with a pipelined scan.)

use super::Controller;
use crate::error::Error;
use crate::namespace::{Namespace, NamespaceIdentity};
use crate::platform::Platform;
use crate::spec::identify::{parse_active_ns_list, IdentifyNamespace};
use crate::spec::Command;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Reads the active namespaces one Identify at a time.
pub fn discover_namespaces<P: Platform>(
    ctrl: &Controller<P>,
) -> Result<BTreeMap<u32, Arc<Namespace>>, Error> {
    let buf = ctrl.dma().alloc(4096)?;
    let mut nsids = Vec::new();
    let mut after = 0u32;
    loop {
        ctrl.admin_sync(Command::identify_active_ns_list(after, buf.iova()))?;
        let list = parse_active_ns_list(buf.as_slice())?;
        let full = list.len() == 1024;
        let last = list.last().copied();
        nsids.extend(list.into_iter().filter(|&n| n > after));
        match last {
            Some(l) if full && l > after && l < 0xffff_fffe => after = l,
            _ => break,
        }
    }
    let mut out = BTreeMap::new();
    for nsid in nsids {
        ctrl.admin_sync(Command::identify_namespace(nsid, buf.iova()))?;
        let id = IdentifyNamespace::parse(buf.as_slice())?;
        if id.nsze == 0 {
            continue;
        }
        let fmt = match id.current_format() {
            Ok(f) => f,
            Err(e) => {
                log::warn!("namespace {nsid} skipped: {e}");
                continue;
            }
        };
        let identity = NamespaceIdentity {
            eui64: id.eui64,
            nguid: id.nguid,
            uuid: [0; 16],
            csi: 0,
            lba_shift: fmt.lbads,
            metadata_size: fmt.ms,
        };
        out.insert(nsid, Arc::new(Namespace::new(nsid, identity, id.nsze)));
    }
    Ok(out)
}
