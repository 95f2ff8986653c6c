//! `vfnvme format BDF --nsid N [--lbaf I] --yes`: Format NVM of one namespace, by default to the
//! LBA format of the same block size without metadata (vfnvme refuses I/O to formats with
//! metadata or protection information). Erases the namespace's data.

use crate::open;
use crate::output::say;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use vfnvme::platform::Platform;
use vfnvme::spec::identify::IdentifyNamespace;
use vfnvme::spec::Command;
use vfnvme::{Controller, ControllerOptions};

/// Arguments of `vfnvme format`.
#[derive(Args, Debug)]
pub struct FormatArgs {
    /// The controller, bound to vfio-pci (e.g. 0000:01:00.0).
    #[arg(value_name = "BDF")]
    pub bdf: String,
    /// The namespace to format.
    #[arg(long)]
    pub nsid: u32,
    /// The LBA format index (default: the one with the current block size and no metadata).
    #[arg(long)]
    pub lbaf: Option<u8>,
    /// Confirm that the namespace's data is to be erased.
    #[arg(long)]
    pub yes: bool,
}

/// One line per LBA format: `index: data bytes + metadata bytes`.
fn formats(id: &IdentifyNamespace) -> String {
    id.lbaf
        .iter()
        .enumerate()
        .map(|(i, f)| format!("{i}: {} B + {} B metadata", 1u64 << f.lbads, f.ms))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Formats namespace `nsid` of `ctrl` to `lbaf` (or the default choice) and rescans it;
/// returns what was done.
pub fn format_namespace<P: Platform>(
    ctrl: &Controller<P>,
    nsid: u32,
    lbaf: Option<u8>,
    yes: bool,
) -> Result<String> {
    let ns = ctrl.namespace(nsid).ok_or_else(|| {
        anyhow!(
            "namespace {nsid} is not active on {}",
            ctrl.platform().name()
        )
    })?;
    let page = ctrl.dma().alloc(4096)?;
    ctrl.admin_sync(Command::identify_namespace(nsid, page.iova()))
        .context("Identify Namespace")?;
    let id = IdentifyNamespace::parse(page.as_slice())?;
    let current = id.format_index();
    let target = match lbaf {
        Some(i) => usize::from(i),
        None => id
            .lbaf
            .iter()
            .position(|f| f.ms == 0 && u32::from(f.lbads) == u32::from(ns.lba_shift()))
            .or_else(|| id.lbaf.iter().position(|f| f.ms == 0 && (9..=16).contains(&f.lbads)))
            .ok_or_else(|| {
                anyhow!(
                    "namespace {nsid} offers no LBA format without metadata ({}): vfnvme cannot do I/O on it",
                    formats(&id)
                )
            })?,
    };
    let Some(fmt) = id.lbaf.get(target) else {
        bail!(
            "namespace {nsid} has no LBA format {target}: its formats are {}",
            formats(&id)
        );
    };
    if fmt.ms != 0 {
        bail!(
            "LBA format {target} has {} B of metadata per block, which vfnvme does not transfer: choose one without metadata ({})",
            fmt.ms,
            formats(&id)
        );
    }
    let plan = format!(
        "namespace {nsid}: LBA format {current} ({}) -> {target} ({} B blocks, no metadata, no protection information)",
        ns.identity().metadata_format(),
        1u64 << fmt.lbads
    );
    if !yes {
        bail!("{plan} erases all data of namespace {nsid}: add --yes to do it");
    }
    ctrl.admin_sync(Command::format_nvm(nsid, target as u8, false, 0))
        .with_context(|| format!("Format NVM of namespace {nsid}"))?;
    ctrl.rescan_namespaces(&[nsid]);
    let now = ctrl
        .namespace(nsid)
        .ok_or_else(|| anyhow!("namespace {nsid} is gone after the format"))?;
    Ok(format!(
        "{plan}: done, now {} blocks of {} B, {}",
        now.blocks(),
        now.lba_size(),
        now.identity().metadata_format()
    ))
}

/// Runs `vfnvme format`.
pub fn run(args: &FormatArgs) -> Result<()> {
    let ctrl = open::open_controller(
        &args.bdf,
        ControllerOptions {
            io_queues: 1,
            // Format NVM can take minutes on large SSDs.
            admin_timeout_ms: 600_000,
            ..ControllerOptions::default()
        },
    )?;
    say!(
        "{}",
        format_namespace(&ctrl, args.nsid, args.lbaf, args.yes)?
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use vfnvme::model::{Backing, ModelConfig, ModelMetadata, ModelNamespaceConfig, ModelPlatform};

    fn model() -> Controller<ModelPlatform> {
        let cfg = ModelConfig {
            namespaces: vec![ModelNamespaceConfig {
                nsid: 2,
                blocks: 4096,
                lba_size: 4096,
                backing: Backing::Ram,
            }],
            namespace_metadata: vec![(
                2,
                ModelMetadata {
                    ms: 16,
                    extended: false,
                    pi: 1,
                },
            )],
            ..ModelConfig::default()
        };
        Controller::new(
            ModelPlatform::new(cfg).unwrap(),
            ControllerOptions::default(),
        )
        .unwrap()
    }

    #[test]
    fn formats_a_metadata_namespace_to_the_same_block_size_without_metadata() {
        let ctrl = model();
        assert!(ctrl.namespace(2).unwrap().io_refused());
        let e = format_namespace(&ctrl, 2, None, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("add --yes") && e.contains("-> 1 (4096 B"), "{e}");
        assert!(
            ctrl.namespace(2).unwrap().io_refused(),
            "nothing done without --yes"
        );
        let e = format_namespace(&ctrl, 2, Some(3), true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("16 B of metadata"), "{e}");
        let done = format_namespace(&ctrl, 2, None, true).unwrap();
        assert!(
            done.contains("now 4096 blocks of 4096 B, no metadata"),
            "{done}"
        );
        let ns = ctrl.namespace(2).unwrap();
        assert!(!ns.io_refused());
        let mut qp = ctrl.alloc_qpair(vfnvme::QpairOptions::default()).unwrap();
        let buf = ctrl.dma().alloc(4096).unwrap();
        qp.write_sync(&ns, 0, 1, buf)
            .expect("I/O works after the format");
        let e = format_namespace(&ctrl, 9, None, true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("namespace 9 is not active"), "{e}");
    }
}
