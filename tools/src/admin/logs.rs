//! `smart-log`, `error-log`, `fw-log` and `get-log`.

use super::identify::{ascii, le};
use super::{failed, put, put_json, Format, Io, Target};
use anyhow::{bail, Result};
use clap::Args;
use serde_json::{json, Map, Value};
use vfnvme::platform::Platform;
use vfnvme::Controller;

/// Arguments of `smart-log`.
#[derive(Args, Debug)]
pub struct SmartLogArgs {
    #[command(flatten)]
    pub target: Target,
    /// Namespace (0xffffffff = the controller).
    #[arg(short = 'n', long = "namespace-id", default_value = "0xffffffff", value_parser = super::num_u32)]
    pub nsid: u32,
    #[command(flatten)]
    pub format: Format,
}

/// Arguments of `error-log`.
#[derive(Args, Debug)]
pub struct ErrorLogArgs {
    #[command(flatten)]
    pub target: Target,
    /// Entries to read (default: all the controller keeps, ELPE + 1).
    #[arg(short = 'e', long = "log-entries")]
    pub entries: Option<u32>,
    #[command(flatten)]
    pub format: Format,
}

/// Arguments of `fw-log` and `sanitize-log`.
#[derive(Args, Debug)]
pub struct FwLogArgs {
    #[command(flatten)]
    pub target: Target,
    #[command(flatten)]
    pub format: Format,
}

/// Arguments of `get-log`.
#[derive(Args, Debug)]
pub struct GetLogArgs {
    #[command(flatten)]
    pub target: Target,
    /// Log page identifier.
    #[arg(short = 'i', long = "log-id", value_parser = super::num_u8)]
    pub log_id: u8,
    /// Bytes to read (a non-zero multiple of 4).
    #[arg(short = 'l', long = "log-len", value_parser = super::num_u32)]
    pub log_len: u32,
    /// Namespace (0xffffffff = the controller).
    #[arg(short = 'n', long = "namespace-id", default_value = "0xffffffff", value_parser = super::num_u32)]
    pub nsid: u32,
    /// Retain the asynchronous event this log clears.
    #[arg(short = 'r', long)]
    pub rae: bool,
    /// Log specific field (0..=127).
    #[arg(short = 's', long = "lsp", default_value = "0", value_parser = super::num_u8)]
    pub lsp: u8,
    /// Log page offset in bytes (a multiple of 4).
    #[arg(short = 'o', long = "lpo", default_value = "0", value_parser = super::num_u64)]
    pub lpo: u64,
    /// Log specific identifier.
    #[arg(short = 'S', long = "lsi", default_value = "0", value_parser = super::num_u16)]
    pub lsi: u16,
    /// Command set identifier.
    #[arg(short = 'y', long = "csi", default_value = "0", value_parser = super::num_u8)]
    pub csi: u8,
    /// Write the raw bytes to standard output instead of a hex dump.
    #[arg(short = 'b', long = "raw-binary")]
    pub raw: bool,
}

fn read_log<P: Platform>(
    ctrl: &Controller<P>,
    lid: u8,
    nsid: u32,
    len: usize,
    what: &str,
) -> Result<Vec<u8>> {
    Ok(ctrl
        .get_log_page(lid, nsid, len, false)
        .map_err(|e| failed(e, what))?
        .as_slice()[..len]
        .to_vec())
}

/// A 128-bit little-endian counter (missing bytes read as zero).
fn counter128(b: &[u8], off: usize) -> u128 {
    u128::from(le(b, off + 8, 8)) << 64 | u128::from(le(b, off, 8))
}

/// A 128-bit counter as nvme-cli prints it in JSON: every bit, as a decimal string.
fn counter(b: &[u8], off: usize) -> String {
    counter128(b, off).to_string()
}

