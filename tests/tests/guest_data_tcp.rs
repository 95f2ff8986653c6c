//! Scenario `data` (shares its boot): `vfnvme serve` on the vfio-bound controller, used by the
//! guest kernel's own NVMe/TCP initiator. `nvme discover` lists the subsystem for the allowed
//! host only. A host NQN not on the allow list is refused by
//! `nvme connect`; the allowed one connects, the kernel's block device takes writes with dd
//! (4 KiB in-capsule, 1 MiB by R2T) that read back equal and fio (io_uring, QD 16,
//! verify=crc32c) passes, then the original data is put back,
//! the host disconnects and Ctrl-C stops the target cleanly. And `vfnvme serve --model`: ext4
//! made, mounted, files written, unmounted, caches dropped, mounted again, files equal.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use vfnvme_tests::{guest, vfnvme_cli};

const NQN: &str = "nqn.2026-12.io.vfnvme:guest-tcp";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000a1";
const OTHER: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000b2";
const PORT: &str = "4420";
/// Where the test writes: 32 MiB into the 64 MiB namespace.
const OFFSET_MIB: u64 = 32;
/// MiB the fio verify run covers from there (saved first and put back after).
const FIO_MIB: u64 = 8;

fn sh(cmd: &str, args: &[&str]) -> (bool, String) {
    let t0 = Instant::now();
    let o = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {cmd}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    println!(
        "$ {cmd} {}\n{text}[{}, {:.1} s]",
        args.join(" "),
        o.status,
        t0.elapsed().as_secs_f64()
    );
    (o.status.success(), text)
}

fn must(cmd: &str, args: &[&str]) -> String {
    let (ok, text) = sh(cmd, args);
    assert!(ok, "{cmd} {args:?} failed: {text}");
    text
}

/// The target process; SIGINT and a wait when dropped, so a failing test leaves nothing behind.
struct Serve {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Serve {
    /// `vfnvme serve WHAT...` for `nqn` on 127.0.0.1:`port`, allowing [`HOST`].
    fn start(what: &[&str], nqn: &str, port: &str) -> Serve {
        let mut child = Command::new(vfnvme_cli::binary())
            .args(["-v", "serve"])
            .args(what)
            .args(["--nqn", nqn, "--allow-host", HOST, "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .stdout(Stdio::piped())
            .spawn()
            .expect("start vfnvme serve");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                println!("serve: {l}");
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let s = Serve { child, lines };
        s.expect_line("Ctrl-C stops", Duration::from_secs(60));
        s
    }

    fn expect_line(&self, needle: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.contains(needle) => return l,
                Ok(_) => {}
                Err(e) => panic!("vfnvme serve printed no {needle:?} within {within:?}: {e}"),
            }
        }
    }

    /// Ctrl-C for the target: SIGINT through kill(1) (no `unsafe` in a test).
    fn interrupt(&self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
    }

    fn stop(mut self) {
        self.interrupt();
        let line = self.expect_line("stopped", Duration::from_secs(60));
        println!("{line}");
        let status = self.child.wait().expect("wait for vfnvme serve");
        assert!(status.success(), "vfnvme serve ended with {status}");
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.interrupt();
            let _ = self.child.wait();
        }
    }
}

