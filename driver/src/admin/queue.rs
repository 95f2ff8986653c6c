//! The admin queue: a pipelined submitter (keep the queue full, one doorbell per batch), the
//! synchronous/batched helpers built on it, and the Asynchronous Event Requests that stay
//! outstanding on it (control path; callers lock it).

use crate::error::Error;
use crate::platform::{Platform, RegisterIo};
use crate::queue::ring::Rings;
use crate::spec::{Command, Completion, Status};
use std::any::Any;
use vfnvme_hal::{DmaPool, HalError};

/// Owner marker: the command identifier is free.
const IDLE: usize = usize::MAX;
/// Owner marker: the command timed out; its late completion is dropped.
const ABANDONED: usize = usize::MAX - 1;
/// Owner marker: an Asynchronous Event Request waits in this slot.
const AER: usize = usize::MAX - 2;
/// Owner marker: a command of the running pipeline.
const BUSY: usize = usize::MAX - 3;

/// A source of admin commands for [`AdminQueue::pipeline`].
///
/// A *slot* is the command identifier the command goes out with; at most one command uses a
/// slot at a time, so a caller can give every slot its own DMA page.
pub(crate) trait AdminWork {
    /// The next command to send in `slot`, or `None` when there is nothing to send right now
    /// (more may follow once outstanding commands complete).
    fn next(&mut self, slot: u16) -> Option<Command>;
    /// The command sent in `slot` finished; the slot is reused only after this returns.
    fn done(&mut self, slot: u16, result: Result<Completion, Error>);
    /// Nothing completed for the timeout: outstanding commands were reported timed out and the
    /// pipeline stops. Work not yet sent should be failed here.
    fn timed_out(&mut self, _waited_ms: u64) {}
}

/// The result of one Asynchronous Event Request: DW0 of its completion, or its error status.
pub type AerResult = Result<u32, Status>;

/// The admin submission/completion rings and their command identifiers.
#[derive(Debug)]
pub(crate) struct AdminQueue {
    rings: Rings,
    free: Vec<u16>,
    /// Per command identifier: a marker, or (for `run`) unused.
    owner: Vec<usize>,
    /// Opcode sent in each slot (for error reports).
    opcodes: Vec<u8>,
    /// AER completions not yet handed out by [`poll_events`](Self::poll_events).
    events: Vec<AerResult>,
    /// AERs outstanding on the controller.
    aers: usize,
    /// Per command identifier: the DMA memory of a command that timed out, parked until its
    /// completion arrives or the controller is disabled (the device may still use it).
    parked: Vec<Parked>,
    /// Memory the device may use until the controller is disabled, whatever completes.
    until_disabled: Vec<Held>,
}

/// DMA memory (buffers, or a value that owns some) held for the device.
type Held = Box<dyn Any + Send>;

/// DMA memory parked with a command identifier.
#[derive(Debug, Default)]
struct Parked {
    held: Option<Held>,
    /// The device keeps using it after the command completes (Doorbell Buffer Config).
    until_disabled: bool,
}

/// How long the device may use the memory of an admin command run by
/// [`AdminQueue::run_owned`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeviceUse {
    /// Until the command completes (data transfers).
    UntilCompletion,
    /// Until the controller is disabled, once the command succeeded (Doorbell Buffer Config).
    UntilDisabled,
}

/// [`AdminWork`] for one command (for [`AdminQueue::run_owned`]).
struct OneCommand {
    cmd: Option<Command>,
    slot: Option<u16>,
    result: Option<Result<Completion, Error>>,
}

impl AdminWork for OneCommand {
    fn next(&mut self, slot: u16) -> Option<Command> {
        let c = self.cmd.take()?;
        self.slot = Some(slot);
        Some(c)
    }
    fn done(&mut self, _slot: u16, result: Result<Completion, Error>) {
        self.result = Some(result);
    }
}

/// Adapts a slice of commands to [`AdminWork`] for [`AdminQueue::run`].
struct SliceWork<'a, F> {
    cmds: &'a [Command],
    next: usize,
    index_of_slot: Vec<usize>,
    done: F,
}

impl<F: FnMut(usize, Result<Completion, Error>)> AdminWork for SliceWork<'_, F> {
    fn next(&mut self, slot: u16) -> Option<Command> {
        let c = *self.cmds.get(self.next)?;
        if let Some(i) = self.index_of_slot.get_mut(slot as usize) {
            *i = self.next;
        }
        self.next += 1;
        Some(c)
    }
    fn done(&mut self, slot: u16, result: Result<Completion, Error>) {
        if let Some(&i) = self.index_of_slot.get(slot as usize) {
            (self.done)(i, result);
        }
    }
    fn timed_out(&mut self, waited_ms: u64) {
        for i in self.next..self.cmds.len() {
            let opcode = self.cmds.get(i).map_or(0, |c| c.opcode());
            (self.done)(i, Err(Error::AdminTimeout { opcode, waited_ms }));
        }
        self.next = self.cmds.len();
    }
}

