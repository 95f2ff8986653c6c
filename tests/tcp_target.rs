//! A `vfnvme-target` over a model controller on an ephemeral 127.0.0.1 port, polled on its own
//! thread, for the host tests of the NVMe/TCP target.

use crate::tcp_client::Client;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;
use vfnvme::{Controller, ControllerOptions};
use vfnvme_model::{Backing, ModelConfig, ModelNamespaceConfig, ModelPlatform};
use vfnvme_target::{ControllerBackend, ShutdownReport, SubsystemConfig, Target, TargetConfig};

/// The subsystem NQN served.
pub const SUBNQN: &str = "nqn.2026-12.io.vfnvme:test";
/// A host on the allow list.
pub const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:host-allowed";
/// A host not on it.
pub const OTHER_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:host-refused";

/// A target serving on its own thread.
pub struct Running {
    /// Its address.
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<ShutdownReport>>,
}

impl Running {
    /// Stops it; returns what the shutdown did.
    pub fn stop(mut self) -> ShutdownReport {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .expect("thread")
            .join()
            .expect("target thread")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A target on an ephemeral port over a model with namespace 1 (512 B blocks) and 2 (4 KiB).
pub fn start() -> Running {
    start_with(|_| {})
}

/// [`start`] with the configuration changed by `tweak` first.
pub fn start_with(tweak: impl FnOnce(&mut TargetConfig) + Send + 'static) -> Running {
    start_model_with(|_| {}, tweak)
}

/// [`start_with`], the model's configuration changed by `model` first.
pub fn start_model_with(
    model: impl FnOnce(&mut ModelConfig) + Send + 'static,
    tweak: impl FnOnce(&mut TargetConfig) + Send + 'static,
) -> Running {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let flag = stop.clone();
    let thread = std::thread::spawn(move || {
        let mut model_config = ModelConfig {
            namespaces: vec![
                ModelNamespaceConfig {
                    nsid: 1,
                    blocks: 1 << 16,
                    lba_size: 512,
                    backing: Backing::Ram,
                },
                ModelNamespaceConfig {
                    nsid: 2,
                    blocks: 1 << 12,
                    lba_size: 4096,
                    backing: Backing::Ram,
                },
            ],
            ..ModelConfig::default()
        };
        model(&mut model_config);
        let platform = ModelPlatform::new(model_config).expect("model");
        let ctrl = Controller::new(platform, ControllerOptions::default()).expect("bring-up");
        let backend = ControllerBackend::new(Arc::new(ctrl), None).expect("backend");
        let mut sub = SubsystemConfig::new(SUBNQN);
        sub.allowed_hosts.push(HOST.into());
        let mut cfg = TargetConfig::new(sub);
        cfg.listen = "127.0.0.1:0".parse().expect("address");
        cfg.maxh2cdata = 16 * 1024;
        tweak(&mut cfg);
        let mut target = Target::bind(cfg, backend).expect("bind");
        tx.send(target.local_addr().expect("address"))
            .expect("send address");
        target.run(&flag, Duration::from_secs(5))
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("target started");
    Running {
        addr,
        stop,
        thread: Some(thread),
    }
}

/// ICReq, admin Connect, CC.EN = 1, one I/O queue: as Linux's initiator brings a controller
/// up. Returns the admin and I/O clients and the controller ID.
pub fn bring_up(addr: SocketAddr, digests: bool) -> (Client, Client, u16) {
    let mut admin = Client::open(addr).expect("connect");
    admin.icreq(digests, digests);
    let c = admin.connect(0, 31, 0xFFFF, SUBNQN, HOST);
    assert_eq!(c.status, 0, "admin Connect: {c:?}");
    let cntlid = c.result as u16;
    assert_ne!(cntlid, 0xFFFF);
    let cap = admin.prop_get(0x00, true);
    assert_eq!(cap.status, 0);
    assert_eq!(cap.result & 0xffff, 127, "CAP.MQES");
    assert_ne!(cap.result & (1 << 37), 0, "CAP.CSS NVM");
    assert_eq!(admin.prop_set(0x14, 0x0046_0000).status, 0);
    assert_eq!(admin.prop_set(0x14, 0x0046_0001).status, 0);
    assert_eq!(admin.prop_get(0x1C, false).result & 1, 1, "CSTS.RDY");
    assert_eq!(admin.prop_get(0x08, false).result, 0x0001_0400, "VS");
    let nq = admin.admin(0x09, 0x07, 0x0003_0003);
    assert_eq!(nq.status, 0, "Set Features Number of Queues");
    let mut io = Client::open(addr).expect("connect I/O");
    io.icreq(digests, digests);
    let c = io.connect(1, 127, cntlid, SUBNQN, HOST);
    assert_eq!(c.status, 0, "I/O Connect: {c:?}");
    assert_eq!(c.sqid, 1);
    (admin, io, cntlid)
}

/// A target exporting the heads of a two-controller model subsystem (namespace 1 shared, ANA
/// group 1, both paths optimized); returns it and the model, whose ANA states the test changes.
pub fn start_heads() -> (Running, Arc<vfnvme_model::ModelSubsystem>) {
    use vfnvme::multipath::{HeadOptions, Subsystem};
    use vfnvme_model::{AnaState, ModelAnaGroup, ModelSubsystem, ModelSubsystemConfig};
    let model = Arc::new(
        ModelSubsystem::new(ModelSubsystemConfig {
            nqn: "nqn.2026-12.io.vfnvme:model-heads".into(),
            controllers: 2,
            base: ModelConfig {
                namespaces: vec![ModelNamespaceConfig {
                    nsid: 1,
                    blocks: 1 << 16,
                    lba_size: 512,
                    backing: Backing::Ram,
                }],
                ..ModelConfig::default()
            },
            ana_groups: vec![ModelAnaGroup {
                id: 1,
                nsids: vec![1],
                state: AnaState::Optimized,
            }],
            anatt_secs: 10,
            faulty: Vec::new(),
        })
        .expect("model subsystem"),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let flag = stop.clone();
    let m = model.clone();
    let thread = std::thread::spawn(move || {
        let ctrls = m
            .controllers()
            .iter()
            .map(|p| {
                Arc::new(
                    Controller::new(p.clone(), ControllerOptions::default()).expect("bring-up"),
                )
            })
            .collect();
        let sub = Subsystem::from_controllers(ctrls, HeadOptions::default()).expect("subsystem");
        let backend = vfnvme_target::HeadBackend::new(sub, None).expect("backend");
        let mut sub = SubsystemConfig::new(SUBNQN);
        sub.allowed_hosts.push(HOST.into());
        let mut cfg = TargetConfig::new(sub);
        cfg.listen = "127.0.0.1:0".parse().expect("address");
        let mut target = Target::bind(cfg, backend).expect("bind");
        tx.send(target.local_addr().expect("address"))
            .expect("send address");
        target.run(&flag, Duration::from_secs(5))
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("target started");
    (
        Running {
            addr,
            stop,
            thread: Some(thread),
        },
        model,
    )
}