/// `bytes` in SI units as nvme-cli's smart-log prints data units: `%.2Lf %sB`.
fn si_bytes(bytes: f64) -> String {
    const SI: [(f64, &str); 11] = [
        (1e30, "Q"),
        (1e27, "R"),
        (1e24, "Y"),
        (1e21, "Z"),
        (1e18, "E"),
        (1e15, "P"),
        (1e12, "T"),
        (1e9, "G"),
        (1e6, "M"),
        (1e3, "k"),
        (1e0, ""),
    ];
    let (m, suffix) = SI
        .iter()
        .copied()
        .find(|(m, _)| bytes >= *m)
        .unwrap_or((1.0, ""));
    format!("{:.2} {suffix}B", bytes / m)
}

/// The SMART / Health log in nvme-cli's text layout (its labels, units and order).
pub fn smart_text(b: &[u8], device: &str, nsid: u32) -> String {
    let celsius = |k: u64| k as i64 - 273;
    let temp = le(b, 1, 2);
    let units = |off| {
        let n = counter128(b, off);
        format!("{n} ({})", si_bytes(n as f64 * 512_000.0))
    };
    let mut t = format!("Smart Log for NVME device:{device} namespace-id:{nsid:x}\n");
    let mut line = |label: &str, value: String| t.push_str(&format!("{label}: {value}\n"));
    line("critical_warning\t\t\t", format!("{:#x}", le(b, 0, 1)));
    line(
        "temperature\t\t\t\t",
        format!("{}°C ({temp} Kelvin)", celsius(temp)),
    );
    line("available_spare\t\t\t\t", format!("{}%", le(b, 3, 1)));
    line("available_spare_threshold\t\t", format!("{}%", le(b, 4, 1)));
    line("percentage_used\t\t\t\t", format!("{}%", le(b, 5, 1)));
    line(
        "endurance group critical warning summary",
        format!("{:#x}", le(b, 6, 1)),
    );
    line("Data Units Read\t\t\t\t", units(32));
    line("Data Units Written\t\t\t", units(48));
    for (label, off) in [
        ("host_read_commands\t\t\t", 64),
        ("host_write_commands\t\t\t", 80),
        ("controller_busy_time\t\t\t", 96),
        ("power_cycles\t\t\t\t", 112),
        ("power_on_hours\t\t\t\t", 128),
        ("unsafe_shutdowns\t\t\t", 144),
        ("media_errors\t\t\t\t", 160),
        ("num_err_log_entries\t\t\t", 176),
    ] {
        line(label, counter(b, off));
    }
    line("Warning Temperature Time\t\t", le(b, 192, 4).to_string());
    line(
        "Critical Composite Temperature Time\t",
        le(b, 196, 4).to_string(),
    );
    for i in 0..8 {
        let k = le(b, 200 + 2 * i, 2);
        if k != 0 {
            line(
                &format!("Temperature Sensor {}           ", i + 1),
                format!("{}°C ({k} Kelvin)", celsius(k)),
            );
        }
    }
    for (label, off) in [
        ("Thermal Management T1 Trans Count\t", 216),
        ("Thermal Management T2 Trans Count\t", 220),
        ("Thermal Management T1 Total Time\t", 224),
        ("Thermal Management T2 Total Time\t", 228),
    ] {
        line(label, le(b, off, 4).to_string());
    }
    t
}

/// The SMART / Health log with nvme-cli's JSON names.
pub fn smart_json(b: &[u8]) -> Value {
    let mut m = Map::new();
    m.insert("critical_warning".into(), json!(le(b, 0, 1)));
    m.insert("temperature".into(), json!(le(b, 1, 2)));
    m.insert("avail_spare".into(), json!(le(b, 3, 1)));
    m.insert("spare_thresh".into(), json!(le(b, 4, 1)));
    m.insert("percent_used".into(), json!(le(b, 5, 1)));
    m.insert(
        "endurance_grp_critical_warning_summary".into(),
        json!(le(b, 6, 1)),
    );
    for (name, off) in [
        ("data_units_read", 32),
        ("data_units_written", 48),
        ("host_read_commands", 64),
        ("host_write_commands", 80),
        ("controller_busy_time", 96),
        ("power_cycles", 112),
        ("power_on_hours", 128),
        ("unsafe_shutdowns", 144),
        ("media_errors", 160),
        ("num_err_log_entries", 176),
    ] {
        m.insert(name.into(), json!(counter(b, off)));
    }
    m.insert("warning_temp_time".into(), json!(le(b, 192, 4)));
    m.insert("critical_comp_time".into(), json!(le(b, 196, 4)));
    for i in 0..8 {
        let t = le(b, 200 + 2 * i, 2);
        if t != 0 {
            m.insert(format!("temperature_sensor_{}", i + 1), json!(t));
        }
    }
    m.insert("thm_temp1_trans_count".into(), json!(le(b, 216, 4)));
    m.insert("thm_temp2_trans_count".into(), json!(le(b, 220, 4)));
    m.insert("thm_temp1_total_time".into(), json!(le(b, 224, 4)));
    m.insert("thm_temp2_total_time".into(), json!(le(b, 228, 4)));
    Value::Object(m)
}

