//! The host side of a guest's QMP requests: a guest test asks for a QMP command (e.g.
//! `device_del` of a controller) at a moment it chooses, and the harness sends it to QEMU.
//!
//! QEMU listens on a QMP unix socket ([`socket_path`]). The channel is a folder in the run's
//! output share (`$VFNVME_QMP_DIR` in the guest, `<out>/qmp/` on the host):
//!
//! - the guest writes one QMP command as JSON into `NAME.tmp` and renames it to `NAME.req`
//!   (a rename is atomic over 9p, so the host never reads half a request);
//! - the relay (a thread of `vfnvme vm`) polls the folder every [`POLL`], sends each `.req`
//!   in name order to QEMU, writes QEMU's reply line (`{"return": ...}` or `{"error": ...}`)
//!   to `NAME.resp` (again through a rename) and deletes the `.req`;
//! - every QMP event QEMU sends (e.g. `DEVICE_DELETED`) is appended as one JSON line to
//!   `events.jsonl`.
//!
//! A request the relay cannot carry out (no QMP connection, not a JSON object with `execute`,
//! no reply within [`REPLY_TIMEOUT`]) gets an `{"error": {"class": "HarnessError", ...}}` reply.

use std::fs;
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How often the relay looks for requests and events.
pub const POLL: Duration = Duration::from_millis(50);

/// How long QEMU may take to answer one command.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// The file QMP events are appended to, in the request folder.
pub const EVENTS_FILE: &str = "events.jsonl";

/// A QMP socket path for the run with `nonce`: short (a unix socket path holds at most 107
/// bytes) and outside the 9p share.
pub fn socket_path(nonce: &str) -> PathBuf {
    std::env::temp_dir().join(format!("vfnvme-vm-{nonce}.qmp"))
}

/// The relay thread; stopped (and the socket file removed) by [`Relay::stop`].
pub struct Relay {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    socket: PathBuf,
}

impl Relay {
    /// Starts relaying requests from `dir` to the QMP socket `socket` (which QEMU creates once
    /// started; the relay connects when it appears). `log` says what happens on stderr.
    pub fn start(socket: PathBuf, dir: PathBuf, log: bool) -> std::io::Result<Self> {
        fs::create_dir_all(&dir)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let sock = socket.clone();
        let thread = thread::Builder::new()
            .name("qmp-relay".into())
            .spawn(move || relay_loop(&sock, &dir, &flag, log))?;
        Ok(Self {
            stop,
            thread: Some(thread),
            socket,
        })
    }

    /// Stops the relay and removes the socket file.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = fs::remove_file(&self.socket);
    }
}

/// One QMP connection: a line reader that survives read timeouts.
struct Qmp {
    stream: UnixStream,
    reader: BufReader<UnixStream>,
    pending: Vec<u8>,
}

