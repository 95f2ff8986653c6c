//! Safe admin commands: the driver builds the data pointer from a [`DmaBuffer`] it owns until
//! the command is done, so safe code can't aim the device at an address.
//!
//! The data pointer describes exactly the bytes the command moves, as
//! [`AdminCommand::transfer`] reads them from the command (a PRP list page is allocated when the
//! transfer spans more than two pages). The buffer and the list pages move into the admin queue
//! for the command: if it times out the device may still use them, so they stay parked with its
//! command identifier and are freed only when its completion arrives or the controller is
//! disabled (or leaked, if it can't be disabled), never given back to the caller.
//!
//! A command whose length the driver can't read (a vendor-specific or unknown opcode or
//! feature) may also be one that keeps using host memory after it completes, as Host Memory
//! Buffer and Doorbell Buffer Config do. So the device never gets the caller's memory for it:
//! the data goes through the controller's own *unknown-length pages*, kept until the
//! controller is disabled on drop (leaked if it can't be): a bounce page at PRP1 (the caller's
//! bytes are copied in before and back out after a successful completion) and at PRP2 a
//! *guard list*: a page whose entries all point at a scratch page, with the last entry pointing
//! back at the list itself (a chain that never ends), so however much the device moves,
//! everything past the first page lands in the scratch page. Commands of unknown length take
//! turns on these pages (a lock).

use super::Controller;
use crate::admin::{DeviceUse, Shared};
use crate::error::Error;
use crate::platform::Platform;
use crate::queue::prp::{self, PAGE_SIZE};
use crate::spec::admin_command::UNKNOWN_TRANSFER_MAX;
use crate::spec::admin_command::{AdminCommand, AdminCommandError, DataTransfer, FormatSettings};
use crate::spec::identify::{parse_active_ns_list, IdentifyController, IdentifyNamespace};
use crate::spec::status::{generic, sct};
use crate::spec::Completion;
use vfnvme_hal::DmaBuffer;

/// The data pointer of one command and the pages it refers to besides the caller's buffer.
struct DataPointer {
    prp1: u64,
    prp2: u64,
    /// PRP list or guard pages, owned until the command is done.
    pages: Option<DmaBuffer>,
}

/// What holds a command's data: a [`DmaBuffer`], or nothing (`()`).
pub(crate) trait DataHolder: Send + 'static {
    /// The buffer, if any.
    fn buffer(&self) -> Option<&DmaBuffer>;
    /// The buffer, if any, to write into.
    fn buffer_mut(&mut self) -> Option<&mut DmaBuffer>;
}

impl DataHolder for DmaBuffer {
    fn buffer(&self) -> Option<&DmaBuffer> {
        Some(self)
    }
    fn buffer_mut(&mut self) -> Option<&mut DmaBuffer> {
        Some(self)
    }
}

impl DataHolder for () {
    fn buffer(&self) -> Option<&DmaBuffer> {
        None
    }
    fn buffer_mut(&mut self) -> Option<&mut DmaBuffer> {
        None
    }
}

/// Pages of the unknown-length area (see the module documentation): the guard list, the
/// scratch page its entries point at, the bounce page.
const GUARD_LIST: usize = 0;
const SCRATCH: usize = 1;
const BOUNCE: usize = 2;

impl<P: Platform> Shared<P> {
    /// Runs `cmd` with the data in `data` (from byte `at` of its buffer) and waits. `limit` is
    /// the largest transfer one command may carry. `data` comes back on success; with an error
    /// it is freed, or (after a timeout) parked until the device is done with it.
    pub(crate) fn admin_data<D: DataHolder>(
        &self,
        cmd: &AdminCommand,
        data: D,
        at: usize,
        limit: usize,
    ) -> Result<(Completion, D), Error> {
        if cmd.transfer()? == DataTransfer::Unknown {
            return self.admin_unknown_length(cmd, data, at);
        }
        let dptr = self.data_pointer(cmd, data.buffer(), at, limit)?;
        let mut c = cmd.to_command();
        c.set_prps(dptr.prp1, dptr.prp2);
        // SAFETY: the data pointer covers only memory moved into the admin queue with the
        // command: `data`'s buffer from `at` for at least the bytes the command moves (read
        // from the command itself by `data_pointer`); the device uses it only until the
        // command completes (commands that keep using memory are refused or, of unknown
        // length, go through `admin_unknown_length`).
        let (done, (data, _pages)) =
            unsafe { self.admin_sync_owned(c, (data, dptr.pages), DeviceUse::UntilCompletion) }?;
        Ok((done, data))
    }

