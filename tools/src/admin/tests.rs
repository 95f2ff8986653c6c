//! The admin subcommands end to end on one model controller per test (state carries from one
//! command to the next, as on a device).

use super::{exec, model_config, AdminCmd, Io, ModelCtrl};
use clap::Parser;
use vfnvme::{Controller, ControllerOptions};
use vfnvme_model::ModelPlatform;

#[derive(Parser)]
struct Line {
    #[command(subcommand)]
    cmd: AdminCmd,
}

fn model() -> ModelCtrl {
    let platform = ModelPlatform::new(model_config()).unwrap();
    Controller::new(platform, ControllerOptions::default()).unwrap()
}

/// Runs `vfnvme <line> --model` on `ctrl` with `answer` on a terminal (None: no terminal).
fn run_with(ctrl: &ModelCtrl, line: &str, answer: Option<&str>) -> Result<String, String> {
    let args = ["vfnvme"]
        .into_iter()
        .chain(line.split_whitespace())
        .chain(["--model"]);
    let cmd = Line::try_parse_from(args).map_err(|e| e.to_string())?.cmd;
    let mut out = Vec::new();
    let mut input = answer.unwrap_or_default().as_bytes();
    let mut io = Io {
        out: &mut out,
        answers: answer.map(|_| &mut input as &mut dyn std::io::BufRead),
        name: "model".into(),
        countdown: std::time::Duration::ZERO,
    };
    let r = exec(ctrl, &cmd, &mut io);
    let text = String::from_utf8_lossy(&out).into_owned();
    r.map(|()| text).map_err(|e| format!("{e:#}"))
}

fn run(ctrl: &ModelCtrl, line: &str) -> String {
    run_with(ctrl, line, None).unwrap_or_else(|e| panic!("{line}: {e}"))
}

fn fails(ctrl: &ModelCtrl, line: &str, needle: &str) {
    match run_with(ctrl, line, None) {
        Ok(out) => panic!("{line} succeeded: {out}"),
        Err(e) => assert!(e.contains(needle), "{line}: expected {needle:?} in {e}"),
    }
}

fn json(ctrl: &ModelCtrl, line: &str) -> serde_json::Value {
    serde_json::from_str(&run(ctrl, line)).unwrap_or_else(|e| panic!("{line}: {e}"))
}