impl AdminQueue {
    /// Admin rings of `depth` entries (2..=4096), `depth - 1` usable command identifiers; the
    /// admin doorbells are checked against `regs`.
    pub fn new<R: RegisterIo + ?Sized>(
        pool: &DmaPool,
        regs: &R,
        depth: u16,
        dstrd: u8,
    ) -> Result<Self, HalError> {
        let depth = depth.clamp(2, 4096);
        let rings = Rings::new(pool, regs, 0, depth as u32, dstrd, None)?;
        let slots = depth as usize - 1;
        Ok(AdminQueue {
            rings,
            free: (0..slots as u16).rev().collect(),
            owner: vec![IDLE; slots],
            opcodes: vec![0; slots],
            events: Vec::new(),
            aers: 0,
            parked: (0..slots).map(|_| Parked::default()).collect(),
            until_disabled: Vec::new(),
        })
    }

    /// Runs one command whose data lives in `data` (DMA buffers, or a value that owns them), which
    /// the queue owns while the device may use it: `data` comes back with a successful completion
    /// (and is freed with an error one). If the command times out they stay parked with its command
    /// identifier, and are freed when its completion arrives or the controller is disabled
    /// ([`release_parked`](Self::release_parked)); the caller never gets them back, so it can't
    /// free or reuse memory the device may still write.
    pub(crate) fn run_owned<P: Platform, T: Send + 'static>(
        &mut self,
        platform: &P,
        cmd: Command,
        data: T,
        device_use: DeviceUse,
        timeout_ns: u64,
    ) -> Result<(Completion, T), Error> {
        let opcode = cmd.opcode();
        let mut work = OneCommand {
            cmd: Some(cmd),
            slot: None,
            result: None,
        };
        self.pipeline(platform, &mut work, timeout_ns);
        let result = work.result.unwrap_or(Err(Error::AdminTimeout {
            opcode,
            waited_ms: 0,
        }));
        // Sent and timed out: the device may still use `data`.
        let abandoned = work
            .slot
            .filter(|&slot| self.owner.get(slot as usize) == Some(&ABANDONED));
        match (
            result,
            abandoned.and_then(|s| self.parked.get_mut(s as usize)),
        ) {
            (Err(e), Some(parked)) => {
                parked.held = Some(Box::new(data));
                parked.until_disabled = device_use == DeviceUse::UntilDisabled;
                Err(e)
            }
            (result, _) => result.map(|c| (c, data)),
        }
    }

    /// The controller is disabled (CC.EN = 0, CSTS.RDY = 0): the device no longer uses any
    /// parked memory, so it is freed. Outstanding commands (and AERs) are gone with the
    /// controller's queues.
    pub(crate) fn release_parked(&mut self) {
        for p in &mut self.parked {
            p.held = None;
        }
        self.until_disabled.clear();
    }

    /// Device address of the admin SQ.
    pub fn sq_iova(&self) -> u64 {
        self.rings.sq_iova()
    }
    /// Device address of the admin CQ.
    pub fn cq_iova(&self) -> u64 {
        self.rings.cq_iova()
    }
    /// Ring depth.
    pub fn depth(&self) -> u32 {
        self.rings.depth()
    }
    /// Command identifiers (slots): `depth - 1`.
    pub fn slots(&self) -> usize {
        self.owner.len()
    }

    /// Runs `cmds`, keeping as many in flight as the queue allows, and calls `done(i, result)`
    /// once per command (in completion order). A command with an error status gives
    /// [`Error::AdminFailed`]. If no command completes for `timeout_ns`, every unfinished
    /// command gets [`Error::AdminTimeout`].
    pub fn run<P: Platform>(
        &mut self,
        platform: &P,
        cmds: &[Command],
        timeout_ns: u64,
        done: impl FnMut(usize, Result<Completion, Error>),
    ) {
        let mut work = SliceWork {
            cmds,
            next: 0,
            index_of_slot: vec![0; self.slots()],
            done,
        };
        self.pipeline(platform, &mut work, timeout_ns);
    }

    /// The pipelined submitter: fills every free slot from `work`, rings the SQ doorbell once
    /// per round, reaps completions, and repeats until `work` has nothing more and nothing is
    /// outstanding. The parallelism is the queue depth (minus slots held by AERs).
    pub fn pipeline<P: Platform>(
        &mut self,
        platform: &P,
        work: &mut dyn AdminWork,
        timeout_ns: u64,
    ) {
        let regs = platform.regs();
        let mut outstanding = 0usize;
        let mut last_progress = platform.now_ns();
        loop {
            while let Some(&cid) = self.free.last() {
                let Some(mut c) = work.next(cid) else { break };
                self.free.pop();
                c.set_cid(cid);
                self.mark(cid, BUSY, c.opcode());
                self.rings.push(&c);
                outstanding += 1;
            }
            if self.rings.sq_pending() {
                self.rings.ring_sq(regs);
            }
            if outstanding == 0 {
                return;
            }
            platform.before_poll(0);
            let finished = self.reap(platform, |cid, result| work.done(cid, result));
            outstanding = outstanding.saturating_sub(finished);
            let now = platform.now_ns();
            if finished > 0 {
                last_progress = now;
                continue;
            }
            let waited = now.saturating_sub(last_progress);
            if waited > timeout_ns {
                let waited_ms = waited / 1_000_000;
                for (cid, o) in self.owner.iter_mut().enumerate() {
                    if *o == BUSY {
                        let opcode = self.opcodes.get(cid).copied().unwrap_or(0);
                        work.done(cid as u16, Err(Error::AdminTimeout { opcode, waited_ms }));
                        *o = ABANDONED;
                    }
                }
                work.timed_out(waited_ms);
                return;
            }
            platform.relax();
        }
    }

    fn mark(&mut self, cid: u16, owner: usize, opcode: u8) {
        if let Some(o) = self.owner.get_mut(cid as usize) {
            *o = owner;
        }
        if let Some(op) = self.opcodes.get_mut(cid as usize) {
            *op = opcode;
        }
    }

    /// Drains the admin CQ: pipeline completions go to `done`, AER completions to the event
    /// list. Returns how many pipeline commands finished.
    fn reap<P: Platform>(
        &mut self,
        platform: &P,
        mut done: impl FnMut(u16, Result<Completion, Error>),
    ) -> usize {
        let mut finished = 0;
        let mut any = false;
        while let Some(cqe) = self.rings.peek_cq() {
            self.rings.advance_cq();
            any = true;
            let cid = cqe.cid;
            let Some(o) = self.owner.get_mut(cid as usize) else {
                log::error!("admin completion for unknown command id {cid} ignored");
                continue;
            };
            let status = cqe.status();
            match *o {
                IDLE => {
                    log::error!("admin completion for idle command id {cid} ignored");
                    continue;
                }
                ABANDONED => {
                    // The device is done with this command: free (or keep) what it used.
                    if let Some(p) = self.parked.get_mut(cid as usize) {
                        let held = p.held.take();
                        if p.until_disabled && status.is_success() {
                            self.until_disabled.extend(held);
                        }
                        p.until_disabled = false;
                    }
                }
                AER => {
                    self.aers = self.aers.saturating_sub(1);
                    self.events.push(if status.is_success() {
                        Ok(cqe.dw0)
                    } else {
                        Err(status)
                    });
                }
                _ => {
                    let opcode = self.opcodes.get(cid as usize).copied().unwrap_or(0);
                    let result = if status.is_success() {
                        Ok(cqe)
                    } else {
                        Err(Error::AdminFailed { opcode, status })
                    };
                    done(cid, result);
                    finished += 1;
                }
            }
            if let Some(o) = self.owner.get_mut(cid as usize) {
                *o = IDLE;
            }
            self.free.push(cid);
        }
        if any {
            self.rings.ring_cq(platform.regs());
        }
        finished
    }

    /// Sends Asynchronous Event Requests until `want` are outstanding (bounded by free slots,
    /// always leaving one slot for other commands). One doorbell for all of them.
    pub fn arm_aers<P: Platform>(&mut self, platform: &P, want: usize) {
        while self.aers < want && self.free.len() > 1 {
            let Some(cid) = self.free.pop() else { break };
            let mut c = Command::async_event_request();
            c.set_cid(cid);
            self.mark(cid, AER, c.opcode());
            self.rings.push(&c);
            self.aers += 1;
        }
        if self.rings.sq_pending() {
            self.rings.ring_sq(platform.regs());
        }
    }

    /// Reaps the admin CQ without running commands and hands out every AER completion seen
    /// since the last call (including those reaped while other commands ran).
    pub fn poll_events<P: Platform>(&mut self, platform: &P) -> Vec<AerResult> {
        platform.before_poll(0);
        self.reap(platform, |cid, _| {
            log::error!("admin completion for command id {cid} outside a pipeline ignored")
        });
        std::mem::take(&mut self.events)
    }
}
