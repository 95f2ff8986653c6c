//! The man pages' sections clap does not write: EXAMPLES, EXIT STATUS and ENVIRONMENT, in roff,
//! appended to each page (`vfnvme man`).

/// Examples per command (the main page gets the tour); commands without any get none.
fn examples(command: Option<&str>) -> &'static [(&'static str, &'static str)] {
    match command {
        None => &[
            ("sudo vfnvme setup", "bind every NVMe controller the system does not use to vfio-pci and reserve hugepages"),
            ("vfnvme list", "the controllers by subsystem, their drivers and namespaces"),
            ("sudo vfnvme perf -r 'trtype:PCIe traddr:0000:01:00.0' -q 32 -o 4096 -w randread -t 10", "4 KiB random reads at queue depth 32 for 10 s, reported as spdk_nvme_perf does"),
            ("sudo vfnvme id-ctrl 0000:01:00.0 -o json", "Identify Controller as nvme-cli prints it"),
            ("sudo vfnvme setup --reset 0000:01:00.0", "give the controller back to the kernel's nvme driver"),
        ],
        Some("setup") => &[
            ("sudo vfnvme setup --hugepages 1024", "bind every free controller and make sure 2 GiB of hugepages are reserved"),
            ("sudo vfnvme setup --dry-run 0000:01:00.0", "show what binding one controller would do"),
            ("sudo vfnvme setup --no-iommu", "bind to uio_pci_generic on a machine without an IOMMU (no DMA protection)"),
        ],
        Some("list") => &[
            ("vfnvme list -o json | jq '.Devices[].DevicePath'", "nvme-cli's JSON: one entry per namespace"),
            ("vfnvme list --subsystems", "multipath heads and the ANA state of each path"),
        ],
        Some("perf") => &[
            ("sudo vfnvme perf -r 'trtype:PCIe traddr:0000:01:00.0' -q 128 -o 4096 -w randread -t 30 -LL", "spdk_nvme_perf's flags and report, with latency histograms"),
            ("vfnvme perf --model --qd 32 --time 5", "the in-memory controller, no device needed"),
        ],
        Some("format") => &[
            ("sudo vfnvme format 0000:01:00.0 -n 1 --lbaf 1 --force", "reformat namespace 1 to LBA format 1 without the 10 s countdown"),
        ],
        Some("id-ctrl") => &[
            ("sudo vfnvme id-ctrl 0000:01:00.0 -o json", "Identify Controller as nvme-cli 2.x's JSON"),
        ],
        Some("admin-passthru") => &[
            ("sudo vfnvme admin-passthru 0000:01:00.0 -o 6 --cdw10 1 -l 4096 -r", "Identify Controller by hand, as a hex dump"),
        ],
        _ => &[],
    }
}

/// Escapes a roff text line (a leading dot or quote, backslashes, dashes).
fn roff(text: &str) -> String {
    let t = text.replace('\\', "\\\\").replace('-', "\\-");
    if t.starts_with('.') || t.starts_with('\'') {
        format!("\\&{t}")
    } else {
        t
    }
}

/// The EXAMPLES, EXIT STATUS and ENVIRONMENT sections for `command` (None: the main page).
pub fn sections(command: Option<&str>) -> String {
    let mut s = String::new();
    let ex = examples(command);
    if !ex.is_empty() {
        s.push_str(".SH EXAMPLES\n");
        for (line, what) in ex {
            s.push_str(&format!(".TP\n.B {}\n{}\n", roff(line), roff(what)));
        }
    }
    s.push_str(".SH \"EXIT STATUS\"\n");
    s.push_str(".TP\n0\nSuccess.\n.TP\n1\nAn error; the message on standard error says what failed and what to do.\n.TP\n2\nThe command line could not be parsed.\n");
    if command == Some("vm") {
        s.push_str(".PP\nvfnvme vm exits with the guest command's status, or its own for a harness error.\n");
    }
    s.push_str(".SH ENVIRONMENT\n");
    s.push_str(&format!(
        ".TP\n.B RUST_LOG\n{}\n.TP\n.B NO_COLOR\n{}\n",
        roff("Which log lines reach standard error (e.g. vfnvme=debug); when unset, -v, -vv and -vvv raise the default, warn."),
        roff("Turns off colour in the help.")
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_are_roff_and_cover_examples_exit_status_and_environment() {
        let main = sections(None);
        for want in [
            ".SH EXAMPLES",
            ".SH \"EXIT STATUS\"",
            ".SH ENVIRONMENT",
            "RUST_LOG",
        ] {
            assert!(main.contains(want), "{want}: {main}");
        }
        assert!(main.contains("vfnvme setup \\-\\-reset"), "{main}");
        assert!(!sections(Some("reset")).contains("EXAMPLES"));
        assert_eq!(roff(".x"), "\\&.x");
    }
}
