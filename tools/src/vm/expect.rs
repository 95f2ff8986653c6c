//! The facts a scenario promises, as `VFNVME_*` environment variables for guest tests.
//!
//! - `VFNVME_SCENARIO`: the scenario's name.
//! - `VFNVME_VFIO_DEVICES` / `VFNVME_KERNEL_DEVICES`: comma-separated PCI addresses.
//! - `VFNVME_EXPECT_MODEL`: the model string (`QEMU NVMe Ctrl`).
//! - `VFNVME_EXPECT_MDTS`: MDTS as a power of two of 4 KiB pages.
//! - `VFNVME_EXPECT_SERIAL` / `VFNVME_EXPECT_NS`: of the first vfio-pci controller.
//! - `VFNVME_EXPECT_SERIAL_<SLOT>` / `VFNVME_EXPECT_NS_<SLOT>`: per controller, slot in hex
//!   (e.g. `VFNVME_EXPECT_NS_11`).
//! - `VFNVME_EXPECT_SUBNQN`: the subsystem NQN, when the scenario has a subsystem.
//! - `VFNVME_EXPECT_METADATA`: the first vfio-pci controller's namespaces formatted with
//!   metadata, as `nsid:ms:mset:pi:pil` items joined by commas (empty when none).
//! - `VFNVME_EXPECT_IOQPAIRS`: QEMU's `max_ioqpairs` of that controller, when the scenario sets it.
//! - `VFNVME_OTHER_DEVICES`: comma-separated PCI addresses of devices that are not NVMe
//!   controllers (e.g. the `safety` scenario's e1000).
//!
//! - `VFNVME_QEMU_IDS`: `id=bdf` of every controller, joined by commas (`c0=0000:01:00.0`): the
//!   QEMU device id a host-side QMP command such as `device_del` takes.
//! - `VFNVME_REMOVABLE_DEVICES`: comma-separated PCI addresses of the controllers behind a
//!   `pcie-root-port` (QMP `device_del` can hot-remove them).
//! - `VFNVME_EXPECT_MEDIA_ERRORS`: the first vfio-pci controller's namespaces on `blkdebug`, as
//!   `nsid:read_error_sector:write_error_sector` items (512-byte sectors) joined by commas.
//!
//! A namespace list is `nsid:blocks:lba_size` items joined by commas.

use super::devices::qemu_id;
use super::scenarios::{Backing, Binding, Controller, Scenario, QEMU_DEFAULT_MDTS, QEMU_MODEL};

/// The environment variables describing `scenario`, with `extra_vfio` (from `--vfio`) added
/// to the vfio-pci device list.
pub fn scenario_env(scenario: &Scenario, extra_vfio: &[String]) -> Vec<(String, String)> {
    let vfio: Vec<String> = scenario
        .controllers_on(Binding::Vfio)
        .map(Controller::bdf)
        .chain(extra_vfio.iter().cloned())
        .collect();
    let kernel: Vec<String> = scenario
        .controllers_on(Binding::Kernel)
        .map(Controller::bdf)
        .collect();
    let mut env = vec![
        ("VFNVME_SCENARIO".to_string(), scenario.name.to_string()),
        ("VFNVME_VFIO_DEVICES".to_string(), vfio.join(",")),
        ("VFNVME_KERNEL_DEVICES".to_string(), kernel.join(",")),
        (
            "VFNVME_OTHER_DEVICES".to_string(),
            scenario
                .other_devices()
                .iter()
                .map(|d| d.bdf())
                .collect::<Vec<_>>()
                .join(","),
        ),
        ("VFNVME_EXPECT_MODEL".to_string(), QEMU_MODEL.to_string()),
    ];
    let first = scenario.controllers_on(Binding::Vfio).next();
    let mdts = first
        .and_then(|c| c.mdts)
        .map_or(QEMU_DEFAULT_MDTS, u32::from);
    env.push(("VFNVME_EXPECT_MDTS".to_string(), mdts.to_string()));
    if let Some(first) = first {
        env.push(("VFNVME_EXPECT_SERIAL".into(), first.serial.into()));
        env.push(("VFNVME_EXPECT_NS".into(), ns_list(scenario, first)));
        env.push((
            "VFNVME_EXPECT_METADATA".into(),
            metadata_list(scenario, first),
        ));
        env.push((
            "VFNVME_EXPECT_MEDIA_ERRORS".into(),
            media_error_list(scenario, first),
        ));
        if let Some(n) = first.max_ioqpairs {
            env.push(("VFNVME_EXPECT_IOQPAIRS".into(), n.to_string()));
        }
    }
    for c in scenario.controllers {
        env.push((
            format!("VFNVME_EXPECT_SERIAL_{:02X}", c.slot),
            c.serial.into(),
        ));
        env.push((
            format!("VFNVME_EXPECT_NS_{:02X}", c.slot),
            ns_list(scenario, c),
        ));
    }
    let ids: Vec<String> = scenario
        .controllers
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{}={}", qemu_id(i), c.bdf()))
        .collect();
    env.push(("VFNVME_QEMU_IDS".into(), ids.join(",")));
    let removable: Vec<String> = scenario
        .controllers
        .iter()
        .filter(|c| c.bus != 0)
        .map(Controller::bdf)
        .collect();
    env.push(("VFNVME_REMOVABLE_DEVICES".into(), removable.join(",")));
    if let Some(s) = &scenario.subsystem {
        env.push((
            "VFNVME_EXPECT_SUBNQN".into(),
            format!("nqn.2019-08.org.qemu:{}", s.nqn),
        ));
    }
    env
}

