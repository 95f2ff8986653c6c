//! The admin queue: synchronous and pipelined admin commands (control path; callers lock it).

use crate::error::Error;
use crate::platform::Platform;
use crate::queue::ring::Rings;
use crate::spec::{Command, Completion};
use vfnvme_dma::{DmaError, DmaPool};

/// Owner marker: the command identifier is free.
const IDLE: usize = usize::MAX;
/// Owner marker: the command timed out; its late completion is dropped.
const ABANDONED: usize = usize::MAX - 1;

/// The admin submission/completion rings and their command identifiers.
#[derive(Debug)]
pub struct AdminQueue {
    rings: Rings,
    free: Vec<u16>,
    /// Per command identifier: the index of the command in the running batch, or a marker.
    owner: Vec<usize>,
}

impl AdminQueue {
    /// Admin rings of `depth` entries (2..=4096), `depth - 1` usable command identifiers.
    pub fn new(pool: &DmaPool, depth: u16, dstrd: u8) -> Result<Self, DmaError> {
        let depth = depth.clamp(2, 4096);
        let rings = Rings::new(pool, 0, depth as u32, dstrd, None)?;
        let slots = depth as usize - 1;
        Ok(AdminQueue {
            rings,
            free: (0..slots as u16).rev().collect(),
            owner: vec![IDLE; slots],
        })
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

    /// Runs `cmds`, keeping as many in flight as the queue allows, and calls `done(i, result)`
    /// once per command (in completion order). A command with an error status gives
    /// [`Error::AdminFailed`]. If no command completes for `timeout_ns`, every unfinished
    /// command gets [`Error::AdminTimeout`].
    pub fn run<P: Platform>(
        &mut self,
        platform: &P,
        cmds: &[Command],
        timeout_ns: u64,
        mut done: impl FnMut(usize, Result<Completion, Error>),
    ) {
        let regs = platform.regs();
        let mut next = 0usize;
        let mut outstanding = 0usize;
        let mut last_progress = platform.now_ns();
        loop {
            while next < cmds.len() {
                let Some(cid) = self.free.pop() else { break };
                let Some(src) = cmds.get(next) else { break };
                let mut c = *src;
                c.set_cid(cid);
                if let Some(o) = self.owner.get_mut(cid as usize) {
                    *o = next;
                }
                self.rings.push(&c);
                next += 1;
                outstanding += 1;
            }
            if self.rings.sq_pending() {
                self.rings.ring_sq(regs);
            }
            if outstanding == 0 && next >= cmds.len() {
                return;
            }
            platform.before_poll(0);
            let mut progressed = false;
            while let Some(cqe) = self.rings.peek_cq() {
                self.rings.advance_cq();
                let cid = cqe.cid;
                let Some(o) = self.owner.get_mut(cid as usize) else {
                    log::error!("admin completion for unknown command id {cid} ignored");
                    continue;
                };
                match *o {
                    IDLE => log::error!("admin completion for idle command id {cid} ignored"),
                    ABANDONED => {
                        *o = IDLE;
                        self.free.push(cid);
                    }
                    i => {
                        *o = IDLE;
                        self.free.push(cid);
                        outstanding -= 1;
                        progressed = true;
                        let status = cqe.status();
                        let opcode = cmds.get(i).map_or(0, |c| c.opcode());
                        let result = if status.is_success() {
                            Ok(cqe)
                        } else {
                            Err(Error::AdminFailed { opcode, status })
                        };
                        done(i, result);
                    }
                }
            }
            self.rings.ring_cq(regs);
            let now = platform.now_ns();
            if progressed {
                last_progress = now;
                continue;
            }
            let waited = now.saturating_sub(last_progress);
            if waited > timeout_ns {
                let waited_ms = waited / 1_000_000;
                for o in self.owner.iter_mut() {
                    if *o < ABANDONED {
                        let opcode = cmds.get(*o).map_or(0, |c| c.opcode());
                        done(*o, Err(Error::AdminTimeout { opcode, waited_ms }));
                        *o = ABANDONED;
                    }
                }
                for (i, c) in cmds.iter().enumerate().skip(next) {
                    done(
                        i,
                        Err(Error::AdminTimeout {
                            opcode: c.opcode(),
                            waited_ms,
                        }),
                    );
                }
                return;
            }
            platform.relax();
        }
    }
}