/// One 64-byte Error Information log entry with nvme-cli's JSON names (missing bytes read as
/// zero).
pub fn error_entry_json(e: &[u8]) -> Value {
    json!({
        "error_count": le(e, 0, 8), "sqid": le(e, 8, 2), "cmdid": le(e, 10, 2),
        "status_field": le(e, 12, 2) >> 1, "phase_tag": le(e, 12, 1) & 1,
        "parm_error_location": le(e, 14, 2), "lba": le(e, 16, 8), "nsid": le(e, 24, 4),
        "vs": le(e, 28, 1), "trtype": le(e, 29, 1), "csi": le(e, 30, 1), "opcode": le(e, 31, 1),
        "cs": le(e, 32, 8), "trtype_spec_info": le(e, 40, 2),
    })
}

/// One Error Information log entry in nvme-cli's text layout.
pub fn error_text(e: &[u8]) -> String {
    let status = vfnvme::spec::Status::from_field(le(e, 12, 2) as u16 >> 1);
    let trtype = match le(e, 29, 1) {
        1 => "RDMA Transport (NVMe over Fabrics)",
        2 => "Fibre Channel Transport",
        3 => "TCP Transport",
        0xfe => "Intra-host Transport (i.e., loopback)",
        _ => "Reserved",
    };
    format!(
        "error_count\t: {}\nsqid\t\t: {}\ncmdid\t\t: {:#x}\nstatus_field\t: {:#x}({})\nphase_tag\t: {:#x}\nparm_err_loc\t: {:#x}\nlba\t\t: {:#x}\nnsid\t\t: {:#x}\nvs\t\t: {}\ntrtype\t\t: {trtype}\ncs\t\t: {:#x}\ntrtype_spec_info: {:#x}\n",
        le(e, 0, 8),
        le(e, 8, 2),
        le(e, 10, 2),
        le(e, 12, 2) >> 1,
        status.name().unwrap_or("Unknown"),
        le(e, 12, 1) & 1,
        le(e, 14, 2),
        le(e, 16, 8),
        le(e, 24, 4),
        le(e, 28, 1),
        le(e, 32, 8),
        le(e, 40, 2),
    )
}

/// The Firmware Slot Information log: AFI and the revisions of the slots that have one.
pub fn fw_slots_json(b: &[u8]) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("afi".into(), json!(le(b, 0, 1)));
    for slot in 1..=7 {
        let rev = ascii(b, 8 * slot, 8);
        if !rev.is_empty() {
            m.insert(format!("frs{slot}"), json!(rev));
        }
    }
    m
}

/// `vfnvme smart-log`.
pub fn smart_log<P: Platform>(ctrl: &Controller<P>, a: &SmartLogArgs, io: &mut Io) -> Result<()> {
    let b = read_log(ctrl, 0x02, a.nsid, 512, "SMART / Health log (02h)")?;
    if a.format.binary() {
        return io.out.write_all(&b).map_err(Into::into);
    }
    let v = smart_json(&b);
    if a.format.json() {
        return put_json(io, &v);
    }
    let name = io.name.clone();
    io.out
        .write_all(smart_text(&b, &name, a.nsid).as_bytes())
        .map_err(Into::into)
}

