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

/// An ASCII field as nvme-cli 2.x prints it: up to the first NUL, the device's blank padding
/// kept; any other byte that is not printable ASCII shows as `.`.
pub fn padded_ascii(b: &[u8], off: usize, n: usize) -> String {
    field(b, off, n)
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| {
            if c.is_ascii_graphic() || c == b' ' {
                c as char
            } else {
                '.'
            }
        })
        .collect()
}

/// A 16-byte identifier as nvme-cli prints a UUID (`8-4-4-4-12` hex digits).
pub fn uuid_text(b: &[u8], off: usize) -> String {
    let mut raw = [0u8; 16];
    let f = field(b, off, 16);
    raw[..f.len()].copy_from_slice(f);
    let h: Vec<String> = raw.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        h[0..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..16].concat()
    )
}

/// A 128-bit little-endian field as nvme-cli prints it in JSON: a decimal string.
pub fn u128_text(b: &[u8], off: usize) -> String {
    (u128::from(le(b, off + 8, 8)) << 64 | u128::from(le(b, off, 8))).to_string()
}

/// How an Identify Controller field is shown.
#[derive(Clone, Copy)]
enum Kind {
    /// A little-endian integer of this many bytes (a JSON number).
    Int(usize),
    /// A 128-bit counter (a decimal string).
    U128,
    /// An ASCII field of this many bytes (padding kept).
    Text(usize),
    /// A 16-byte identifier (a UUID string).
    Uuid,
}

/// Identify Controller's fields as nvme-cli 2.3 prints them: name, byte offset, kind, in its
/// order (`subnqn` and `psds` are added after `maxcna`, as nvme-cli does).
const CTRL_FIELDS: &[(&str, usize, Kind)] = &[
    ("vid", 0, Kind::Int(2)),
    ("ssvid", 2, Kind::Int(2)),
    ("sn", 4, Kind::Text(20)),
    ("mn", 24, Kind::Text(40)),
    ("fr", 64, Kind::Text(8)),
    ("rab", 72, Kind::Int(1)),
    ("ieee", 73, Kind::Int(3)),
    ("cmic", 76, Kind::Int(1)),
    ("mdts", 77, Kind::Int(1)),
    ("cntlid", 78, Kind::Int(2)),
    ("ver", 80, Kind::Int(4)),
    ("rtd3r", 84, Kind::Int(4)),
    ("rtd3e", 88, Kind::Int(4)),
    ("oaes", 92, Kind::Int(4)),
    ("ctratt", 96, Kind::Int(4)),
    ("rrls", 100, Kind::Int(2)),
    ("cntrltype", 111, Kind::Int(1)),
    ("fguid", 112, Kind::Uuid),
    ("crdt1", 128, Kind::Int(2)),
    ("crdt2", 130, Kind::Int(2)),
    ("crdt3", 132, Kind::Int(2)),
    ("nvmsr", 253, Kind::Int(1)),
    ("vwci", 254, Kind::Int(1)),
    ("mec", 255, Kind::Int(1)),
    ("oacs", 256, Kind::Int(2)),
    ("acl", 258, Kind::Int(1)),
    ("aerl", 259, Kind::Int(1)),
    ("frmw", 260, Kind::Int(1)),
    ("lpa", 261, Kind::Int(1)),
    ("elpe", 262, Kind::Int(1)),
    ("npss", 263, Kind::Int(1)),
    ("avscc", 264, Kind::Int(1)),
    ("apsta", 265, Kind::Int(1)),
    ("wctemp", 266, Kind::Int(2)),
    ("cctemp", 268, Kind::Int(2)),
    ("mtfa", 270, Kind::Int(2)),
    ("hmpre", 272, Kind::Int(4)),
    ("hmmin", 276, Kind::Int(4)),
    ("tnvmcap", 280, Kind::U128),
    ("unvmcap", 296, Kind::U128),
    ("rpmbs", 312, Kind::Int(4)),
    ("edstt", 316, Kind::Int(2)),
    ("dsto", 318, Kind::Int(1)),
    ("fwug", 319, Kind::Int(1)),
    ("kas", 320, Kind::Int(2)),
    ("hctma", 322, Kind::Int(2)),
    ("mntmt", 324, Kind::Int(2)),
    ("mxtmt", 326, Kind::Int(2)),
    ("sanicap", 328, Kind::Int(4)),
    ("hmminds", 332, Kind::Int(4)),
    ("hmmaxd", 336, Kind::Int(2)),
    ("nsetidmax", 338, Kind::Int(2)),
    ("endgidmax", 340, Kind::Int(2)),
    ("anatt", 342, Kind::Int(1)),
    ("anacap", 343, Kind::Int(1)),
    ("anagrpmax", 344, Kind::Int(4)),
    ("nanagrpid", 348, Kind::Int(4)),
    ("pels", 352, Kind::Int(4)),
    ("domainid", 356, Kind::Int(2)),
    ("megcap", 368, Kind::U128),
    ("sqes", 512, Kind::Int(1)),
    ("cqes", 513, Kind::Int(1)),
    ("maxcmd", 514, Kind::Int(2)),
    ("nn", 516, Kind::Int(4)),
    ("oncs", 520, Kind::Int(2)),
    ("fuses", 522, Kind::Int(2)),
    ("fna", 524, Kind::Int(1)),
    ("vwc", 525, Kind::Int(1)),
    ("awun", 526, Kind::Int(2)),
    ("awupf", 528, Kind::Int(2)),
    ("icsvscc", 530, Kind::Int(1)),
    ("nwpc", 531, Kind::Int(1)),
    ("acwu", 532, Kind::Int(2)),
    ("ocfs", 534, Kind::Int(2)),
    ("sgls", 536, Kind::Int(4)),
    ("mnan", 540, Kind::Int(4)),
    ("maxdna", 544, Kind::U128),
    ("maxcna", 560, Kind::Int(4)),
];