    /// [`admin_data`](Self::admin_data) for a command whose length the driver can't read: its
    /// data goes through the controller's unknown-length pages (see the module
    /// documentation), never the caller's buffer.
    fn admin_unknown_length<D: DataHolder>(
        &self,
        cmd: &AdminCommand,
        mut data: D,
        at: usize,
    ) -> Result<(Completion, D), Error> {
        let opcode = cmd.opcode;
        let len = data.buffer().map_or(0, |b| b.len().saturating_sub(at));
        if len > UNKNOWN_TRANSFER_MAX {
            return Err(AdminCommandError::UnknownLength {
                opcode,
                len,
                max: UNKNOWN_TRANSFER_MAX,
            }
            .into());
        }
        let mut area = self.unknown_pages.lock().unwrap_or_else(|e| e.into_inner());
        if area.is_none() {
            let mut pages = self.platform.dma().alloc(3 * PAGE_SIZE)?;
            let base = pages.iova();
            let (list, scratch) = (base, base + (SCRATCH * PAGE_SIZE) as u64);
            let entries = &mut pages.as_mut_slice()[GUARD_LIST * PAGE_SIZE..][..PAGE_SIZE];
            let last = entries.len() - 8;
            for (i, e) in entries.chunks_exact_mut(8).enumerate() {
                let to = if i * 8 == last { list } else { scratch };
                e.copy_from_slice(&to.to_le_bytes());
            }
            *area = Some(pages);
        }
        // Filled just above.
        let Some(pages) = area.as_mut() else {
            return Err(AdminCommandError::UnknownLength {
                opcode,
                len,
                max: UNKNOWN_TRANSFER_MAX,
            }
            .into());
        };
        let base = pages.iova();
        let bounce = &mut pages.as_mut_slice()[BOUNCE * PAGE_SIZE..][..PAGE_SIZE];
        bounce.fill(0);
        if let Some(b) = data.buffer() {
            bounce[..len].copy_from_slice(&b.as_slice()[at..at + len]);
        }
        let mut c = cmd.to_command();
        c.set_prps(
            base + (BOUNCE * PAGE_SIZE) as u64,
            base + (GUARD_LIST * PAGE_SIZE) as u64,
        );
        // SAFETY: the data pointer covers only the unknown-length pages, which `self` keeps
        // until the controller is disabled on drop (or leaks them): however long the device
        // uses them, and however much it moves (the guard list chains back into itself).
        let (done, ()) = unsafe { self.admin_sync_owned(c, (), DeviceUse::UntilCompletion) }?;
        if let (Some(b), Some(pages)) = (data.buffer_mut(), area.as_ref()) {
            let bounce = &pages.as_slice()[BOUNCE * PAGE_SIZE..][..PAGE_SIZE];
            b.as_mut_slice()[at..at + len].copy_from_slice(&bounce[..len]);
        }
        Ok((done, data))
    }

    /// Builds the data pointer for `cmd` on `buf[at..]` (see the module documentation).
    fn data_pointer(
        &self,
        cmd: &AdminCommand,
        buf: Option<&DmaBuffer>,
        at: usize,
        limit: usize,
    ) -> Result<DataPointer, Error> {
        let opcode = cmd.opcode;
        let len = buf.map_or(0, |b| b.len().saturating_sub(at));
        let none = DataPointer {
            prp1: 0,
            prp2: 0,
            pages: None,
        };
        match cmd.transfer()? {
            DataTransfer::None | DataTransfer::Bytes(0) => Ok(none),
            DataTransfer::Bytes(needed) => {
                let Some(b) = buf else {
                    return Err(AdminCommandError::NeedsBuffer { opcode, needed }.into());
                };
                if needed > len as u64 {
                    return Err(AdminCommandError::BufferTooSmall {
                        opcode,
                        needed,
                        len,
                    }
                    .into());
                }
                let max = limit.min(prp::MAX_TRANSFER);
                if needed > max as u64 {
                    return Err(AdminCommandError::TooLarge {
                        opcode,
                        len: needed,
                        max,
                    }
                    .into());
                }
                let n = needed as usize;
                let iova = b.iova() + at as u64;
                let first = PAGE_SIZE - (iova as usize % PAGE_SIZE);
                let mut pages = if n > first + PAGE_SIZE {
                    Some(self.platform.dma().alloc(PAGE_SIZE)?)
                } else {
                    None
                };
                let (prp1, prp2) = match pages.as_mut() {
                    Some(list) => {
                        let list_iova = list.iova();
                        prp::build(iova, n, list.as_mut_slice(), list_iova)
                    }
                    None => prp::build(iova, n, &mut [], 0),
                }
                .map_err(|_| AdminCommandError::BadField {
                    opcode,
                    what: "the data buffer must start on a 4-byte boundary",
                })?;
                Ok(DataPointer { prp1, prp2, pages })
            }
            // Handled by `admin_unknown_length`, never with the caller's memory.
            DataTransfer::Unknown => Err(AdminCommandError::UnknownLength {
                opcode,
                len,
                max: UNKNOWN_TRANSFER_MAX,
            }
            .into()),
        }
    }
}

