//! The QEMU command line of a guest.

use std::path::Path;

use super::init_script::{HOST_TAG, OUT_TAG};

/// QEMU binary.
pub const QEMU: &str = "qemu-system-x86_64";

/// The emulated Intel IOMMU of the scenarios that have one.
pub const IOMMU_DEVICE: &str = "intel-iommu,intremap=on,caching-mode=on";

/// Everything QEMU needs for one guest.
pub struct GuestConfig<'a> {
    /// `tcg` or `kvm`.
    pub accel: &'a str,
    /// Guest memory in MiB.
    pub memory_mib: u32,
    /// Virtual CPUs.
    pub cpus: u32,
    /// Kernel image.
    pub kernel: &'a Path,
    /// Initramfs.
    pub initramfs: &'a Path,
    /// Kernel command line.
    pub cmdline: &'a str,
    /// Host folder shared writable (mounted in the guest at the same path).
    pub out_dir: &'a Path,
    /// Scenario devices (`devices.rs`), after the IOMMU.
    pub devices: &'a [String],
    /// Raw arguments from `--qemu-arg`, last.
    pub extra: &'a [String],
    /// Unix socket QEMU serves QMP on (`qmp.rs` relays the guest's requests to it).
    pub qmp_socket: Option<&'a Path>,
    /// The emulated Intel IOMMU before the devices; false: none (QEMU's default machine).
    pub iommu: bool,
}

/// QEMU's arguments (without the binary).
pub fn qemu_args(cfg: &GuestConfig<'_>) -> Vec<String> {
    let mut args: Vec<String> = [
        "-M",
        "q35,kernel-irqchip=split",
        "-accel",
        cfg.accel,
        "-vga",
        "none",
        "-net",
        "none",
        "-nographic",
        "-no-reboot",
        // Keep SeaBIOS off the serial console (its escape codes would clear the terminal).
        "-fw_cfg",
        "name=etc/sercon-port,string=0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if cfg.iommu {
        // Before the NVMe devices, which it must translate for.
        args.extend(["-device".into(), IOMMU_DEVICE.into()]);
    }
    args.extend([
        "-smp".into(),
        cfg.cpus.to_string(),
        "-m".into(),
        cfg.memory_mib.to_string(),
        "-kernel".into(),
        cfg.kernel.to_string_lossy().into_owned(),
        "-initrd".into(),
        cfg.initramfs.to_string_lossy().into_owned(),
        "-append".into(),
        cfg.cmdline.to_string(),
        "-virtfs".into(),
        format!(
            "local,path=/,mount_tag={HOST_TAG},security_model=none,readonly=on,multidevs=remap"
        ),
        "-virtfs".into(),
        format!(
            "local,path={},mount_tag={OUT_TAG},security_model=none,multidevs=remap",
            cfg.out_dir.to_string_lossy().replace(',', ",,")
        ),
    ]);
    if let Some(sock) = cfg.qmp_socket {
        args.push("-qmp".into());
        args.push(format!(
            "unix:{},server=on,wait=off",
            sock.to_string_lossy().replace(',', ",,")
        ));
    }
    args.extend(cfg.devices.iter().cloned());
    args.extend(cfg.extra.iter().cloned());
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iommu_comes_before_devices_and_extras_last() {
        let devices = vec!["-device".to_string(), "nvme,id=c0".to_string()];
        let extra = vec!["-S".to_string()];
        let args = qemu_args(&GuestConfig {
            accel: "tcg",
            memory_mib: 2048,
            cpus: 2,
            kernel: Path::new("/boot/vmlinuz"),
            initramfs: Path::new("/i"),
            cmdline: "console=ttyS0",
            out_dir: Path::new("/o"),
            devices: &devices,
            extra: &extra,
            qmp_socket: Some(Path::new("/tmp/q.sock")),
            iommu: true,
        });
        let iommu = args
            .iter()
            .position(|a| a.starts_with("intel-iommu"))
            .unwrap();
        let nvme = args.iter().position(|a| a == "nvme,id=c0").unwrap();
        assert!(iommu < nvme);
        assert_eq!(args.last().unwrap(), "-S");
        assert!(args.windows(2).any(|w| w[0] == "-accel" && w[1] == "tcg"));
        assert!(args
            .windows(2)
            .any(|w| w[0] == "-qmp" && w[1] == "unix:/tmp/q.sock,server=on,wait=off"));
    }

    #[test]
    fn without_iommu_no_intel_iommu_device() {
        let devices = vec!["-device".to_string(), "nvme,id=c0".to_string()];
        let args = qemu_args(&GuestConfig {
            accel: "tcg",
            memory_mib: 2048,
            cpus: 2,
            kernel: Path::new("/boot/vmlinuz"),
            initramfs: Path::new("/i"),
            cmdline: "console=ttyS0",
            out_dir: Path::new("/o"),
            devices: &devices,
            extra: &[],
            qmp_socket: None,
            iommu: false,
        });
        assert!(!args.iter().any(|a| a.contains("iommu")), "{args:?}");
        assert!(args.iter().any(|a| a == "nvme,id=c0"));
        assert!(args
            .windows(2)
            .any(|w| w[0] == "-M" && w[1] == "q35,kernel-irqchip=split"));
    }
}