/// Identify Controller's fabrics fields, after `subnqn` as nvme-cli prints them.
const CTRL_FABRICS_FIELDS: &[(&str, usize, Kind)] = &[
    ("ioccsz", 1792, Kind::Int(4)),
    ("iorcsz", 1796, Kind::Int(4)),
    ("icdoff", 1800, Kind::Int(2)),
    ("fcatt", 1802, Kind::Int(1)),
    ("msdbd", 1803, Kind::Int(1)),
    ("ofcs", 1804, Kind::Int(2)),
];

fn insert_fields(m: &mut Map<String, Value>, b: &[u8], fields: &[(&str, usize, Kind)]) {
    for &(name, off, kind) in fields {
        let v = match kind {
            Kind::Int(n) => json!(le(b, off, n)),
            Kind::U128 => json!(u128_text(b, off)),
            Kind::Text(n) => json!(padded_ascii(b, off, n)),
            Kind::Uuid => json!(uuid_text(b, off)),
        };
        m.insert(name.into(), v);
    }
}

/// Identify Controller data as nvme-cli 2.3's JSON object: its keys in its order, integers as
/// numbers, 128-bit fields as decimal strings, text fields with their padding.
pub fn ctrl_json(b: &[u8]) -> Value {
    let mut m = Map::new();
    insert_fields(&mut m, b, CTRL_FIELDS);
    let subnqn = padded_ascii(b, 768, 256);
    if !subnqn.is_empty() {
        m.insert("subnqn".into(), json!(subnqn));
    }
    insert_fields(&mut m, b, CTRL_FABRICS_FIELDS);
    let npss = le(b, 263, 1) as usize;
    let psds: Vec<Value> = (0..=npss.min(31))
        .map(|i| {
            let p = 2048 + 32 * i;
            json!({
                "max_power": le(b, p, 2), "flags": le(b, p + 3, 1), "entry_lat": le(b, p + 4, 4),
                "exit_lat": le(b, p + 8, 4), "read_tput": le(b, p + 12, 1), "read_lat": le(b, p + 13, 1),
                "write_tput": le(b, p + 14, 1), "write_lat": le(b, p + 15, 1),
                "idle_power": le(b, p + 16, 2), "idle_scale": le(b, p + 18, 1) >> 6 & 3,
                "active_power": le(b, p + 20, 2), "active_power_work": le(b, p + 22, 1) & 7,
                "active_scale": le(b, p + 22, 1) >> 6 & 3,
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
    let int = |name: &str, off: usize, n: usize| (name.to_string(), json!(le(b, off, n)));
    let mut fields: Vec<(String, Value)> = [
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
    ]
    .iter()
    .map(|&(n, o, l)| int(n, o, l))
    .collect();
    fields.push(("nvmcap".into(), json!(u128_text(b, 48))));
    fields.push(int("nsattr", 99, 1));
    fields.push(int("nvmsetid", 100, 2));
    // The optimal I/O fields only when NSFEAT bit 4 says they are there, as nvme-cli.
    if le(b, 24, 1) & 0x10 != 0 {
        for (n, o) in [
            ("npwg", 64),
            ("npwa", 66),
            ("npdg", 68),
            ("npda", 70),
            ("nows", 72),
        ] {
            fields.push(int(n, o, 2));
        }
    }
    fields.extend([
        int("mssrl", 74, 2),
        int("mcl", 76, 4),
        int("msrc", 80, 1),
        int("nulbaf", 82, 1),
        int("anagrpid", 92, 4),
        int("endgid", 102, 2),
    ]);
    m.extend(fields);
    let hex = |off: usize, n: usize| {
        (off..off + n)
            .map(|i| format!("{:02x}", le(b, i, 1)))
            .collect::<String>()
    };
    m.insert("eui64".into(), json!(hex(120, 8)));
    m.insert("nguid".into(), json!(hex(104, 16)));
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