/// `vfnvme error-log`.
pub fn error_log<P: Platform>(ctrl: &Controller<P>, a: &ErrorLogArgs, io: &mut Io) -> Result<()> {
    let max = u32::from(ctrl.identify().identify.elpe) + 1;
    let n = a.entries.unwrap_or(max);
    if n == 0 || n > max {
        bail!("--log-entries {n}: this controller keeps 1..={max} error log entries (ELPE + 1)");
    }
    let b = read_log(
        ctrl,
        0x01,
        u32::MAX,
        n as usize * 64,
        "Error Information log (01h)",
    )?;
    let entries: Vec<Value> = b.chunks_exact(64).map(error_entry_json).collect();
    if a.format.json() {
        return put_json(io, &json!({ "errors": entries }));
    }
    put(
        io,
        &format!("Error Log Entries for device:{} entries:{n}", io.name),
    )?;
    put(io, ".................")?;
    for (i, e) in b.chunks_exact(64).enumerate() {
        put(
            io,
            &format!(
                " Entry[{i:2}]   \n.................\n{}.................",
                error_text(e)
            ),
        )?;
    }
    Ok(())
}

/// `vfnvme fw-log`.
pub fn fw_log<P: Platform>(ctrl: &Controller<P>, a: &FwLogArgs, io: &mut Io) -> Result<()> {
    let b = read_log(
        ctrl,
        0x03,
        u32::MAX,
        512,
        "Firmware Slot Information log (03h)",
    )?;
    let m = fw_slots_json(&b);
    let slot_text = |slot: usize| {
        let raw = le(&b, 8 * slot, 8);
        let shown: String = (0..8)
            .map(|i| {
                let c = le(&b, 8 * slot + i, 1) as u8;
                if (b'!'..=b'~').contains(&c) {
                    c as char
                } else {
                    '.'
                }
            })
            .collect();
        (raw, shown)
    };
    let slots: Vec<usize> = (1..=7).filter(|&s| le(&b, 8 * s, 1) != 0).collect();
    if a.format.json() {
        // nvme-cli's object under the device's name; vfnvme's own under "fw_log".
        let mut dev = Map::new();
        dev.insert("Active Firmware Slot (afi)".into(), json!(le(&b, 0, 1)));
        for &slot in &slots {
            let (raw, shown) = slot_text(slot);
            dev.insert(
                format!("Firmware Rev Slot {slot}"),
                json!(format!("{raw} ({shown})")),
            );
        }
        let mut root = Map::new();
        root.insert(io.name.clone(), Value::Object(dev));
        root.insert("fw_log".into(), Value::Object(m));
        return put_json(io, &Value::Object(root));
    }
    put(io, &format!("Firmware Log for device:{}", io.name))?;
    put(io, &format!("afi  : {:#x}", le(&b, 0, 1)))?;
    for slot in slots {
        let (raw, shown) = slot_text(slot);
        put(io, &format!("frs{slot} : {raw:#016x} ({shown})"))?;
    }
    Ok(())
}

/// SSTAT's status (bits 2:0) as nvme-cli words it.
fn sanitize_status(sstat: u64) -> &'static str {
    match sstat & 7 {
        0 => "NVM Subsystem has never been sanitized.",
        1 => "Most Recent Sanitize Command Completed Successfully.",
        2 => "Sanitize in Progress.",
        3 => "Most Recent Sanitize Command Failed.",
        4 => "Most Recent Sanitize Command (No-Deallocate After Sanitize) Completed Successfully.",
        _ => "Unknown",
    }
}

/// The Sanitize Status log's estimated times, nvme-cli's JSON name and text label each.
const SANITIZE_TIMES: [(&str, &str, usize); 6] = [
    (
        "time_over_write",
        "Estimated Time For Overwrite                   ",
        8,
    ),
    (
        "time_block_erase",
        "Estimated Time For Block Erase                 ",
        12,
    ),
    (
        "time_crypto_erase",
        "Estimated Time For Crypto Erase                ",
        16,
    ),
    (
        "time_over_write_no_dealloc",
        "Estimated Time For Overwrite (No-Deallocate)   ",
        20,
    ),
    (
        "time_block_erase_no_dealloc",
        "Estimated Time For Block Erase (No-Deallocate) ",
        24,
    ),
    (
        "time_crypto_erase_no_dealloc",
        "Estimated Time For Crypto Erase (No-Deallocate)",
        28,
    ),
];

