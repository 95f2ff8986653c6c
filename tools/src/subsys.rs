//! The subsystem view of `vfnvme list`: controllers grouped by subsystem NQN, and per
//! subsystem its multipath heads (a namespace keyed by nsid and unique identifier, as the
//! driver's `vfnvme::multipath` forms them) with one path per controller that has it, each
//! with its ANA group and state. Built from the per-controller JSON of [`crate::list`], so
//! that real devices (each opened alone) and the model give the same view.

use crate::list::human_size;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use vfnvme::spec::ana::CMIC_MULTI_CONTROLLER;

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// Whether a controller's JSON reports CMIC multi-controller (bit 1).
fn multi_controller(c: &Value) -> bool {
    c["cmic"]
        .as_u64()
        .is_some_and(|m| m & u64::from(CMIC_MULTI_CONTROLLER) != 0)
}

/// The subsystems of `controllers` (the JSON objects of `list`), in the order of their first
/// controller. Controllers whose SUBNQN is unknown (not readable) are left out. Namespaces
/// with a unique identifier (read by vfnvme) form heads; the kernel's do not.
pub fn subsystems(controllers: &[Value]) -> Vec<Value> {
    let mut groups: Vec<(String, Vec<&Value>)> = Vec::new();
    for c in controllers {
        let Some(nqn) = c["subnqn"].as_str().filter(|n| !n.is_empty()) else {
            continue;
        };
        match groups.iter_mut().find(|(n, _)| n == nqn) {
            Some((_, members)) => members.push(c),
            None => groups.push((nqn.to_string(), vec![c])),
        }
    }
    groups
        .into_iter()
        .map(|(nqn, members)| subsystem(&nqn, &members))
        .collect()
}

/// One subsystem's JSON.
fn subsystem(nqn: &str, members: &[&Value]) -> Value {
    let controllers: Vec<Value> = members
        .iter()
        .map(|c| {
            json!({
                "address": c["address"],
                "cntlid": c["cntlid"],
                "driver": c["driver"],
                "ana": c["ana"],
            })
        })
        .collect();
    // (nsid, unique id) -> (size, LBA size, paths)
    let mut heads: BTreeMap<(u64, String), (Value, Value, Vec<Value>)> = BTreeMap::new();
    for c in members {
        let Some(namespaces) = c["namespaces"].as_array() else {
            continue;
        };
        for ns in namespaces {
            let (Some(nsid), Some(uid)) = (ns["nsid"].as_u64(), ns["unique_id"].as_str()) else {
                continue;
            };
            let entry = heads
                .entry((nsid, uid.to_string()))
                .or_insert_with(|| (ns["size_bytes"].clone(), ns["lba_size"].clone(), vec![]));
            entry.2.push(json!({
                "controller": c["address"],
                "cntlid": c["cntlid"],
                "ana_group": ns["anagrpid"],
                "ana_state": ns["ana_state"],
                "state": ns["path_state"],
            }));
        }
    }
    let mut per_nsid: BTreeMap<u64, Vec<&str>> = BTreeMap::new();
    for (nsid, uid) in heads.keys() {
        per_nsid.entry(*nsid).or_default().push(uid);
    }
    let warnings: Vec<String> = per_nsid
        .iter()
        .filter(|(_, uids)| uids.len() > 1)
        .map(|(nsid, uids)| {
            format!(
                "namespace {nsid} reports {} different identifiers on different controllers ({}): shown as separate heads, never merged; check each controller's namespace with `vfnvme id-ns BDF -n {nsid}`",
                uids.len(),
                uids.join(", ")
            )
        })
        .collect();
    let heads: Vec<Value> = heads
        .into_iter()
        .map(|((nsid, uid), (size, lba, paths))| {
            json!({
                "nsid": nsid,
                "unique_id": uid,
                "size_bytes": size,
                "lba_size": lba,
                "paths": paths,
            })
        })
        .collect();
    json!({
        "nqn": nqn,
        "multipath": members.iter().any(|c| multi_controller(c)),
        "controllers": controllers,
        "heads": heads,
        "warnings": warnings,
    })
}

/// The head and path lines of subsystem `s`, each indented by `indent` spaces, and its
/// warnings.
pub fn heads_text(s: &Value, indent: usize) -> String {
    let pad = " ".repeat(indent);
    let mut out = String::new();
    let empty = Vec::new();
    for w in s["warnings"].as_array().unwrap_or(&empty) {
        out.push_str(&format!("{pad}warning: {}\n", text_of(w)));
    }
    let heads = s["heads"].as_array().unwrap_or(&empty);
    let width = heads
        .iter()
        .flat_map(|h| h["paths"].as_array().unwrap_or(&empty))
        .map(|p| text_of(&p["controller"]).len())
        .max()
        .unwrap_or(0);
    for h in heads {
        let size = h["size_bytes"].as_u64().map_or("-".into(), human_size);
        out.push_str(&format!(
            "{pad}head ns {}  {}  {}  LBA {} B\n",
            text_of(&h["nsid"]),
            text_of(&h["unique_id"]),
            size,
            text_of(&h["lba_size"]),
        ));
        for p in h["paths"].as_array().unwrap_or(&empty) {
            let state = text_of(&p["state"]);
            let ana = match (&p["ana_group"], &p["ana_state"]) {
                (_, Value::Null) => format!("no ANA -> {state}"),
                (g, st) if text_of(st) == state => format!("ANA group {}  {state}", text_of(g)),
                (g, st) => format!("ANA group {}  {} -> {state}", text_of(g), text_of(st)),
            };
            out.push_str(&format!(
                "{pad}  path {:<width$}  cntlid {:<5} {ana}\n",
                text_of(&p["controller"]),
                text_of(&p["cntlid"]),
            ));
        }
    }
    out
}

