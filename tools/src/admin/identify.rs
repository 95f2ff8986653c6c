//! `id-ctrl` and `id-ns`: Identify data field by field, with nvme-cli's field names.

use super::{check_nsid, failed, put, put_json, Format, Io, Target};
use anyhow::Result;
use clap::Args;
use serde_json::{json, Map, Value};
use vfnvme::platform::Platform;
use vfnvme::spec::AdminCommand;
use vfnvme::Controller;

/// Arguments of `id-ctrl`.
#[derive(Args, Debug)]
pub struct IdCtrlArgs {
    #[command(flatten)]
    pub target: Target,
    #[command(flatten)]
    pub format: Format,
}

/// Arguments of `id-ns`.
#[derive(Args, Debug)]
pub struct IdNsArgs {
    #[command(flatten)]
    pub target: Target,
    /// The namespace (1..=NN).
    #[arg(short = 'n', long = "namespace-id", value_parser = super::num_u32)]
    pub nsid: u32,
    #[command(flatten)]
    pub format: Format,
}

/// Little-endian integer of `n` bytes at `off` (n ≤ 8). Device data is untrusted: bytes past
/// the end of `b` read as zero, so a short transfer decodes like a zero-filled one.
pub fn le(b: &[u8], off: usize, n: usize) -> u64 {
    (0..n.min(8)).rev().fold(0, |v, i| {
        let x = off.checked_add(i).and_then(|at| b.get(at)).copied();
        v << 8 | u64::from(x.unwrap_or(0))
    })
}

/// The bytes of `b[off..off + n]` that exist (fewer, or none, when `b` is short).
pub fn field(b: &[u8], off: usize, n: usize) -> &[u8] {
    let start = off.min(b.len());
    &b[start..start + n.min(b.len() - start)]
}

/// An ASCII field with its trailing blanks and NULs removed; any other byte that is not
/// printable ASCII shows as `.` (device data must not reach a terminal as control codes).
pub fn ascii(b: &[u8], off: usize, n: usize) -> String {
    let raw = field(b, off, n);
    let end = raw
        .iter()
        .rposition(|&c| c != b' ' && c != 0)
        .map_or(0, |i| i + 1);
    raw[..end]
        .iter()
        .map(|&c| {
            if c.is_ascii_graphic() || c == b' ' {
                c as char
            } else {
                '.'
            }
        })
        .collect()
}

/// (name, byte offset, size) of Identify Controller's integer fields, nvme-cli's names.
const CTRL_FIELDS: &[(&str, usize, usize)] = &[
    ("vid", 0, 2),
    ("ssvid", 2, 2),
    ("rab", 72, 1),
    ("cmic", 76, 1),
    ("mdts", 77, 1),
    ("cntlid", 78, 2),
    ("ver", 80, 4),
    ("rtd3r", 84, 4),
    ("rtd3e", 88, 4),
    ("oaes", 92, 4),
    ("ctratt", 96, 4),
    ("rrls", 100, 2),
    ("cntrltype", 111, 1),
    ("crdt1", 128, 2),
    ("crdt2", 130, 2),
    ("crdt3", 132, 2),
    ("oacs", 256, 2),
    ("acl", 258, 1),
    ("aerl", 259, 1),
    ("frmw", 260, 1),
    ("lpa", 261, 1),
    ("elpe", 262, 1),
    ("npss", 263, 1),
    ("avscc", 264, 1),
    ("apsta", 265, 1),
    ("wctemp", 266, 2),
    ("cctemp", 268, 2),
    ("mtfa", 270, 2),
    ("hmpre", 272, 4),
    ("hmmin", 276, 4),
    ("tnvmcap", 280, 8),
    ("unvmcap", 296, 8),
    ("rpmbs", 312, 4),
    ("edstt", 316, 2),
    ("dsto", 318, 1),
    ("fwug", 319, 1),
    ("kas", 320, 2),
    ("hctma", 322, 2),
    ("mntmt", 324, 2),
    ("mxtmt", 326, 2),
    ("sanicap", 328, 4),
    ("hmminds", 332, 4),
    ("hmmaxd", 336, 2),
    ("nsetidmax", 338, 2),
    ("endgidmax", 340, 2),
    ("anatt", 342, 1),
    ("anacap", 343, 1),
    ("anagrpmax", 344, 4),
    ("nanagrpid", 348, 4),
    ("pels", 352, 4),
    ("sqes", 512, 1),
    ("cqes", 513, 1),
    ("maxcmd", 514, 2),
    ("nn", 516, 4),
    ("oncs", 520, 2),
    ("fuses", 522, 2),
    ("fna", 524, 1),
    ("vwc", 525, 1),
    ("awun", 526, 2),
    ("awupf", 528, 2),
    ("icsvscc", 530, 1),
    ("nwpc", 531, 1),
    ("acwu", 532, 2),
    ("sgls", 536, 4),
    ("mnan", 540, 4),
];