/// Safe admin commands. None of them lets the caller choose a device address: data goes
/// through a [`DmaBuffer`] the driver holds until the command is done (see
/// [`AdminCommand`]). The raw, `unsafe` forms are [`Controller::admin_sync`] and
/// [`Controller::admin_batch`].
impl<P: Platform> Controller<P> {
    /// Runs an admin command that moves no data (or whose length the driver can't read; up
    /// to a page the device may then write goes to scratch memory) and waits for it.
    pub fn admin(&self, cmd: AdminCommand) -> Result<Completion, Error> {
        self.shared
            .admin_data(&cmd, (), 0, self.info.max_transfer_bytes)
            .map(|(c, ())| c)
    }

    /// Runs an admin command with `buf` as its data (either direction) and waits; gives the
    /// buffer back with the completion. The command's own length field (NUMD, AL, the size of
    /// an Identify structure) must fit in `buf.len()`; the data pointer is built here.
    ///
    /// Errors: [`Error::AdminCommand`] when the command can't go through the safe API (see
    /// [`AdminCommandError`]); [`Error::AdminFailed`] with the status the controller returned;
    /// [`Error::AdminTimeout`] (the buffer then stays with the driver until the device is
    /// done with it: its late completion, or the controller's disable).
    pub fn admin_with_data(
        &self,
        cmd: AdminCommand,
        buf: DmaBuffer,
    ) -> Result<(Completion, DmaBuffer), Error> {
        self.shared
            .admin_data(&cmd, buf, 0, self.info.max_transfer_bytes)
    }

    /// Runs a controller-to-host admin command into a new zeroed buffer of `len` bytes.
    pub fn admin_read(
        &self,
        cmd: AdminCommand,
        len: usize,
    ) -> Result<(Completion, DmaBuffer), Error> {
        let buf = self.dma().alloc(len)?;
        self.admin_with_data(cmd, buf)
    }

    /// Runs a host-to-controller admin command with a copy of `data`.
    pub fn admin_write(&self, cmd: AdminCommand, data: &[u8]) -> Result<Completion, Error> {
        let mut buf = self.dma().alloc(data.len().max(1))?;
        buf.as_mut_slice()[..data.len()].copy_from_slice(data);
        self.admin_with_data(cmd, buf).map(|(c, _)| c)
    }

    /// Identify Controller, read now (bring-up's copy is in [`Controller::identify`]).
    pub fn identify_controller(&self) -> Result<IdentifyController, Error> {
        let (_, b) = self.admin_read(AdminCommand::identify_controller(), PAGE_SIZE)?;
        Ok(IdentifyController::parse(b.as_slice())?)
    }

    /// Identify Namespace `nsid` (active or not; an inactive nsid reads as zeroes).
    pub fn identify_namespace(&self, nsid: u32) -> Result<IdentifyNamespace, Error> {
        let (_, b) = self.admin_read(AdminCommand::identify_namespace(nsid), PAGE_SIZE)?;
        Ok(IdentifyNamespace::parse(b.as_slice())?)
    }

    /// Up to 1024 active nsids greater than `after_nsid`, ascending (Identify CNS 02h).
    pub fn identify_active_ns_list(&self, after_nsid: u32) -> Result<Vec<u32>, Error> {
        let (_, b) =
            self.admin_read(AdminCommand::identify_active_ns_list(after_nsid), PAGE_SIZE)?;
        Ok(parse_active_ns_list(b.as_slice())?)
    }