/// The block device of namespace 1 of subsystem `nqn` (the multipath head, or the
/// controller's own disk without native multipath), once the kernel made it.
fn block_device(nqn: &str, within: Duration) -> PathBuf {
    let deadline = Instant::now() + within;
    loop {
        for sub in std::fs::read_dir("/sys/class/nvme-subsystem")
            .into_iter()
            .flatten()
            .flatten()
        {
            let p = sub.path();
            let Ok(n) = std::fs::read_to_string(p.join("subsysnqn")) else {
                continue;
            };
            if n.trim() != nqn {
                continue;
            }
            let mut dirs = vec![p.clone()];
            for e in std::fs::read_dir(&p).into_iter().flatten().flatten() {
                dirs.push(e.path());
            }
            for d in dirs {
                for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let is_disk =
                        name.starts_with("nvme") && name.ends_with("n1") && !name.contains('c');
                    if is_disk && Path::new("/dev").join(&name).exists() {
                        return Path::new("/dev").join(name);
                    }
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "no block device for {nqn} within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The kernel's log lines so far.
fn dmesg() -> Vec<String> {
    let o = Command::new("dmesg").output().expect("run dmesg");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Fails if the kernel logged an NVMe I/O error after the first `from` lines (a command the
/// target refused: the host would see it as a failed discard, zeroout or read).
fn assert_no_kernel_io_errors(from: usize) {
    let errors: Vec<String> = dmesg()
        .into_iter()
        .skip(from)
        .filter(|l| l.contains("I/O Error") || l.contains("I/O error"))
        .collect();
    assert!(
        errors.is_empty(),
        "the kernel logged I/O errors:\n{}",
        errors.join("\n")
    );
}

fn dd_read(dev: &Path, file: &Path, bs: &str, count: u64, skip: u64) {
    must(
        "dd",
        &[
            &format!("if={}", dev.display()),
            &format!("of={}", file.display()),
            &format!("bs={bs}"),
            &format!("count={count}"),
            &format!("skip={skip}"),
            "iflag=direct",
            "status=none",
        ],
    );
}

fn dd_write(file: &Path, dev: &Path, bs: &str, count: u64, seek: u64) {
    must(
        "dd",
        &[
            &format!("if={}", file.display()),
            &format!("of={}", dev.display()),
            &format!("bs={bs}"),
            &format!("count={count}"),
            &format!("seek={seek}"),
            "oflag=direct",
            "conv=notrunc",
            "status=none",
        ],
    );
}

#[test]
fn the_kernel_initiator_reads_and_writes_through_vfnvme_serve() {
    if !guest::in_guest("the_kernel_initiator_reads_and_writes_through_vfnvme_serve") {
        return;
    }
    let bdf = guest::vfio_devices()
        .into_iter()
        .next()
        .expect("a vfio controller");
    let log_from = dmesg().len();
    // The guest has no network but loopback, which starts down.
    let _ = sh("ip", &["link", "set", "lo", "up"]);
    must("modprobe", &["nvme-tcp"]);
    let serve = Serve::start(&[&bdf], NQN, PORT);
    let connect = |host: &str| {
        sh(
            "nvme",
            &[
                "connect",
                "-t",
                "tcp",
                "-a",
                "127.0.0.1",
                "-s",
                PORT,
                "-n",
                NQN,
                "--hostnqn",
                host,
            ],
        )
    };
    // nvme-cli reads the discovery log: the subsystem at this port, for the allowed host only.
    let log = must(
        "nvme",
        &[
            "discover",
            "-t",
            "tcp",
            "-a",
            "127.0.0.1",
            "-s",
            PORT,
            "--hostnqn",
            HOST,
        ],
    );
    assert!(
        log.contains(NQN) && log.contains("trsvcid: 4420"),
        "discovery log: {log}"
    );
    let log = must(
        "nvme",
        &[
            "discover",
            "-t",
            "tcp",
            "-a",
            "127.0.0.1",
            "-s",
            PORT,
            "--hostnqn",
            OTHER,
        ],
    );
    assert!(
        !log.contains(NQN),
        "a host not on the list discovered the subsystem: {log}"
    );
    let (ok, text) = connect(OTHER);
    assert!(!ok, "a host NQN not on the list connected: {text}");
    must(
        "nvme",
        &[
            "connect",
            "-t",
            "tcp",
            "-a",
            "127.0.0.1",
            "-s",
            PORT,
            "-n",
            NQN,
            "--hostnqn",
            HOST,
        ],
    );
    let dev = block_device(NQN, Duration::from_secs(60));
    println!("the kernel's block device: {}", dev.display());
    let dir = std::env::temp_dir().join(format!("vfnvme-tcp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (orig, pattern, back) = (dir.join("orig"), dir.join("pattern"), dir.join("back"));
    dd_read(&dev, &orig, "1M", FIO_MIB, OFFSET_MIB);
    let data: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    std::fs::write(&pattern, &data).expect("pattern");
    // 1 MiB in one dd request (R2T and H2CData), then the first 4 KiB again (in-capsule).
    dd_write(&pattern, &dev, "1M", 1, OFFSET_MIB);
    dd_read(&dev, &back, "1M", 1, OFFSET_MIB);
    assert!(
        std::fs::read(&back).expect("back") == data,
        "1 MiB read back differs"
    );
    let small = dir.join("small");
    std::fs::write(&small, vec![0x5Au8; 4096]).expect("small");
    dd_write(&small, &dev, "4k", 1, OFFSET_MIB * 256);
    dd_read(&dev, &back, "4k", 1, OFFSET_MIB * 256);
    assert!(
        std::fs::read(&back).expect("back") == vec![0x5Au8; 4096],
        "4 KiB read back differs"
    );
    // fio with io_uring at queue depth 16, 4 KiB to 128 KiB random writes verified with
    // crc32c, over 8 MiB (both I/O queues: one per guest CPU).
    must(
        "fio",
        &[
            "--name=tcp-verify",
            &format!("--filename={}", dev.display()),
            "--ioengine=io_uring",
            "--direct=1",
            "--rw=randwrite",
            "--bsrange=4k-128k",
            "--iodepth=16",
            &format!("--offset={OFFSET_MIB}M"),
            &format!("--size={FIO_MIB}M"),
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            "--verify_state_save=0",
            "--numjobs=1",
        ],
    );
    // Leave the namespace as the scenario's other tests expect it.
    dd_write(&orig, &dev, "1M", FIO_MIB, OFFSET_MIB);
    dd_read(&dev, &back, "1M", FIO_MIB, OFFSET_MIB);
    assert!(
        std::fs::read(&back).expect("back") == std::fs::read(&orig).expect("orig"),
        "restore"
    );
    must("nvme", &["disconnect", "-n", NQN]);
    serve.stop();
    assert_no_kernel_io_errors(log_from);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The model's NQN and port for the file system test (no device state to put back).
const MODEL_NQN: &str = "nqn.2026-12.io.vfnvme:guest-tcp-model";
const MODEL_PORT: &str = "4421";

#[test]
fn ext4_on_vfnvme_serve_model_keeps_files_across_a_remount() {
    if !guest::in_guest("ext4_on_vfnvme_serve_model_keeps_files_across_a_remount") {
        return;
    }
    let log_from = dmesg().len();
    let _ = sh("ip", &["link", "set", "lo", "up"]);
    must("modprobe", &["nvme-tcp"]);
    must("modprobe", &["ext4"]);
    let serve = Serve::start(&["--model", "--model-mib", "64"], MODEL_NQN, MODEL_PORT);
    must(
        "nvme",
        &[
            "connect",
            "-t",
            "tcp",
            "-a",
            "127.0.0.1",
            "-s",
            MODEL_PORT,
            "-n",
            MODEL_NQN,
            "--hostnqn",
            HOST,
        ],
    );
    let dev = block_device(MODEL_NQN, Duration::from_secs(60));
    let dir = std::env::temp_dir().join(format!("vfnvme-tcp-fs-{}", std::process::id()));
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).expect("mount point");
    must("mkfs.ext4", &["-q", "-F", &dev.display().to_string()]);
    let dev_s = dev.display().to_string();
    let mnt_s = mnt.display().to_string();
    must("mount", &[&dev_s, &mnt_s]);
    // A few files of different sizes, one larger than MDTS.
    let files: Vec<(String, Vec<u8>)> = [(1usize, 1u8), (4096, 2), (100_000, 3), (3 << 20, 4)]
        .iter()
        .map(|&(len, seed)| {
            let data: Vec<u8> = (0..len)
                .map(|i| ((i as u32).wrapping_mul(2654435761) >> 24) as u8 ^ seed)
                .collect();
            (format!("f{seed}"), data)
        })
        .collect();
    for (name, data) in &files {
        std::fs::write(mnt.join(name), data).expect("write a file");
    }
    must("umount", &[&mnt_s]);
    // Nothing cached: the files come back through the target.
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
    must("mount", &[&dev_s, &mnt_s]);
    for (name, data) in &files {
        let back = std::fs::read(mnt.join(name)).expect("read a file back");
        assert!(&back == data, "{name} differs after the remount");
    }
    must("umount", &[&mnt_s]);
    must("nvme", &["disconnect", "-n", MODEL_NQN]);
    serve.stop();
    // mkfs.ext4 discards the whole device first (Dataset Management): no error allowed.
    assert_no_kernel_io_errors(log_from);
    let _ = std::fs::remove_dir_all(&dir);
}