impl Qmp {
    /// Connects, reads the greeting and leaves capabilities negotiation done.
    fn connect(path: &Path) -> std::io::Result<Self> {
        let stream = UnixStream::connect(path)?;
        stream.set_read_timeout(Some(POLL))?;
        let reader = BufReader::new(stream.try_clone()?);
        let mut q = Self {
            stream,
            reader,
            pending: Vec::new(),
        };
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            match q.next_line()? {
                Some(line) if line.get("QMP").is_some() => break,
                Some(_) => {}
                None if Instant::now() > deadline => {
                    return Err(std::io::Error::new(
                        ErrorKind::TimedOut,
                        "QEMU sent no QMP greeting",
                    ))
                }
                None => {}
            }
        }
        let reply = q.execute(
            &serde_json::json!({"execute": "qmp_capabilities"}),
            &mut |_| {},
        )?;
        if reply.get("return").is_none() {
            return Err(std::io::Error::other(format!(
                "qmp_capabilities was refused: {reply}"
            )));
        }
        Ok(q)
    }

    /// The next complete JSON line, or `None` when none arrived within [`POLL`].
    fn next_line(&mut self) -> std::io::Result<Option<Value>> {
        loop {
            match self.reader.read_until(b'\n', &mut self.pending) {
                Ok(0) => {
                    return Err(std::io::Error::new(
                        ErrorKind::UnexpectedEof,
                        "QEMU closed the QMP socket",
                    ))
                }
                Ok(_) if self.pending.ends_with(b"\n") => {
                    let line = std::mem::take(&mut self.pending);
                    let text = String::from_utf8_lossy(&line);
                    if text.trim().is_empty() {
                        continue;
                    }
                    return serde_json::from_str(text.trim()).map(Some).map_err(|e| {
                        std::io::Error::new(
                            ErrorKind::InvalidData,
                            format!("QEMU sent a line that is not JSON ({e}): {text}"),
                        )
                    });
                }
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Ok(None)
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Sends `cmd` and returns QEMU's reply; events read meanwhile go to `on_event`.
    fn execute(&mut self, cmd: &Value, on_event: &mut dyn FnMut(&Value)) -> std::io::Result<Value> {
        let mut text = cmd.to_string();
        text.push('\n');
        self.stream.write_all(text.as_bytes())?;
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            match self.next_line()? {
                Some(v) if v.get("return").is_some() || v.get("error").is_some() => return Ok(v),
                Some(v) if v.get("event").is_some() => on_event(&v),
                Some(_) => {}
                None if Instant::now() > deadline => {
                    return Err(std::io::Error::new(
                        ErrorKind::TimedOut,
                        format!("QEMU did not answer within {REPLY_TIMEOUT:?}"),
                    ))
                }
                None => {}
            }
        }
    }
}

fn relay_loop(socket: &Path, dir: &Path, stop: &AtomicBool, log: bool) {
    let mut qmp: Option<Qmp> = None;
    let mut last_error = String::new();
    let events_path = dir.join(EVENTS_FILE);
    let mut record_event = |v: &Value| {
        if log {
            eprintln!("vfnvme vm: QMP event {v}");
        }
        if let Ok(mut f) = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&events_path)
        {
            let _ = writeln!(f, "{v}");
        }
    };
    while !stop.load(Ordering::Relaxed) {
        if qmp.is_none() && socket.exists() {
            match Qmp::connect(socket) {
                Ok(q) => qmp = Some(q),
                Err(e) => last_error = format!("connecting to QEMU's QMP socket: {e}"),
            }
        }
        let mut requests = pending_requests(dir);
        if requests.is_empty() {
            match qmp.as_mut().map(Qmp::next_line) {
                Some(Ok(Some(v))) if v.get("event").is_some() => record_event(&v),
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    last_error = format!("QMP connection lost: {e}");
                    qmp = None;
                }
                None => thread::sleep(POLL),
            }
            continue;
        }
        requests.sort();
        for req in requests {
            let reply = match fs::read_to_string(&req) {
                Ok(text) => match parse_request(&text) {
                    Ok(cmd) => match qmp.as_mut() {
                        Some(q) => match q.execute(&cmd, &mut record_event) {
                            Ok(reply) => reply,
                            Err(e) => {
                                qmp = None;
                                harness_error(&format!("QMP command failed: {e}"))
                            }
                        },
                        None => harness_error(&format!(
                            "no QMP connection to QEMU ({})",
                            if last_error.is_empty() {
                                "the socket is not there yet"
                            } else {
                                &last_error
                            }
                        )),
                    },
                    Err(e) => harness_error(&e),
                },
                Err(e) => harness_error(&format!("reading {}: {e}", req.display())),
            };
            if log {
                eprintln!(
                    "vfnvme vm: QMP request {} from the guest: {}",
                    req.file_name().unwrap_or_default().to_string_lossy(),
                    reply
                );
            }
            let _ = write_reply(&req, &reply);
        }
    }
}

/// The `.req` files waiting in `dir`.
fn pending_requests(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "req"))
                .collect()
        })
        .unwrap_or_default()
}

/// A request's text as a QMP command: a JSON object with a string `execute`.
fn parse_request(text: &str) -> Result<Value, String> {
    let v: Value = serde_json::from_str(text.trim())
        .map_err(|e| format!("the request is not JSON ({e}): {text:?}"))?;
    if !v.get("execute").is_some_and(Value::is_string) {
        return Err(format!(
            "the request is not a QMP command (a JSON object with \"execute\"): {text:?}"
        ));
    }
    Ok(v)
}

fn harness_error(desc: &str) -> Value {
    serde_json::json!({"error": {"class": "HarnessError", "desc": desc}})
}