/// The Sanitize Status log (81h) as nvme-cli's JSON: its fields under the device's name.
pub fn sanitize_json(b: &[u8], device: &str) -> Value {
    let sstat = le(b, 2, 2);
    let mut dev = Map::new();
    dev.insert("sprog".into(), json!(le(b, 0, 2)));
    dev.insert(
        "sstat".into(),
        json!({
            "global_erased": sstat >> 8 & 1,
            "no_cmplted_passes": sstat >> 3 & 0x1f,
            "status": format!("({}) {}", sstat & 7, sanitize_status(sstat)),
        }),
    );
    dev.insert("cdw10_info".into(), json!(le(b, 4, 4)));
    for (name, _, off) in SANITIZE_TIMES {
        dev.insert(name.into(), json!(le(b, off, 4)));
    }
    let mut root = Map::new();
    root.insert(device.into(), Value::Object(dev));
    Value::Object(root)
}

/// The Sanitize Status log in nvme-cli's text layout.
pub fn sanitize_text(b: &[u8]) -> String {
    let mut t = format!(
        "Sanitize Progress                      (SPROG) :  {}\nSanitize Status                        (SSTAT) :  {:#x}\nSanitize Command Dword 10 Information (SCDW10) :  {:#x}\n",
        le(b, 0, 2),
        le(b, 2, 2) & 7,
        le(b, 4, 4)
    );
    for (_, label, off) in SANITIZE_TIMES {
        let v = le(b, off, 4);
        let none = if v == 0xffff_ffff {
            " (No time period reported)"
        } else {
            ""
        };
        t.push_str(&format!("{label}:  {v}{none}\n"));
    }
    t
}

/// `vfnvme sanitize-log`.
pub fn sanitize_log<P: Platform>(ctrl: &Controller<P>, a: &FwLogArgs, io: &mut Io) -> Result<()> {
    let b = read_log(ctrl, 0x81, u32::MAX, 512, "Sanitize Status log (81h)")?;
    if a.format.binary() {
        return io.out.write_all(&b).map_err(Into::into);
    }
    if a.format.json() {
        let v = sanitize_json(&b, &io.name);
        return put_json(io, &v);
    }
    io.out
        .write_all(sanitize_text(&b).as_bytes())
        .map_err(Into::into)
}

/// nvme-cli's hex dump: 16 bytes a line with an offset and the printable characters.
pub fn hex_dump(b: &[u8]) -> String {
    let mut s = String::from("       0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f\n");
    for (i, row) in b.chunks(16).enumerate() {
        let hex: Vec<String> = row.iter().map(|x| format!("{x:02x}")).collect();
        let text: String = row
            .iter()
            .map(|&x| if x.is_ascii_graphic() { x as char } else { '.' })
            .collect();
        s += &format!("{:04x}: {:<47} \"{text}\"\n", i * 16, hex.join(" "));
    }
    s
}

/// `vfnvme get-log`.
pub fn get_log<P: Platform>(ctrl: &Controller<P>, a: &GetLogArgs, io: &mut Io) -> Result<()> {
    if a.log_len == 0 || !a.log_len.is_multiple_of(4) {
        bail!(
            "--log-len {}: give a non-zero multiple of 4 bytes",
            a.log_len
        );
    }
    let what = format!("log page {:#04x}", a.log_id);
    let b = ctrl
        .get_log_page_with(&vfnvme::LogPageRequest {
            lid: a.log_id,
            nsid: a.nsid,
            len: a.log_len as usize,
            offset: a.lpo,
            rae: a.rae,
            lsp: a.lsp,
            lsi: a.lsi,
            csi: a.csi,
        })
        .map_err(|e| failed(e, &what))?;
    if a.raw {
        return io.out.write_all(b.as_slice()).map_err(Into::into);
    }
    put(
        io,
        &format!(
            "Device:{} log-id:{} namespace-id:{:#x}",
            io.name, a.log_id, a.nsid
        ),
    )?;
    let dump = hex_dump(b.as_slice());
    io.out.write_all(dump.as_bytes())?;
    Ok(())
}