#[test]
fn identify_and_logs_match_the_controller() {
    let c = model();
    let id = json(&c, "id-ctrl --json");
    let info = &c.identify().identify;
    assert_eq!(id["vid"], info.vid);
    // Padded as the device sends it (nvme-cli keeps the blanks).
    assert_eq!(id["sn"].as_str().map(str::trim_end), Some(info.sn.trim()));
    assert_eq!(id["nn"], 8);
    assert_eq!(id["oacs"].as_u64().unwrap() & 0b1110, 0b1110);
    assert!(run(&c, "id-ctrl").starts_with("NVME Identify Controller:\nvid       : 0x1b36"));
    let ns = json(&c, "id-ns -n 2 -o json");
    assert_eq!(ns["nsze"], (64u64 << 20) / 4096);
    assert_eq!(ns["lbafs"][1]["ds"], 12);
    assert!(run(&c, "id-ns -n 2").contains("lbads:12 rp:0x0 (in use)"));
    fails(&c, "id-ns -n 9", "out of range");
    fails(&c, "id-ns -n 5", "does not exist");
    let smart = json(&c, "smart-log --json");
    assert_eq!(smart["temperature"], 313);
    assert_eq!(smart["avail_spare"], 100);
    assert!(run(&c, "smart-log").contains("temperature\t\t\t\t: 40°C (313 Kelvin)\n"));
    assert_eq!(
        json(&c, "error-log --json")["errors"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    fails(&c, "error-log -e 2", "1..=1");
    let err = run(&c, "error-log");
    assert!(err.contains("parm_err_loc\t: 0x"), "{err}");
    assert!(json(&c, "error-log --json")["errors"][0]["parm_error_location"].is_u64());
    let fw = json(&c, "fw-log --json");
    assert_eq!(fw["fw_log"]["frs1"], "1.0");
    let dev = fw.as_object().unwrap().keys().next().unwrap().clone();
    assert_eq!(fw[&dev]["Active Firmware Slot (afi)"], 1, "{fw}");
    assert_eq!(
        fw[&dev]["Firmware Rev Slot 1"], "2314885530819505713 (1.0.....)",
        "{fw}"
    );
    let t = run(&c, "fw-log");
    assert!(
        t.contains("\nafi  : 0x1\nfrs1 : 0x2020202020302e31 (1.0.....)\n"),
        "{t}"
    );
    let dump = run(&c, "get-log --log-id 0x02 --log-len 16");
    assert!(dump.contains("0000: 00 39 01 64 0a"), "{dump}");
    fails(&c, "get-log --log-id 2 --log-len 6", "multiple of 4");
    // nvme-cli's --lpo: the same bytes from an offset; --lsp is range checked.
    let at4 = run(
        &c,
        "get-log --log-id 0x02 --log-len 4 --lpo 4 --lsp 0 --lsi 0 --csi 0",
    );
    assert!(at4.contains("0000: 0a 00 00 00 "), "{at4}");
    fails(
        &c,
        "get-log --log-id 2 --log-len 16 --lpo 2",
        "offset must be a multiple of 4",
    );
    fails(&c, "get-log --log-id 2 --log-len 16 --lsp 200", "7 bits");
    fails(
        &c,
        "get-log --log-id 0x55 --log-len 512",
        "Invalid Log Page",
    );
}

#[test]
fn features_by_name_and_number() {
    let c = model();
    // nvme-cli's -V and --cdw12.
    let out = run(&c, "set-feature -f arbitration -V 0x0304 --cdw12 0x5");
    assert!(out.contains("cdw12:0x00000005"), "{out}");
    let out = run(&c, "set-feature -f arbitration -V 0x0304");
    assert!(
        out.starts_with("set-feature:0x01 (Arbitration), value:0x00000304"),
        "{out}"
    );
    let got = json(&c, "get-feature -f 1 --json");
    assert_eq!(got["value"], 0x304);
    assert!(
        run(&c, "get-feature -f number-of-queues").contains("(Number of Queues), Current value:")
    );
    fails(&c, "get-feature -f 0", "out of range");
    fails(&c, "get-feature -f 256", "out of range");
    fails(&c, "get-feature -f warp-drive", "unknown feature");
    fails(&c, "set-feature -f timestamp -V 0", "pass it with --data");
    fails(
        &c,
        "set-feature -f 1 -V 1 --data /nonexistent/x",
        "takes no data",
    );
}

#[test]
fn namespace_management_round_trip() {
    let c = model();
    assert_eq!(
        run(&c, "create-ns --nsze 2048 --flbas 1"),
        "create-ns: Success, created nsid:3\n"
    );
    assert_eq!(
        run(&c, "list-ns --all"),
        "[   0]:0x1\n[   1]:0x2\n[   2]:0x3\n"
    );
    assert_eq!(run(&c, "list-ns"), "[   0]:0x1\n[   1]:0x2\n");
    run(&c, "attach-ns -n 3");
    assert_eq!(json(&c, "list-ns --json")["nsid_list"][2]["nsid"], 3);
    assert_eq!(c.namespace(3).unwrap().lba_size(), 4096);
    fails(&c, "attach-ns -n 3", "Namespace Already Attached");
    fails(&c, "attach-ns -n 3 -c 99", "sct 0x1, sc 0x1c");
    run(&c, "detach-ns -n 3");
    assert!(c.namespace(3).is_none());
    // On a terminal it asks; without one it goes ahead, as nvme-cli's delete-ns.
    assert!(run_with(&c, "delete-ns -n 3", Some("no\n"))
        .unwrap_err()
        .contains("not confirmed"));
    assert_eq!(
        run(&c, "list-ns --all"),
        "[   0]:0x1\n[   1]:0x2\n[   2]:0x3\n"
    );
    run(&c, "delete-ns -n 3");
    assert_eq!(run(&c, "list-ns --all"), "[   0]:0x1\n[   1]:0x2\n");
    fails(&c, "delete-ns -n 3 --yes", "does not exist");
    fails(&c, "create-ns --nsze 10 --flbas 5", "LBA formats 0..=1");
    fails(&c, "create-ns --nsze 0", "at least one block");
    // The model's controller lists (CNS 13h, and 12h for its attached namespaces).
    let l = json(&c, "list-ctrl --json");
    assert_eq!(
        (
            l["num_ctrl"].as_u64(),
            l["ctrl_list"][0]["ctrl_id"].as_u64()
        ),
        (Some(1), Some(1)),
        "{l}"
    );
    assert_eq!(json(&c, "list-ctrl -n 1 --json")["num_ctrl"], 1);
    assert_eq!(json(&c, "list-ctrl --cntid 2 --json")["num_ctrl"], 0);
}

#[test]
fn format_and_sanitize_ask_check_and_erase() {
    let c = model();
    // On a terminal, "no" stops it; without one, the countdown (zero here) then the format.
    assert!(run_with(&c, "format -n 1 --lbaf 1", Some("no\n"))
        .unwrap_err()
        .contains("not confirmed"));
    assert_eq!(c.namespace(1).unwrap().lba_size(), 512);
    fails(
        &c,
        "format -n 1 --lbaf 7 --yes",
        "LBA format 7 does not exist",
    );
    fails(&c, "format -n 4 --yes", "does not exist");
    fails(&c, "format -n 1 --ses 3 --yes", "3");
    assert_eq!(
        run(&c, "format -n 1 --lbaf 1 --yes"),
        "Success formatting namespace:1\n\
         namespace 1: was no metadata, now 16384 blocks of 4096 B, no metadata\n"
    );
    assert_eq!(c.namespace(1).unwrap().lba_size(), 4096);
    // Without --lbaf: the format in use (same block size, no metadata).
    let out = run(&c, "format --nsid 1 --yes");
    assert!(out.contains("now 16384 blocks of 4096 B"), "{out}");
    assert!(run_with(&c, "sanitize -a crypto-erase", Some("\n"))
        .unwrap_err()
        .contains("not confirmed"));
    fails(&c, "sanitize -a melt --yes", "--sanact");
    let out = run(&c, "sanitize -a block-erase --yes --wait");
    assert!(
        out.contains("ended: (1) Most Recent Sanitize Command Completed Successfully."),
        "{out}"
    );
    // sanitize-log: nvme-cli's shape; the block erase completed.
    let v = json(&c, "sanitize-log -o json");
    assert_eq!(
        v["model"]["sstat"]["status"], "(1) Most Recent Sanitize Command Completed Successfully.",
        "{v}"
    );
    let t = run(&c, "sanitize-log");
    assert!(
        t.contains("Sanitize Status                        (SSTAT) :  0x1\n"),
        "{t}"
    );
    let log = run(&c, "get-log --log-id 0x81 --log-len 16");
    assert!(log.contains("0000: ff ff 01 01"), "{log}");
}

#[test]
fn firmware_download_commit_and_reset() {
    let c = model();
    let dir = std::env::temp_dir().join(format!("vfnvme-admin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fw = dir.join("fw.bin");
    let mut image = b"2.0-TEST".to_vec();
    image.resize(12288, 0x5a);
    std::fs::write(&fw, &image).unwrap();
    let odd = dir.join("odd.bin");
    std::fs::write(&odd, b"abc").unwrap();
    fails(
        &c,
        &format!("fw-download --fw {}", odd.display()),
        "multiple of 4",
    );
    fails(
        &c,
        "fw-download --fw /nonexistent/fw.bin",
        "reading /nonexistent/fw.bin",
    );
    run(
        &c,
        &format!("fw-download --fw {} --xfer 8192", fw.display()),
    );
    // Without a terminal it goes ahead, as nvme-cli's fw-commit (the model refuses slot 1).
    fails(&c, "fw-commit --slot 1 --action 1", "sct 0x1, sc 0x06");
    fails(
        &c,
        "fw-commit --slot 1 --action 1 --yes",
        "sct 0x1, sc 0x06",
    );
    fails(&c, "fw-commit --slot 5 --action 1 --yes", "does not exist");
    run(&c, "fw-commit --slot 2 --action 1 --yes");
    assert_eq!(json(&c, "id-ctrl --json")["fr"], "1.0     ");
    assert!(run(&c, "reset").contains("controller reset done"));
    assert_eq!(json(&c, "id-ctrl --json")["fr"], "2.0-TEST");
    assert_eq!(json(&c, "fw-log --json")["fw_log"]["frs2"], "2.0-TEST");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn passthru_with_files_and_unsupported_opcodes() {
    let c = model();
    let dir = std::env::temp_dir().join(format!("vfnvme-pt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (input, output) = (dir.join("in"), dir.join("out"));
    std::fs::write(&input, vec![0x77u8; 1024]).unwrap();
    run(
        &c,
        &format!(
            "io-passthru -O 1 -n 1 --cdw12 1 -l 1024 -w -i {}",
            input.display()
        ),
    );
    let o = output.display();
    run(
        &c,
        &format!("io-passthru -O 2 -n 1 --cdw12 1 -l 1024 -r --output-file {o}"),
    );
    assert_eq!(std::fs::read(&output).unwrap(), vec![0x77u8; 1024]);
    fails(
        &c,
        "io-passthru -O 2 -n 1 --cdw12 3 -l 1024 -r",
        "moves 2048 bytes",
    );
    fails(&c, "io-passthru -O 0x99 -n 1", "can't tell how many bytes");
    fails(&c, "io-passthru -O 2 -n 7", "not active");
    fails(&c, "io-passthru -O 1 -n 1 -w", "--input-file");
    run(
        &c,
        &format!("admin-passthru -O 6 --cdw10 1 -l 4096 -r --output-file {o}"),
    );
    assert_eq!(&std::fs::read(&output).unwrap()[4..13], b"MODEL0001");
    fails(
        &c,
        "admin-passthru -O 0x14",
        "this controller doesn't support admin opcode 0x14",
    );
    fails(&c, "admin-passthru -O 6 -l 4096", "--read or --write");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// nvme-cli's passthru flags: `-o` is the opcode (so `-o json` is refused, never a file named
/// json), `-s` shows the command, `-d` shows it without sending, `-T` times it, `-f` only 0.
#[test]
fn passthru_takes_nvme_clis_flags() {
    let c = model();
    let out = run(&c, "admin-passthru -o 6 -4 1 -l 4096 -r -s -T");
    assert!(out.contains("opcode       : 06\n"), "{out}");
    assert!(out.contains("cdw10        : 00000001\n"), "{out}");
    assert!(out.contains("data_len     : 00001000\n"), "{out}");
    assert!(out.contains("Admin Command opcode 0x06 latency: "), "{out}");
    assert!(out.contains("NVMe command result:00000000"), "{out}");
    // A dry run shows the command and sends nothing: an opcode the model refuses passes.
    let out = run(&c, "admin-passthru -o 0x14 -d");
    assert!(out.starts_with("opcode       : 14\n"), "{out}");
    assert!(!out.contains("result"), "{out}");
    let out = run(&c, "io-passthru -o 0x99 -n 1 -2 5 -3 6 --dry-run");
    assert!(
        out.contains("cdw2         : 00000005\ncdw3         : 00000006"),
        "{out}"
    );
    fails(&c, "admin-passthru -o json", "invalid value 'json'");
    fails(&c, "admin-passthru -o 6 -f 0x40", "FUSE and PSDT");
}

/// A namespace formatted with metadata (16 B separate, PI type 1): `format` picks the format of
/// the same block size without metadata, and refuses one with metadata.
#[test]
fn format_takes_a_metadata_namespace_to_its_block_size_without_metadata() {
    use vfnvme_model::ModelMetadata;
    let mut cfg = model_config();
    cfg.namespace_metadata = vec![(
        2,
        ModelMetadata {
            ms: 16,
            extended: false,
            pi: 1,
        },
    )];
    let c = Controller::new(
        ModelPlatform::new(cfg).unwrap(),
        ControllerOptions::default(),
    )
    .unwrap();
    assert!(c.namespace(2).unwrap().io_refused());
    assert!(run_with(&c, "format --nsid 2", Some("no\n"))
        .unwrap_err()
        .contains("not confirmed"));
    assert!(
        c.namespace(2).unwrap().io_refused(),
        "nothing done when not confirmed"
    );
    fails(
        &c,
        "format --nsid 2 --lbaf 1 --pi 1 --yes",
        "at least 8 B of metadata",
    );
    let out = run(&c, "format --nsid 2 --yes");
    assert!(
        out.contains(
            "was 16 B metadata per block (separate buffer), protection information type 1, \
             now 16384 blocks of 4096 B, no metadata"
        ),
        "{out}"
    );
    let ns = c.namespace(2).unwrap();
    assert!(!ns.io_refused());
    let mut qp = c.alloc_qpair(vfnvme::QpairOptions::default()).unwrap();
    let buf = c.dma().alloc(4096).unwrap();
    qp.write_sync(&ns, 0, 1, buf)
        .expect("I/O works after the format");
    // And to a format with metadata and PI, as nvme-cli's flags say.
    let out = run(&c, "format --nsid 2 --lbaf 3 --pi 1 --pil 1 --ms 1 --yes");
    assert!(out.contains("now 16384 blocks of 4096 B, 16 B metadata per block (extended LBA), protection information type 1 (first 8 bytes)"), "{out}");
    let ns = c.namespace(2).unwrap();
    assert_eq!(ns.identity().format_label(), "4096+16, PI type 1, first");
    let pi = vfnvme::queue::PiOptions {
        act: true,
        check: vfnvme::queue::PiChecks::ALL,
        ..Default::default()
    };
    let req = vfnvme::queue::Request::with_metadata(
        vfnvme::queue::Op::Write,
        &ns,
        0,
        1,
        c.dma().alloc(4096 + 16).unwrap(),
        None,
        pi,
        0u64,
    )
    .expect("a request with metadata");
    qp.submit(req).expect("submitted");
    let mut ok = None;
    while ok.is_none() {
        qp.poll(usize::MAX, |c| ok = Some(c.is_ok()));
    }
    assert_eq!(ok, Some(true));
}

/// nvme-cli keeps all 128 bits of the SMART counters: JSON as decimal strings, text with the
/// data units in SI bytes, and its labels.
#[test]
fn smart_counters_keep_all_128_bits_with_nvme_clis_labels() {
    use super::logs::{error_text, smart_json, smart_text};
    let mut b = vec![0u8; 512];
    b[1..3].copy_from_slice(&310u16.to_le_bytes());
    b[5] = 7;
    // data units read: 2^64 + 5.
    b[32..40].copy_from_slice(&5u64.to_le_bytes());
    b[40] = 1;
    b[64..72].copy_from_slice(&1000u64.to_le_bytes());
    let v = smart_json(&b);
    assert_eq!(v["data_units_read"], "18446744073709551621");
    assert_eq!(v["host_read_commands"], "1000");
    assert_eq!(v["percent_used"], 7);
    let t = smart_text(&b, "0000:01:00.0", u32::MAX);
    assert!(
        t.starts_with("Smart Log for NVME device:0000:01:00.0 namespace-id:ffffffff\n"),
        "{t}"
    );
    assert!(
        t.contains("temperature\t\t\t\t: 37°C (310 Kelvin)\n"),
        "{t}"
    );
    assert!(t.contains("percentage_used\t\t\t\t: 7%\n"), "{t}");
    assert!(
        t.contains("Data Units Read\t\t\t\t: 18446744073709551621 (9.44 YB)\n"),
        "{t}"
    );
    assert!(t.contains("host_read_commands\t\t\t: 1000\n"), "{t}");
    let mut e = vec![0u8; 64];
    e[0] = 3;
    e[12..14].copy_from_slice(&((0x0281u16 << 1) | 1).to_le_bytes());
    e[14..16].copy_from_slice(&0x28u16.to_le_bytes());
    let t = error_text(&e);
    assert!(t.starts_with("error_count\t: 3\n"), "{t}");
    assert!(t.contains("status_field\t: 0x281("), "{t}");
    assert!(
        t.contains("phase_tag\t: 0x1\nparm_err_loc\t: 0x28\n"),
        "{t}"
    );
}