    /// Reads `len` bytes (a multiple of 4) of log page `lid` for `nsid` (`0xffffffff` for the
    /// controller), in pieces of at most the controller's transfer limit (with the log page
    /// offset). `rae` keeps the asynchronous event the log clears outstanding.
    pub fn get_log_page(
        &self,
        lid: u8,
        nsid: u32,
        len: usize,
        rae: bool,
    ) -> Result<DmaBuffer, Error> {
        self.get_log_page_with(&LogPageRequest {
            lid,
            nsid,
            len,
            rae,
            ..LogPageRequest::default()
        })
    }

    /// Reads a log page with every field of Get Log Page: [`get_log_page`](Self::get_log_page)
    /// plus the log specific field, the log page offset, the log specific identifier and the
    /// command set.
    pub fn get_log_page_with(&self, req: &LogPageRequest) -> Result<DmaBuffer, Error> {
        let opcode = crate::spec::command::admin_opcode::GET_LOG_PAGE;
        let LogPageRequest {
            lid,
            nsid,
            len,
            offset,
            rae,
            lsp,
            lsi,
            csi,
        } = *req;
        if len == 0 || !len.is_multiple_of(4) {
            return Err(AdminCommandError::BadField {
                opcode,
                what: "a log page length must be a non-zero multiple of 4 bytes",
            }
            .into());
        }
        if !offset.is_multiple_of(4) {
            return Err(AdminCommandError::BadField {
                opcode,
                what: "a log page offset must be a multiple of 4 bytes",
            }
            .into());
        }
        if lsp > 0x7f {
            return Err(AdminCommandError::BadField {
                opcode,
                what: "the log specific field has 7 bits (0..=127)",
            }
            .into());
        }
        let step = self
            .info
            .max_transfer_bytes
            .clamp(PAGE_SIZE, prp::MAX_TRANSFER);
        let mut buf = self.dma().alloc(len)?;
        let mut at = 0;
        while at < len {
            let n = (len - at).min(step);
            let mut cmd = AdminCommand::get_log_page(lid, nsid, n as u32, offset + at as u64, rae);
            cmd.cdw10 |= u32::from(lsp) << 8;
            cmd.cdw11 |= u32::from(lsi) << 16;
            cmd.cdw14 |= u32::from(csi) << 24;
            (_, buf) = self.shared.admin_data(&cmd, buf, at, step)?;
            at += n;
        }
        Ok(buf)
    }

    /// Get Features `fid` (current value) with `cdw11`: DW0 of the completion. For features
    /// with a data structure, use [`admin_read`](Self::admin_read) with
    /// [`AdminCommand::get_features`].
    pub fn get_features(&self, fid: u8, cdw11: u32) -> Result<u32, Error> {
        let cmd = AdminCommand::get_features(fid, cdw11);
        match cmd.transfer()? {
            DataTransfer::Bytes(n) => {
                let (c, _) = self.admin_read(cmd, n as usize)?;
                Ok(c.dw0)
            }
            _ => Ok(self.admin(cmd)?.dw0),
        }
    }

    /// Set Features `fid` to `cdw11`, with `data` for features that take a data structure
    /// (not saved across resets). Returns DW0 of the completion.
    pub fn set_features(&self, fid: u8, cdw11: u32, data: Option<&[u8]>) -> Result<u32, Error> {
        let cmd = AdminCommand::set_features(fid, cdw11);
        Ok(match data {
            Some(d) => self.admin_write(cmd, d)?.dw0,
            None => {
                let dw0 = self.admin(cmd)?.dw0;
                // Kept for a controller reset to set again (the last value per feature).
                let mut set = self
                    .shared
                    .features
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                set.retain(|(f, _)| *f != fid);
                set.push((fid, cdw11));
                dw0
            }
        })
    }

