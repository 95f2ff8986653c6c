//! `vfnvme identify BDF`: a controller's identify data and its namespaces.

use crate::open;
use crate::output::say;
use anyhow::Result;
use clap::Args;
use serde_json::{json, Value};
use vfnvme::platform::Platform;
use vfnvme::{Controller, ControllerOptions};

/// Arguments of `vfnvme identify`.
#[derive(Args, Debug)]
pub struct IdentifyArgs {
    /// The controller, bound to vfio-pci (e.g. 0000:01:00.0).
    #[arg(value_name = "BDF", required_unless_present = "model")]
    pub bdf: Option<String>,
    /// Show the in-memory controller model instead (the one the admin commands' --model use).
    #[arg(long, conflicts_with = "bdf")]
    pub model: bool,
    /// Show only this namespace.
    #[arg(long)]
    pub nsid: Option<u32>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The I/O queue pairs `identify` asks for: the most Number of Queues can express (65535
/// pairs, 0-based 0xfffe), so the controller answers with all it has.
pub const MAX_IO_QUEUES: u16 = u16::MAX - 1;

/// Formats bytes as hex, e.g. `0011223344556677`; `None` when all zero (not reported).
pub fn hex_id(bytes: &[u8]) -> Option<String> {
    if bytes.iter().all(|b| *b == 0) {
        return None;
    }
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The controller and namespace data as JSON (`nsid` = only that namespace).
pub fn describe<P: Platform>(ctrl: &Controller<P>, nsid: Option<u32>) -> Result<Value> {
    let info = ctrl.identify();
    let id = &info.identify;
    let namespaces: Vec<_> = match nsid {
        Some(n) => vec![ctrl.namespace(n).ok_or_else(|| {
            anyhow::anyhow!(
                "namespace {n} is not active on {}: active namespaces are {:?}",
                ctrl.platform().name(),
                ctrl.namespaces()
                    .iter()
                    .map(|n| n.nsid())
                    .collect::<Vec<_>>()
            )
        })?],
        None => ctrl.namespaces(),
    };
    let ns_json: Vec<Value> = namespaces
        .iter()
        .map(|ns| {
            let ident = ns.identity();
            json!({
                "nsid": ns.nsid(),
                "blocks": ns.blocks(),
                "lba_size": ns.lba_size(),
                "size_bytes": ns.size_bytes(),
                "metadata_size": ident.metadata_size,
                "metadata_extended": ident.metadata_extended,
                "protection_type": ident.protection_type,
                "protection_first": ident.protection_first,
                "metadata": ident.metadata_format().to_string(),
                "format": ident.format_label(),
                "io_supported": !ns.io_refused(),
                "eui64": hex_id(&ident.eui64),
                "nguid": hex_id(&ident.nguid),
                "uuid": hex_id(&ident.uuid),
            })
        })
        .collect();
    Ok(json!({
        "device": ctrl.platform().name(),
        "vid": format!("{:04x}", id.vid),
        "ssvid": format!("{:04x}", id.ssvid),
        "serial": info.serial(),
        "model": info.model(),
        "firmware": info.firmware(),
        "version": info.version.to_string(),
        "cntlid": id.cntlid,
        "mdts": id.mdts,
        "mdts_bytes": info.mdts_bytes(),
        "max_transfer_bytes": info.max_transfer_bytes,
        "nn": id.nn,
        "oacs": format!("{:#06x}", id.oacs),
        "oncs": format!("{:#06x}", id.oncs),
        "cmic": format!("{:#04x}", id.cmic),
        "sqes": format!("{:#04x}", id.sqes),
        "cqes": format!("{:#04x}", id.cqes),
        "max_queue_depth": info.max_queue_depth,
        "io_queue_pairs": info.io_queue_pairs,
        "shadow_doorbells": info.shadow_doorbells,
        "subnqn": id.subnqn,
        "namespaces": ns_json,
    }))
}

/// The text form of [`describe`]'s JSON.
pub fn text(v: &Value) -> String {
    let s = |k: &str| match &v[k] {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    let mut out = format!(
        "{dev}: {model} (serial {serial}, firmware {fw}), vendor {vid}, NVMe {ver}\n\
         \x20 cntlid {cntlid}  nn {nn}  mdts {mdts} ({mdtsb} bytes)  oacs {oacs}  oncs {oncs}  cmic {cmic}\n\
         \x20 sqes {sqes}  cqes {cqes}  max queue depth {mqd}  I/O queue pairs available {qp}  shadow doorbells {sdb}\n\
         \x20 subnqn {subnqn}\n\
         \x20 DMA mode {mode}\n",
        dev = s("device"),
        model = s("model"),
        serial = s("serial"),
        fw = s("firmware"),
        vid = s("vid"),
        ver = s("version"),
        cntlid = s("cntlid"),
        nn = s("nn"),
        mdts = s("mdts"),
        mdtsb = s("mdts_bytes"),
        oacs = s("oacs"),
        oncs = s("oncs"),
        cmic = s("cmic"),
        sqes = s("sqes"),
        cqes = s("cqes"),
        mqd = s("max_queue_depth"),
        qp = s("io_queue_pairs"),
        sdb = if v["shadow_doorbells"] == Value::Bool(true) { "on" } else { "off" },
        subnqn = s("subnqn"),
        mode = s("mode"),
    );
    let empty = Vec::new();
    let namespaces = v["namespaces"].as_array().unwrap_or(&empty);
    if namespaces.is_empty() {
        out.push_str("  no active namespaces\n");
    }
    for ns in namespaces {
        let f = |k: &str| match &ns[k] {
            Value::String(s) => s.clone(),
            Value::Null => "-".into(),
            other => other.to_string(),
        };
        let bytes = ns["size_bytes"].as_u64().unwrap_or(0);
        out.push_str(&format!(
            "  ns {}: {} blocks x {} B = {:.2} GiB ({} bytes), {}  eui64 {}  nguid {}\n",
            f("nsid"),
            f("blocks"),
            f("lba_size"),
            bytes as f64 / (1u64 << 30) as f64,
            bytes,
            f("metadata"),
            f("eui64"),
            f("nguid"),
        ));
        if ns["io_supported"] == Value::Bool(false) {
            out.push_str(&format!(
                "    plain I/O refused: reads and writes must carry the metadata (Request::with_metadata, vfnvme_qpair_read_md, fio's md_per_io_size; `vfnvme perf` does); or reformat to an LBA format without metadata (`{}`, erases the data)\n",
                crate::admin::reformat_command(&s("device"), f("nsid"))
            ));
        }
    }
    out
}

/// Runs `vfnvme identify`.
pub fn run(args: &IdentifyArgs) -> Result<()> {
    // Ask for as many I/O queue pairs as a controller may have, so that the count printed is
    // what the controller can give (Set Features grants at most what it has; nothing is
    // allocated until queues are created).
    let options = ControllerOptions {
        io_queues: MAX_IO_QUEUES,
        ..ControllerOptions::default()
    };
    let mut v = match &args.bdf {
        Some(bdf) => {
            let ctrl = open::open_controller(bdf, options)?;
            let mut v = describe(&ctrl, args.nsid)?;
            v["mode"] = serde_json::json!(open::mode_of(bdf).to_string());
            v
        }
        None => model_view(args.nsid, options)?,
    };
    if v.get("mode").is_none() {
        v["mode"] = serde_json::json!("model");
    }
    if args.json {
        say!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        crate::output::text(&text(&v));
    }
    Ok(())
}

/// `identify --model`: the admin commands' model controller.
#[cfg(feature = "model")]
fn model_view(nsid: Option<u32>, options: ControllerOptions) -> Result<Value> {
    use anyhow::Context;
    let platform = vfnvme_model::ModelPlatform::new(crate::admin::model_config())
        .context("creating the model")?;
    let ctrl = open::open_platform(platform, "model", options)?;
    describe(&ctrl, nsid)
}

/// `identify --model` in a build without the model: how to get it.
#[cfg(not(feature = "model"))]
fn model_view(_: Option<u32>, _: ControllerOptions) -> Result<Value> {
    anyhow::bail!(
        "--model: this vfnvme was built without the in-memory model; rebuild with \
         `cargo build -p vfnvme-tools --features model` (on by default)"
    )
}

#[cfg(all(test, feature = "model"))]
mod tests {
    use super::*;
    use vfnvme_model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform};

    fn model() -> Controller<ModelPlatform> {
        let cfg = ModelConfig {
            namespaces: vec![
                ModelNamespaceConfig {
                    nsid: 1,
                    blocks: 2048,
                    lba_size: 512,
                    backing: Backing::Ram,
                },
                ModelNamespaceConfig {
                    nsid: 3,
                    blocks: 100,
                    lba_size: 4096,
                    backing: Backing::Null,
                },
            ],
            serial: "SER123".into(),
            ..ModelConfig::default()
        };
        Controller::new(
            ModelPlatform::new(cfg).unwrap(),
            ControllerOptions::default(),
        )
        .unwrap()
    }

    #[test]
    fn describes_the_model() {
        let ctrl = model();
        let v = describe(&ctrl, None).unwrap();
        assert_eq!(v["serial"], "SER123");
        assert_eq!(v["nn"], 3);
        let ns = v["namespaces"].as_array().unwrap();
        assert_eq!(ns.len(), 2);
        assert_eq!(ns[1]["nsid"], 3);
        assert_eq!(ns[1]["lba_size"], 4096);
        assert_eq!(ns[1]["size_bytes"], 409_600);
        let t = text(&v);
        assert!(
            t.contains("SER123") && t.contains("ns 3: 100 blocks x 4096 B"),
            "{t}"
        );
    }

    #[test]
    fn one_namespace_or_a_clear_error() {
        let ctrl = model();
        let v = describe(&ctrl, Some(1)).unwrap();
        assert_eq!(v["namespaces"].as_array().unwrap().len(), 1);
        let e = describe(&ctrl, Some(2)).unwrap_err().to_string();
        assert!(
            e.contains("namespace 2 is not active") && e.contains("[1, 3]"),
            "{e}"
        );
    }

    #[test]
    fn ids_in_hex_or_none() {
        assert_eq!(hex_id(&[0; 8]), None);
        assert_eq!(hex_id(&[0, 1, 0xab]).as_deref(), Some("0001ab"));
    }
}
