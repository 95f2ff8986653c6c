//! Helpers for guest tests (`tests/tests/guest_<scenario>_*.rs`): whether we run in the
//! `vfnvme vm` guest, and the facts the scenario promises (`VFNVME_*` variables).
//!
//! On the host every guest test must call [`in_guest`] first and return when it is false: it
//! prints a visible `SKIPPED (host)` line instead of passing silently.

use std::io::Write;

/// A namespace the scenario declared: what Identify Namespace must report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpectedNamespace {
    /// Namespace ID.
    pub nsid: u32,
    /// Size in logical blocks.
    pub blocks: u64,
    /// Logical block size in bytes.
    pub lba_size: u32,
}

/// True inside the `vfnvme vm` guest. On the host, prints
/// `SKIPPED (host): <test>: run in the guest via scripts/test-all.sh` past libtest's output
/// capture, and returns false.
pub fn in_guest(test: &str) -> bool {
    if std::env::var("VFNVME_GUEST").as_deref() == Ok("1") {
        return true;
    }
    // Written to the stream directly (not eprintln!), so libtest's capture does not hide it.
    let line = format!("SKIPPED (host): {test}: run in the guest via scripts/test-all.sh\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
    false
}

/// A variable `vfnvme vm` must have set; panics (failing the test) with a clear message if not.
pub fn expect_var(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| {
        panic!(
            "{key} is not set: run this test in the guest with `vfnvme vm` (scripts/test-all.sh)"
        )
    })
}

/// The PCI addresses in a comma-separated variable (`VFNVME_VFIO_DEVICES`, ...).
pub fn device_list(key: &str) -> Vec<String> {
    expect_var(key)
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Controllers bound to vfio-pci in this guest.
pub fn vfio_devices() -> Vec<String> {
    device_list("VFNVME_VFIO_DEVICES")
}

/// Controllers left on the kernel nvme driver in this guest.
pub fn kernel_devices() -> Vec<String> {
    device_list("VFNVME_KERNEL_DEVICES")
}

/// Parses a namespace list `nsid:blocks:lba_size,...`.
pub fn parse_namespaces(text: &str) -> Result<Vec<ExpectedNamespace>, String> {
    text.split(',')
        .filter(|s| !s.is_empty())
        .map(|item| {
            let mut parts = item.split(':');
            let mut next = |what: &str| {
                parts
                    .next()
                    .ok_or_else(|| format!("namespace item {item:?} lacks its {what}"))
            };
            let nsid = next("nsid")?;
            let blocks = next("block count")?;
            let lba = next("LBA size")?;
            Ok(ExpectedNamespace {
                nsid: nsid.parse().map_err(|e| format!("nsid in {item:?}: {e}"))?,
                blocks: blocks
                    .parse()
                    .map_err(|e| format!("blocks in {item:?}: {e}"))?,
                lba_size: lba
                    .parse()
                    .map_err(|e| format!("LBA size in {item:?}: {e}"))?,
            })
        })
        .collect()
}

/// The namespaces of the first vfio-pci controller (`VFNVME_EXPECT_NS`), or of the controller
/// in `slot` (`VFNVME_EXPECT_NS_<SLOT>`, slot in hex) when given.
pub fn expected_namespaces(slot: Option<u8>) -> Vec<ExpectedNamespace> {
    let key = match slot {
        Some(s) => format!("VFNVME_EXPECT_NS_{s:02X}"),
        None => "VFNVME_EXPECT_NS".to_string(),
    };
    parse_namespaces(&expect_var(&key)).unwrap_or_else(|e| panic!("{key}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_namespace_lists() {
        let ns = parse_namespaces("1:131072:512,2:8192:4096").unwrap();
        assert_eq!(
            ns,
            [
                ExpectedNamespace {
                    nsid: 1,
                    blocks: 131072,
                    lba_size: 512
                },
                ExpectedNamespace {
                    nsid: 2,
                    blocks: 8192,
                    lba_size: 4096
                },
            ]
        );
        assert!(parse_namespaces("").unwrap().is_empty());
        assert!(parse_namespaces("1:2").unwrap_err().contains("LBA size"));
        assert!(parse_namespaces("x:2:3").unwrap_err().contains("nsid"));
    }
}