/// `nsid:ms:mset:pi:pil` of each namespace of `c` formatted with metadata (mset and pil 0 or 1).
fn metadata_list(scenario: &Scenario, c: &Controller) -> String {
    scenario
        .namespaces_of(c)
        .iter()
        .filter(|n| n.ms != 0 || n.pi != 0)
        .map(|n| {
            format!(
                "{}:{}:{}:{}:{}",
                n.nsid,
                n.ms,
                u8::from(n.mset),
                n.pi,
                u8::from(n.pil)
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// `nsid:read_error_sector:write_error_sector` of each namespace of `c` on `blkdebug`.
fn media_error_list(scenario: &Scenario, c: &Controller) -> String {
    scenario
        .namespaces_of(c)
        .iter()
        .filter_map(|n| match n.backing {
            Backing::FaultyRaw {
                read_error_sector,
                write_error_sector,
            } => Some(format!(
                "{}:{read_error_sector}:{write_error_sector}",
                n.nsid
            )),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn ns_list(scenario: &Scenario, c: &Controller) -> String {
    scenario
        .namespaces_of(c)
        .iter()
        .map(|n| format!("{}:{}:{}", n.nsid, n.blocks(), n.lba_size))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::super::scenarios::find;
    use super::*;

    fn get<'a>(env: &'a [(String, String)], key: &str) -> &'a str {
        env.iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("{key} missing"))
    }

    #[test]
    fn data_facts() {
        let env = scenario_env(find("data").unwrap(), &[]);
        assert_eq!(get(&env, "VFNVME_VFIO_DEVICES"), "0000:00:10.0");
        assert_eq!(get(&env, "VFNVME_KERNEL_DEVICES"), "");
        assert_eq!(get(&env, "VFNVME_EXPECT_SERIAL"), "VFNVME-DATA");
        assert_eq!(get(&env, "VFNVME_EXPECT_NS"), "1:131072:512");
    }

    #[test]
    fn sidebyside_and_extra_vfio() {
        let extra = vec!["0000:00:12.0".to_string()];
        let env = scenario_env(find("sidebyside").unwrap(), &extra);
        assert_eq!(
            get(&env, "VFNVME_VFIO_DEVICES"),
            "0000:00:10.0,0000:00:12.0"
        );
        assert_eq!(get(&env, "VFNVME_KERNEL_DEVICES"), "0000:00:11.0");
        assert_eq!(get(&env, "VFNVME_EXPECT_SERIAL_11"), "VFNVME-SBS-KERNEL");
        assert_eq!(get(&env, "VFNVME_EXPECT_NS_11"), "1:262144:4096");
    }

    #[test]
    fn hotplug_ids_removable_devices_and_media_errors() {
        let env = scenario_env(find("hotplug").unwrap(), &[]);
        assert_eq!(
            get(&env, "VFNVME_VFIO_DEVICES"),
            "0000:01:00.0,0000:00:11.0"
        );
        assert_eq!(
            get(&env, "VFNVME_QEMU_IDS"),
            "c0=0000:01:00.0,c1=0000:00:11.0"
        );
        assert_eq!(get(&env, "VFNVME_REMOVABLE_DEVICES"), "0000:01:00.0");
        assert_eq!(get(&env, "VFNVME_EXPECT_SERIAL_10"), "VFNVME-HOTPLUG");
        assert_eq!(get(&env, "VFNVME_EXPECT_MEDIA_ERRORS"), "");
        let env = scenario_env(find("media").unwrap(), &[]);
        assert_eq!(get(&env, "VFNVME_EXPECT_MEDIA_ERRORS"), "1:2048:4096");
        assert_eq!(get(&env, "VFNVME_EXPECT_NS"), "1:32768:512,2:4096:4096");
        assert_eq!(get(&env, "VFNVME_REMOVABLE_DEVICES"), "");
    }

    #[test]
    fn mphotplug_names_the_removable_controller_and_the_subsystem() {
        let env = scenario_env(find("mphotplug").unwrap(), &[]);
        assert_eq!(
            get(&env, "VFNVME_VFIO_DEVICES"),
            "0000:01:00.0,0000:00:11.0"
        );
        assert_eq!(
            get(&env, "VFNVME_QEMU_IDS"),
            "c0=0000:01:00.0,c1=0000:00:11.0"
        );
        assert_eq!(get(&env, "VFNVME_REMOVABLE_DEVICES"), "0000:01:00.0");
        assert_eq!(get(&env, "VFNVME_EXPECT_NS"), "1:32768:512,2:2048:4096");
        assert_eq!(
            get(&env, "VFNVME_EXPECT_NS_10"),
            get(&env, "VFNVME_EXPECT_NS_11")
        );
        assert_eq!(
            get(&env, "VFNVME_EXPECT_SUBNQN"),
            "nqn.2019-08.org.qemu:vfnvme-mphp"
        );
    }

    #[test]
    fn multipath_shares_namespaces_and_names_subsystem() {
        let env = scenario_env(find("multipath").unwrap(), &[]);
        assert_eq!(
            get(&env, "VFNVME_EXPECT_NS_10"),
            get(&env, "VFNVME_EXPECT_NS_11")
        );
        assert_eq!(get(&env, "VFNVME_EXPECT_NS"), "1:32768:512,2:2048:4096");
        assert_eq!(
            get(&env, "VFNVME_EXPECT_SUBNQN"),
            "nqn.2019-08.org.qemu:vfnvme-mp"
        );
    }
}