/// Identify Controller data as nvme-cli's JSON object (integers as numbers).
pub fn ctrl_json(b: &[u8]) -> Value {
    let mut m = Map::new();
    for &(name, off, n) in CTRL_FIELDS {
        m.insert(name.into(), json!(le(b, off, n)));
        if name == "ssvid" {
            m.insert("sn".into(), json!(ascii(b, 4, 20)));
            m.insert("mn".into(), json!(ascii(b, 24, 40)));
            m.insert("fr".into(), json!(ascii(b, 64, 8)));
        }
        if name == "rab" {
            m.insert("ieee".into(), json!(le(b, 73, 3)));
        }
    }
    m.insert("subnqn".into(), json!(ascii(b, 768, 256)));
    let npss = le(b, 263, 1) as usize;
    let psds: Vec<Value> = (0..=npss.min(31))
        .map(|i| {
            let p = 2048 + 32 * i;
            json!({
                "max_power": le(b, p, 2), "flags": le(b, p + 3, 1), "entry_lat": le(b, p + 4, 4),
                "exit_lat": le(b, p + 8, 4), "read_tput": le(b, p + 12, 1), "read_lat": le(b, p + 13, 1),
                "write_tput": le(b, p + 14, 1), "write_lat": le(b, p + 15, 1),
            })
        })
        .collect();
    m.insert("psds".into(), Value::Array(psds));
    Value::Object(m)
}

/// nvme-cli's text form: `name      : value`, hex for integers.
fn text(title: &str, v: &Value, io: &mut Io) -> Result<()> {
    put(io, title)?;
    if let Value::Object(m) = v {
        for (k, x) in m {
            let shown = match x {
                Value::Number(n) => format!("{:#x}", n.as_u64().unwrap_or(0)),
                Value::String(s) => s.clone(),
                Value::Array(a) => {
                    for (i, e) in a.iter().enumerate() {
                        put(io, &format!("{k:<10}{i:>2}: {e}"))?;
                    }
                    continue;
                }
                other => other.to_string(),
            };
            put(io, &format!("{k:<10}: {shown}"))?;
        }
    }
    Ok(())
}

/// `vfnvme id-ctrl`.
pub fn id_ctrl<P: Platform>(ctrl: &Controller<P>, a: &IdCtrlArgs, io: &mut Io) -> Result<()> {
    let (_, b) = ctrl
        .admin_read(AdminCommand::identify_controller(), 4096)
        .map_err(|e| failed(e, "Identify Controller"))?;
    if a.format.binary() {
        return io.out.write_all(b.as_slice()).map_err(Into::into);
    }
    let v = ctrl_json(b.as_slice());
    if a.format.json() {
        put_json(io, &v)
    } else {
        text("NVME Identify Controller:", &v, io)
    }
}

/// Identify Namespace data as nvme-cli's JSON object.
pub fn ns_json(b: &[u8]) -> Value {
    let mut m = Map::new();
    for (name, off, n) in [
        ("nsze", 0, 8),
        ("ncap", 8, 8),
        ("nuse", 16, 8),
        ("nsfeat", 24, 1),
        ("nlbaf", 25, 1),
        ("flbas", 26, 1),
        ("mc", 27, 1),
        ("dpc", 28, 1),
        ("dps", 29, 1),
        ("nmic", 30, 1),
        ("rescap", 31, 1),
        ("fpi", 32, 1),
        ("dlfeat", 33, 1),
        ("nawun", 34, 2),
        ("nawupf", 36, 2),
        ("nacwu", 38, 2),
        ("nabsn", 40, 2),
        ("nabo", 42, 2),
        ("nabspf", 44, 2),
        ("noiob", 46, 2),
        ("nvmcap", 48, 8),
        ("anagrpid", 92, 4),
        ("nsattr", 99, 1),
        ("nvmsetid", 100, 2),
        ("endgid", 102, 2),
    ] {
        m.insert(name.into(), json!(le(b, off, n)));
    }
    let hex = |off: usize, n: usize| {
        (off..off + n)
            .map(|i| format!("{:02x}", le(b, i, 1)))
            .collect::<String>()
    };
    m.insert("nguid".into(), json!(hex(104, 16)));
    m.insert("eui64".into(), json!(hex(120, 8)));
    let lbafs: Vec<Value> = (0..=(le(b, 25, 1) as usize).min(63))
        .map(|i| {
            let f = le(b, 128 + 4 * i, 4);
            json!({"ms": f & 0xffff, "ds": (f >> 16) & 0xff, "rp": (f >> 24) & 3})
        })
        .collect();
    m.insert("lbafs".into(), Value::Array(lbafs));
    Value::Object(m)
}

/// `vfnvme id-ns`.
pub fn id_ns<P: Platform>(ctrl: &Controller<P>, a: &IdNsArgs, io: &mut Io) -> Result<()> {
    check_nsid(ctrl, a.nsid)?;
    let (_, b) = ctrl
        .admin_read(AdminCommand::identify_namespace(a.nsid), 4096)
        .map_err(|e| failed(e, "Identify Namespace"))?;
    if a.format.binary() {
        return io.out.write_all(b.as_slice()).map_err(Into::into);
    }
    let v = ns_json(b.as_slice());
    if a.format.json() {
        return put_json(io, &v);
    }
    let b = b.as_slice();
    let mut plain = v.clone();
    if let Value::Object(m) = &mut plain {
        m.remove("lbafs");
    }
    text(&format!("NVME Identify Namespace {}:", a.nsid), &plain, io)?;
    let flbas = le(b, 26, 1) as usize;
    let in_use = (flbas & 0xf) | (flbas >> 5 & 3) << 4;
    for (i, f) in v["lbafs"].as_array().into_iter().flatten().enumerate() {
        let mark = if i == in_use { " (in use)" } else { "" };
        put(
            io,
            &format!(
                "lbaf {i:>2} : ms:{:<3} lbads:{:<2} rp:{:#x}{mark}",
                f["ms"],
                f["ds"],
                f["rp"].as_u64().unwrap_or(0)
            ),
        )?;
    }
    Ok(())
}