/// Writes `NAME.resp` next to `NAME.req` (through a rename) and deletes the request.
fn write_reply(req: &Path, reply: &Value) -> std::io::Result<()> {
    let tmp = req.with_extension("resp.tmp");
    fs::write(&tmp, format!("{reply}\n"))?;
    fs::rename(&tmp, req.with_extension("resp"))?;
    fs::remove_file(req)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vfnvme-qmp-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn wait_for(path: &Path) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(t) = fs::read_to_string(path) {
                return t;
            }
            thread::sleep(Duration::from_millis(20));
        }
        panic!("{} never appeared", path.display());
    }

    /// A fake QEMU: greets, accepts capabilities, answers `device_del` with an event first.
    fn fake_qemu(listener: UnixListener) -> JoinHandle<Vec<String>> {
        thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            writeln!(s, r#"{{"QMP": {{"version": {{}}, "capabilities": []}}}}"#).unwrap();
            let mut seen = Vec::new();
            let mut line = String::new();
            while {
                line.clear();
                r.read_line(&mut line).unwrap() > 0
            } {
                let v: Value = serde_json::from_str(&line).unwrap();
                let cmd = v["execute"].as_str().unwrap().to_string();
                if cmd == "device_del" {
                    writeln!(
                        s,
                        r#"{{"event": "DEVICE_DELETED", "data": {{"device": "c0"}}}}"#
                    )
                    .unwrap();
                    writeln!(s, r#"{{"return": {{}}}}"#).unwrap();
                } else if cmd == "qmp_capabilities" {
                    writeln!(s, r#"{{"return": {{}}}}"#).unwrap();
                } else {
                    writeln!(
                        s,
                        r#"{{"error": {{"class": "CommandNotFound", "desc": "no {cmd}"}}}}"#
                    )
                    .unwrap();
                }
                seen.push(cmd);
            }
            seen
        })
    }

    #[test]
    fn requests_reach_qemu_and_replies_and_events_come_back() {
        let dir = temp("relay");
        let sock = dir.join("q.sock");
        let qemu = fake_qemu(UnixListener::bind(&sock).unwrap());
        let relay = Relay::start(sock.clone(), dir.join("qmp"), false).unwrap();
        let qdir = dir.join("qmp");
        fs::write(
            qdir.join("1.tmp"),
            r#"{"execute":"device_del","arguments":{"id":"c0"}}"#,
        )
        .unwrap();
        fs::rename(qdir.join("1.tmp"), qdir.join("1.req")).unwrap();
        let reply: Value = serde_json::from_str(&wait_for(&qdir.join("1.resp"))).unwrap();
        assert_eq!(reply, serde_json::json!({"return": {}}));
        assert!(!qdir.join("1.req").exists());
        let events = wait_for(&qdir.join(EVENTS_FILE));
        assert!(events.contains("DEVICE_DELETED"), "{events}");
        // Not a QMP command: refused by the relay, QEMU never sees it.
        fs::write(qdir.join("2.req"), "[1, 2]").unwrap();
        let reply: Value = serde_json::from_str(&wait_for(&qdir.join("2.resp"))).unwrap();
        assert_eq!(reply["error"]["class"], "HarnessError");
        // QEMU's own errors come back as they are.
        fs::write(qdir.join("3.req"), r#"{"execute":"nope"}"#).unwrap();
        let reply: Value = serde_json::from_str(&wait_for(&qdir.join("3.resp"))).unwrap();
        assert_eq!(reply["error"]["class"], "CommandNotFound");
        relay.stop();
        assert!(!sock.exists(), "the socket file is removed");
        assert_eq!(
            qemu.join().unwrap(),
            ["qmp_capabilities", "device_del", "nope"]
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn without_qemu_a_request_gets_a_harness_error() {
        let dir = temp("noqemu");
        let relay = Relay::start(dir.join("absent.sock"), dir.join("qmp"), false).unwrap();
        fs::write(dir.join("qmp/1.req"), r#"{"execute":"device_del"}"#).unwrap();
        let reply: Value = serde_json::from_str(&wait_for(&dir.join("qmp/1.resp"))).unwrap();
        assert_eq!(reply["error"]["class"], "HarnessError");
        assert!(reply["error"]["desc"]
            .as_str()
            .unwrap()
            .contains("no QMP connection"));
        relay.stop();
        fs::remove_dir_all(&dir).unwrap();
    }
}
