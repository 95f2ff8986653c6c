//! Errors of the hardware edge. Every message says what to do about it.

use thiserror::Error;

/// An error from VFIO, the IOMMU, PCI access or DMA memory.
/// How to run without an IOMMU anyway, and what it costs: added to every refusal that an
/// IOMMU is missing.
pub const NO_IOMMU_OPT_IN: &str = "to run without an IOMMU anyway, opt in with --no-iommu (`vfnvme setup --no-iommu`, then --no-iommu on every command; no_iommu in the C ABI and the fio engine): without an IOMMU nothing checks the device's DMA, so any device bug or misuse can then write anywhere in memory";

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum HalError {
    /// The text is not a PCI address.
    #[error("'{text}' is not a PCI address: write it as DDDD:BB:DD.F, e.g. 0000:00:10.0 (see `lspci -D`)")]
    BadPciAddress {
        /// What the user gave.
        text: String,
    },
    /// No IOVA space is left for a mapping of this size.
    #[error("no IOVA space left for {len} bytes inside the IOMMU's usable ranges: allocate fewer or smaller DMA regions")]
    IovaExhausted {
        /// The size that did not fit.
        len: u64,
    },
    /// An mmap of DMA memory failed.
    #[error("could not allocate {len} bytes of DMA memory: {source}")]
    Allocation {
        /// The size asked for.
        len: usize,
        /// What the kernel said.
        #[source]
        source: std::io::Error,
    },
    /// A DMA buffer of this size can't be made.
    #[error(
        "a DMA buffer of {len} bytes can't be allocated: ask for between 1 byte and {max} bytes"
    )]
    BadBufferSize {
        /// The size asked for.
        len: usize,
        /// The largest size this pool serves.
        max: usize,
    },
    /// The process may not lock enough memory for DMA.
    #[error("RLIMIT_MEMLOCK is {limit} bytes, but DMA needs {needed} more locked bytes: raise it with `ulimit -l unlimited` (or LimitMEMLOCK=infinity in a systemd unit, or memlock in /etc/security/limits.conf)")]
    MemlockTooLow {
        /// The current soft limit.
        limit: u64,
        /// The bytes the mapping needed.
        needed: u64,
    },
    /// The IOMMU refused a mapping.
    #[error("the IOMMU refused to map {len} bytes at IOVA {iova:#x}: {source}{hint}")]
    MapFailed {
        /// The IOVA asked for.
        iova: u64,
        /// The length asked for.
        len: u64,
        /// What the kernel said.
        #[source]
        source: std::io::Error,
        /// Advice for the common causes.
        hint: &'static str,
    },
    /// The IOMMU refused an unmap.
    #[error("the IOMMU refused to unmap {len} bytes at IOVA {iova:#x}: {source}")]
    UnmapFailed {
        /// The IOVA.
        iova: u64,
        /// The length.
        len: u64,
        /// What the kernel said.
        #[source]
        source: std::io::Error,
    },
    /// `/dev/vfio` is missing: no VFIO in this kernel, or the module isn't loaded.
    #[error("{path} does not exist: load VFIO with `modprobe vfio-pci` (and boot with intel_iommu=on or amd_iommu=on)")]
    NoVfio {
        /// The path that was missing.
        path: String,
    },
    /// The device is bound to another driver, or to none.
    #[error("PCI device {address} is bound to {driver}, not vfio-pci: run `vfnvme setup {address}` (or write vfio-pci to its driver_override and reprobe)")]
    NotBoundToVfio {
        /// The device.
        address: String,
        /// Its current driver, or "no driver".
        driver: String,
    },
    /// The device is bound to uio_pci_generic (the no-IOMMU mode) and was opened without it.
    #[error("PCI device {address} is bound to uio_pci_generic, the no-IOMMU mode, and was opened through VFIO: open it in the no-IOMMU mode (--no-iommu, no_iommu in the C ABI and the fio engine), or bind it to vfio-pci with `vfnvme setup {address}` on a machine with an IOMMU\n{}", NO_IOMMU_OPT_IN)]
    BoundForNoIommu {
        /// The device.
        address: String,
    },
    /// The device is not an NVMe controller (PCI class 01:08:02).
    #[error("PCI device {address} is not an NVMe controller: it is {what} (class {class:#08x}, id {vendor:04x}:{device:04x}, driver {driver}); vfnvme drives only NVMe controllers (class 0x010802): check the address with `lspci -D -nn` or `vfnvme list`")]
    NotNvme {
        /// The device.
        address: String,
        /// Its PCI class code (base, sub, programming interface).
        class: u32,
        /// What the class code means, e.g. "an Ethernet controller".
        what: String,
        /// PCI vendor ID.
        vendor: u16,
        /// PCI device ID.
        device: u16,
        /// Its current driver, or "none".
        driver: String,
    },
    /// A device with this address does not exist.
    #[error("there is no PCI device {address}: check the address with `lspci -D`")]
    NoSuchDevice {
        /// The device.
        address: String,
    },
    /// The IOMMU group holds a device that is bound to a host driver.
    #[error("IOMMU group {group} is not viable: device {blocker} in the same group is bound to {driver}; bind every device of the group to vfio-pci or unbind it")]
    GroupNotViable {
        /// The group number.
        group: u32,
        /// The device that blocks it.
        blocker: String,
        /// Its driver.
        driver: String,
    },
    /// The kernel's VFIO does not speak the API this crate needs.
    #[error("VFIO {what}: this kernel's VFIO is too old or misconfigured; vfnvme needs the type1v2 IOMMU")]
    Unsupported {
        /// What was missing.
        what: String,
    },
    /// A VFIO ioctl failed.
    #[error("VFIO {op} failed: {source}")]
    Ioctl {
        /// The operation.
        op: &'static str,
        /// What the kernel said.
        #[source]
        source: std::io::Error,
    },
    /// A file under /dev or /sys could not be used.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// What the kernel said.
        #[source]
        source: std::io::Error,
    },
    /// A register offset outside the mapped BAR.
    #[error("register offset {offset:#x} is outside BAR{bar} ({size:#x} bytes)")]
    BarOffset {
        /// The BAR index.
        bar: u32,
        /// The offset.
        offset: usize,
        /// The mapped size.
        size: usize,
    },
    /// The device has no IOMMU group: the IOMMU is off.
    #[error("PCI device {address} has no IOMMU group: turn the IOMMU on (boot with intel_iommu=on or amd_iommu=on; in QEMU add -device intel-iommu before the device)\n{}", NO_IOMMU_OPT_IN)]
    NoIommuGroup {
        /// The device.
        address: String,
    },
    /// A device or sysfs file may not be opened by this user.
    #[error("{path}: permission denied: run as root (or give this user the /dev/vfio group file and a large RLIMIT_MEMLOCK)")]
    Permission {
        /// The path.
        path: String,
    },
    /// Binding a device to a driver did not take effect.
    #[error("could not bind PCI device {address} to {driver}: {detail}; check `dmesg` and that the driver's module is available")]
    Bind {
        /// The device.
        address: String,
        /// The driver asked for.
        driver: String,
        /// What went wrong.
        detail: String,
    },
    /// A config-space access outside the config region.
    #[error(
        "config space offset {offset:#x} is outside the device's config region ({size:#x} bytes)"
    )]
    ConfigOffset {
        /// The offset.
        offset: u64,
        /// The config region size.
        size: u64,
    },
    /// The kernel reserved fewer hugepages than asked for.
    #[error("asked for {wanted} hugepages of {size_kb} KiB but the kernel reserved {got}{restored}: free memory (or drop caches: echo 3 > /proc/sys/vm/drop_caches), or reserve them at boot with hugepages=N on the kernel command line")]
    Hugepages {
        /// The hugepage size in KiB.
        size_kb: u64,
        /// The count asked for.
        wanted: u64,
        /// The count the kernel reserved.
        got: u64,
        /// What became of the pool after the failure, e.g. "; the count is back to 256" (or
        /// empty).
        restored: String,
    },
    /// A hugepage count that would leave the system too little memory.
    #[error("{wanted} hugepages of {size_kb} KiB would leave less than {floor_mib} MiB of memory available (the floor: the larger of 512 MiB and 1/8 of the {total_mib} MiB of RAM; {available_mib} MiB are available now, with {now} pages reserved): use --hugepages {max} or less, or free memory first")]
    HugepagesLeaveTooLittle {
        /// The hugepage size in KiB.
        size_kb: u64,
        /// The count asked for.
        wanted: u64,
        /// The count reserved now.
        now: u64,
        /// The largest count that keeps the floor.
        max: u64,
        /// `MemAvailable` in MiB.
        available_mib: u64,
        /// The floor in MiB.
        floor_mib: u64,
        /// `MemTotal` in MiB.
        total_mib: u64,
    },
    /// The same device was given twice to open in one container.
    #[error("PCI device {address} was given twice: list each controller once (two paths of a multipath subsystem are two controllers, with two addresses)")]
    DuplicateDevice {
        /// The device.
        address: String,
    },
    /// Nothing to open.
    #[error("no PCI device was given: name at least one controller (e.g. 0000:00:10.0)")]
    NoDevices,
    /// An IOMMU group was to join a container that already hands out DMA addresses.
    #[error("IOMMU group {group} can't join this VFIO container: it already reserved or mapped DMA memory, and a new group could shrink the usable IOVA ranges under it; open every controller that shares DMA memory together (VfioPlatform::open_shared)")]
    ContainerInUse {
        /// The group that was to join.
        group: u32,
    },
    /// The IOMMU groups of one container have no IOVA range in common.
    #[error("the IOMMU groups {groups:?} have no usable IOVA range in common: their devices can't share DMA memory; open them separately")]
    NoCommonIovaRange {
        /// The groups attached.
        groups: Vec<u32>,
    },
    /// vfio-pci offers no device request interrupt for this device (kernels before 4.1).
    #[error("the kernel's vfio-pci offers no device request interrupt for {address}: vfnvme can't hear the kernel ask for the device back, so its unbind or removal will wait until this process closes it; use Linux 4.1 or later, or stop the process before removing the device")]
    NoRequestIrq {
        /// The device.
        address: String,
    },
    /// `/proc/self/pagemap` reported frame number 0: the kernel hides physical addresses
    /// from processes without CAP_SYS_ADMIN.
    #[error("/proc/self/pagemap gives no physical frame numbers (PFN 0): the no-IOMMU mode needs physical addresses, which the kernel shows only to processes with CAP_SYS_ADMIN; run as root")]
    PagemapNoFrames,
    /// A page of DMA memory is not backed (pagemap's present bit is clear).
    #[error("the DMA page at {vaddr:#x} is not present in memory (pagemap's present bit is clear), so it has no physical address: DMA memory must be populated hugepages; reserve enough with `vfnvme setup --no-iommu --hugepages N`")]
    PageNotPresent {
        /// The process address.
        vaddr: u64,
    },
    /// A DMA region's physical address is not aligned to its length: it is not one hugepage.
    #[error("the {len}-byte DMA region at {vaddr:#x} starts at physical {pa:#x}, which is not one physically contiguous hugepage: the no-IOMMU mode needs hugetlbfs pages (reserve them with `vfnvme setup --no-iommu --hugepages N`)")]
    NotOnePage {
        /// The process address.
        vaddr: u64,
        /// The physical address pagemap gave.
        pa: u64,
        /// The region length.
        len: u64,
    },
    /// The physical-address mapper was asked for IOVA space (a bug above the seam).
    #[error("the no-IOMMU mapper has no IOVA space ({len} bytes asked): DMA memory takes its own physical address through Iommu::map_region; this is a bug in vfnvme, please report it")]
    PhysicalOnly {
        /// The length asked for.
        len: u64,
    },
    /// The no-IOMMU mode could not get hugepages (it has no 4 KiB fallback).
    #[error("the no-IOMMU mode needs a {len}-byte hugepage and could not get one ({source}): 4 KiB pages move and are not physically contiguous, so there is no fallback; reserve hugepages with `vfnvme setup --no-iommu --hugepages N` (or echo N > /proc/sys/vm/nr_hugepages)")]
    NoIommuHugepages {
        /// The hugepage size asked for.
        len: usize,
        /// What the kernel said.
        #[source]
        source: std::io::Error,
    },
    /// A buffer larger than one hugepage can't be physically contiguous in no-IOMMU mode.
    #[error("a DMA buffer of {len} bytes is larger than one {page} byte hugepage, the largest physically contiguous memory the no-IOMMU mode has: use smaller buffers (or 1 GiB hugepages)")]
    NoIommuBufferTooLarge {
        /// The size asked for.
        len: usize,
        /// The hugepage size.
        page: usize,
    },
    /// The device's sysfs directory vanished (removed or unplugged).
    #[error("PCI device {address} is gone (its sysfs directory {path} vanished): it was removed or unplugged")]
    DeviceGone {
        /// The device.
        address: String,
        /// The sysfs directory.
        path: String,
    },
    /// The device is on vfio-pci with an IOMMU group, not a no-IOMMU one.
    #[error("PCI device {address} is on vfio-pci in IOMMU group {group} (/dev/vfio/{group}), not in VFIO's no-IOMMU mode (/dev/vfio/noiommu-{group}): this machine has an IOMMU for it, so open it without --no-iommu")]
    NotNoIommuGroup {
        /// The device.
        address: String,
        /// Its IOMMU group.
        group: u32,
    },
    /// The device is not bound to a driver that the no-IOMMU mode can use.
    #[error("PCI device {address} is bound to {driver}, not to uio_pci_generic or vfio-pci in no-IOMMU mode: run `vfnvme setup --no-iommu {address}`")]
    NotBoundForNoIommu {
        /// The device.
        address: String,
        /// Its driver ("no driver" if none).
        driver: String,
    },
}