    /// Attaches (`attach == true`) or detaches namespace `nsid` to/from the controllers with
    /// the given controller ids (Namespace Attachment with a controller list).
    pub fn namespace_attachment(
        &self,
        nsid: u32,
        attach: bool,
        controllers: &[u16],
    ) -> Result<(), Error> {
        let opcode = crate::spec::command::admin_opcode::NAMESPACE_ATTACHMENT;
        if controllers.is_empty() || controllers.len() > 2047 {
            return Err(AdminCommandError::BadField {
                opcode,
                what: "a controller list holds 1 to 2047 controller ids",
            }
            .into());
        }
        let mut list = vec![0u8; PAGE_SIZE];
        list[0..2].copy_from_slice(&(controllers.len() as u16).to_le_bytes());
        for (slot, id) in list[2..].chunks_exact_mut(2).zip(controllers) {
            slot.copy_from_slice(&id.to_le_bytes());
        }
        self.admin_write(AdminCommand::namespace_attachment(nsid, attach), &list)?;
        Ok(())
    }

    /// Format NVM of `nsid` (`0xffffffff` = all) with LBA format index `lbaf` and Secure Erase
    /// Settings `ses` (0 none, 1 user data erase, 2 cryptographic erase). For a single
    /// namespace, `lbaf` is first checked against the formats Identify Namespace lists.
    pub fn format_nvm(&self, nsid: u32, lbaf: u8, ses: u8) -> Result<(), Error> {
        self.format_nvm_with(
            nsid,
            FormatSettings {
                lbaf,
                ses,
                ..FormatSettings::default()
            },
        )
    }

    /// Format NVM of `nsid` with `s`: an LBA format, secure erase, and for a format with
    /// metadata its place (extended LBAs or a separate buffer) and protection information (type
    /// and place). For a single namespace, the format is first checked against what Identify
    /// Namespace lists: the index, the metadata capabilities (MC), and PI (DPC, at least 8
    /// bytes of metadata).
    pub fn format_nvm_with(&self, nsid: u32, s: FormatSettings) -> Result<(), Error> {
        let opcode = crate::spec::admin_command::opcode::FORMAT_NVM;
        let bad = |what| Err(AdminCommandError::BadField { opcode, what }.into());
        let FormatSettings {
            lbaf,
            ses,
            pi,
            pi_first,
            extended,
        } = s;
        if lbaf > 63 || ses > 2 || pi > 3 {
            return bad("the LBA format index is 0..=63, the secure erase setting 0..=2 and the PI type 0..=3");
        }
        if nsid != u32::MAX {
            let id = match self.identify_namespace(nsid) {
                Err(Error::AdminFailed { status, .. })
                    if status.sct() == sct::GENERIC
                        && status.sc() == generic::INVALID_NAMESPACE =>
                {
                    return Err(Error::NoSuchNamespace { nsid })
                }
                r => r?,
            };
            if id.nsze == 0 {
                return Err(Error::NoSuchNamespace { nsid });
            }
            if lbaf > id.nlbaf {
                return bad("the LBA format index is above the namespace's NLBAF: pick one that Identify Namespace lists");
            }
            let ms = id.lbaf.get(usize::from(lbaf)).map_or(0, |f| f.ms);
            if ms != 0 && id.mc & if extended { 1 } else { 2 } == 0 {
                return bad("the namespace can't keep metadata that way (Identify Namespace MC): choose the other of extended and separate");
            }
            if pi != 0 {
                if ms < 8 {
                    return bad("protection information needs an LBA format with at least 8 bytes of metadata");
                }
                let place = if pi_first { 1 << 3 } else { 1 << 4 };
                if id.dpc & (1 << (pi - 1)) == 0 || id.dpc & place == 0 {
                    return bad("the namespace does not offer that PI type or place (Identify Namespace DPC)");
                }
            }
        }
        self.admin(AdminCommand::format_nvm_with(nsid, s))?;
        Ok(())
    }
}

/// Every field of a Get Log Page request (see [`Controller::get_log_page_with`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogPageRequest {
    /// Log page identifier.
    pub lid: u8,
    /// Namespace (`0xffffffff` for the controller; 0 is what `Default` gives).
    pub nsid: u32,
    /// Bytes to read: a non-zero multiple of 4.
    pub len: usize,
    /// Byte offset into the log page: a multiple of 4.
    pub offset: u64,
    /// Retain Asynchronous Event.
    pub rae: bool,
    /// Log specific field (CDW10 bits 14:8).
    pub lsp: u8,
    /// Log specific identifier (CDW11 bits 31:16).
    pub lsi: u16,
    /// Command set identifier (CDW14 bits 31:24).
    pub csi: u8,
}