/// The text form of [`subsystems`], like nvme-cli's `list-subsys`: per subsystem its
/// controllers, heads and paths.
pub fn text(subsystems: &[Value]) -> String {
    if subsystems.is_empty() {
        return "no NVMe subsystems found (no readable controller)\n".into();
    }
    let mut out = String::new();
    let empty = Vec::new();
    for s in subsystems {
        let ctrls = s["controllers"].as_array().unwrap_or(&empty);
        out.push_str(&format!(
            "subsystem {}  ({} controller{}{})\n",
            text_of(&s["nqn"]),
            ctrls.len(),
            if ctrls.len() == 1 { "" } else { "s" },
            if s["multipath"] == Value::Bool(true) {
                ", multipath"
            } else {
                ""
            }
        ));
        for c in ctrls {
            out.push_str(&format!(
                "  controller {:<13}  cntlid {:<5} {:<9} {}\n",
                text_of(&c["address"]),
                text_of(&c["cntlid"]),
                text_of(&c["driver"]),
                if c["ana"] == Value::Bool(true) {
                    "ANA"
                } else {
                    "no ANA"
                },
            ));
        }
        out.push_str(&heads_text(s, 2));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(nsid: u32, uid: &str, grp: Option<u32>, ana: Option<&str>, state: &str) -> Value {
        json!({"nsid": nsid, "size_bytes": 16u64 << 20, "lba_size": 512, "unique_id": uid,
               "anagrpid": grp, "ana_state": ana, "path_state": state})
    }

    fn ctrl(addr: &str, cntlid: u16, nqn: &str, cmic: u8, namespaces: Vec<Value>) -> Value {
        json!({"address": addr, "cntlid": cntlid, "driver": "vfio-pci", "subnqn": nqn,
               "cmic": cmic, "ana": namespaces.iter().any(|n| !n["ana_state"].is_null()),
               "namespaces": namespaces})
    }

    #[test]
    fn heads_merge_by_nsid_and_identifier_and_keep_mismatches_apart() {
        let list = vec![
            ctrl(
                "0000:00:10.0",
                1,
                "nqn.mp",
                0x2,
                vec![
                    ns(1, "nguid:aa", None, None, "optimized"),
                    ns(2, "nguid:bb", None, None, "optimized"),
                ],
            ),
            ctrl(
                "0000:00:12.0",
                7,
                "nqn.single",
                0,
                vec![ns(1, "eui64:cc", None, None, "optimized")],
            ),
            ctrl(
                "0000:00:11.0",
                2,
                "nqn.mp",
                0x2,
                vec![
                    ns(1, "nguid:aa", None, None, "optimized"),
                    ns(2, "nguid:dd", None, None, "optimized"),
                ],
            ),
            json!({"address": "0000:00:13.0", "subnqn": null, "error": "busy"}),
        ];
        let subs = subsystems(&list);
        assert_eq!(subs.len(), 2, "{subs:?}");
        let mp = &subs[0];
        assert_eq!(mp["nqn"], "nqn.mp");
        assert_eq!(mp["multipath"], true);
        assert_eq!(mp["controllers"].as_array().unwrap().len(), 2);
        let heads = mp["heads"].as_array().unwrap();
        // ns 1 merged (same NGUID), ns 2 kept as two heads (different NGUIDs).
        assert_eq!(heads.len(), 3, "{heads:?}");
        assert_eq!(heads[0]["nsid"], 1);
        assert_eq!(heads[0]["paths"].as_array().unwrap().len(), 2);
        assert_eq!(heads[0]["paths"][1]["controller"], "0000:00:11.0");
        assert_eq!(heads[0]["paths"][1]["cntlid"], 2);
        for h in &heads[1..] {
            assert_eq!(h["nsid"], 2);
            assert_eq!(h["paths"].as_array().unwrap().len(), 1);
        }
        let warnings = mp["warnings"].as_array().unwrap();
        assert_eq!(warnings.len(), 1);
        let w = warnings[0].as_str().unwrap();
        assert!(
            w.contains("namespace 2") && w.contains("nguid:bb, nguid:dd"),
            "{w}"
        );
        assert_eq!(subs[1]["multipath"], false);
        let t = text(&subs);
        assert!(
            t.starts_with("subsystem nqn.mp  (2 controllers, multipath)\n"),
            "{t}"
        );
        assert!(
            t.contains("warning: namespace 2 reports 2 different identifiers"),
            "{t}"
        );
        assert!(
            t.contains("head ns 1  nguid:aa  16.00 MiB  LBA 512 B"),
            "{t}"
        );
        assert!(
            t.contains("path 0000:00:11.0  cntlid 2     no ANA -> optimized"),
            "{t}"
        );
        assert!(t.contains("subsystem nqn.single  (1 controller)"), "{t}");
    }

    #[test]
    fn ana_states_and_missing_groups_show_what_selection_sees() {
        let list = vec![
            ctrl(
                "a",
                1,
                "n",
                0xa,
                vec![ns(1, "nguid:aa", Some(3), Some("change"), "change")],
            ),
            ctrl(
                "b",
                2,
                "n",
                0xa,
                vec![ns(
                    1,
                    "nguid:aa",
                    Some(4),
                    Some("not reported"),
                    "inaccessible",
                )],
            ),
        ];
        let subs = subsystems(&list);
        let t = heads_text(&subs[0], 0);
        assert!(
            t.contains("path a  cntlid 1     ANA group 3  change\n"),
            "{t}"
        );
        assert!(
            t.contains("path b  cntlid 2     ANA group 4  not reported -> inaccessible\n"),
            "{t}"
        );
        assert_eq!(subs[0]["heads"][0]["paths"][1]["ana_group"], 4);
        assert!(text(&[]).contains("no NVMe subsystems"));
    }
}
