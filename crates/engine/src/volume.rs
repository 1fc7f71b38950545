//! What the exports (NBD, FUSE) serve: an array's bytes, whatever the engine behind them
//! is doing. [`Volume`] is that contract; [`LiveArray`] is the one `uraid serve` hands out,
//! which stays the same object while the array under it changes stage (a plain array, or
//! one in the middle of a reshape), so clients keep their connections through a reshape.

use crate::array::{Array, ArrayOptions, EngineError};
use crate::reshape::ReshapingArray;
use std::sync::{Arc, RwLock, RwLockReadGuard};
use uraid_core::geometry::Level;
use uraid_core::metadata::grow::GrowRequest;

/// An array's bytes, as a block device offers them.
pub trait Volume: Send + Sync {
    /// The name clients know the array by.
    fn name(&self) -> String;
    fn level(&self) -> Level;
    fn size_bytes(&self) -> u64;
    fn is_writable(&self) -> bool;
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), EngineError>;
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), EngineError>;
    /// Every acknowledged write durable.
    fn flush(&self) -> Result<(), EngineError>;
    /// The range reads as zeros afterwards.
    fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), EngineError>;
    /// The range may be forgotten; it reads as zeros afterwards.
    fn discard(&self, offset: u64, len: u64) -> Result<(), EngineError>;
    /// Whether a discard frees space without writing (no parity to keep).
    fn discard_is_cheap(&self) -> bool;
}

impl Volume for Array {
    fn name(&self) -> String {
        Array::name(self).to_string()
    }
    fn level(&self) -> Level {
        Array::level(self)
    }
    fn size_bytes(&self) -> u64 {
        Array::size_bytes(self)
    }
    fn is_writable(&self) -> bool {
        Array::is_writable(self)
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), EngineError> {
        Array::read(self, offset, buf)
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), EngineError> {
        Array::write(self, offset, data)
    }
    fn flush(&self) -> Result<(), EngineError> {
        Array::flush(self)
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), EngineError> {
        Array::write_zeroes(self, offset, len)
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), EngineError> {
        Array::discard(self, offset, len)
    }
    fn discard_is_cheap(&self) -> bool {
        self.geometry().as_parity().is_none()
    }
}

/// What a [`LiveArray`] is now.
#[derive(Clone)]
pub enum Stage {
    Plain(Arc<Array>),
    Reshaping(Arc<ReshapingArray>),
}

/// An array that may change stage under its clients (see the module doc). Each request
/// holds the stage for its duration; a change waits for requests in progress and holds
/// new ones until it is done.
pub struct LiveArray {
    stage: RwLock<Stage>,
    name: String,
    /// The reshape running grows a RAID0 (through RAID4): at its end the RAID4 is taken
    /// back as a RAID0, the step mdadm's background process makes.
    back_to_raid0: std::sync::atomic::AtomicBool,
}

impl LiveArray {
    pub fn new(stage: Stage, name: String) -> LiveArray {
        LiveArray { stage: RwLock::new(stage), name, back_to_raid0: std::sync::atomic::AtomicBool::new(false) }
    }

    fn current(&self) -> RwLockReadGuard<'_, Stage> {
        self.stage.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The stage now (a snapshot: it may change right after).
    pub fn stage(&self) -> Stage {
        self.current().clone()
    }

    /// Applies `req` (mdadm --grow): a level change md makes in place, a reshape, or a
    /// level change then a reshape. The plain array is flushed and closed first; requests
    /// then continue against the array taken over, or reshaping. Callers make sure no
    /// background job is using the plain array. On a refusal the plain array stays.
    pub fn grow(&self, opts: &ArrayOptions, req: &GrowRequest) -> Result<Stage, EngineError> {
        let mut stage = self.stage.write().unwrap_or_else(|p| p.into_inner());
        let array = plain_and_idle(&stage, "reshaping")?;
        let handles = array.device_handles();
        array.close()?;
        let taken = crate::reshape::take_over(&handles, opts, req)?;
        let rest = match &taken {
            Some(t) => req.after_takeover(t),
            None => Some(*req),
        };
        let reopen = || -> Result<Stage, EngineError> {
            let (a, _) = Array::assemble(handles.clone(), &running(opts))?;
            a.start_recovery_if_possible();
            Ok(Stage::Plain(Arc::new(a)))
        };
        let next = match (rest, &taken) {
            (None, _) => reopen()?,
            (Some(_), Some(t)) if t.rebuilt.is_some() => {
                *stage = reopen()?;
                return Err(EngineError::Invalid(format!(
                    "taken over as RAID{}; its new member is being rebuilt: change the rest once that is done",
                    t.level
                )));
            }
            // The array is running already: degraded, it reshapes degraded (--run is about
            // starting an array, which this is not).
            (Some(rest), _) => match ReshapingArray::start(handles.clone(), &running(opts), &rest) {
                Ok(r) => Stage::Reshaping(Arc::new(r)),
                Err(e) if taken.is_some() => {
                    *stage = reopen()?;
                    return Err(e);
                }
                Err(e) => return Err(e),
            },
        };
        *stage = next.clone();
        Ok(next)
    }

    /// [`Self::grow`] of a 0.90 array, in place (0.90 has no data offset to move): the
    /// critical section is saved in `backup` first (`ReshapingArray::start_in_place`), then
    /// written back in the new shape as the reshape opens. Refused before anything is
    /// written, the array goes on as it was.
    pub fn grow_in_place(
        &self,
        opts: &ArrayOptions,
        req: &GrowRequest,
        backup: &crate::reshape::ReshapeBackup,
    ) -> Result<Stage, EngineError> {
        let mut stage = self.stage.write().unwrap_or_else(|p| p.into_inner());
        let array = plain_and_idle(&stage, "reshaping")?;
        let handles = array.device_handles();
        array.close()?;
        let started = ReshapingArray::start_in_place(&handles, &running(opts), req, backup)
            .and_then(|()| ReshapingArray::open_with_backup(handles.clone(), &running(opts), Some(backup)));
        match started {
            Ok(r) => {
                let next = Stage::Reshaping(Arc::new(r));
                *stage = next.clone();
                Ok(next)
            }
            Err(e) => {
                // Whatever the members say is served again (a start already recorded
                // makes this fail too: the reshape is then continued after a restart).
                if let Ok((a, _)) = Array::assemble(handles, &running(opts)) {
                    *stage = Stage::Plain(Arc::new(a));
                }
                Err(e)
            }
        }
    }

    /// Gives the RAID0 served here the blank devices `new` (each with its device uuid), as
    /// mdadm --grow -n N --add does (`reshape::start_raid0_grow`): taken over as a RAID4
    /// with parity missing and reshaped while it serves; [`Self::end_reshape`] takes it
    /// back as a RAID0. A restart part-way continues the RAID4 reshape and leaves a RAID4,
    /// as a restarted md does (`uraid grow --level 0` then takes it back).
    pub fn grow_raid0(&self, opts: &ArrayOptions, new: Vec<(Arc<dyn crate::member::Member>, [u8; 16])>) -> Result<Stage, EngineError> {
        let mut stage = self.stage.write().unwrap_or_else(|p| p.into_inner());
        let array = plain_and_idle(&stage, "growing")?;
        if array.level() != uraid_core::geometry::Level::Raid0 {
            return Err(EngineError::Invalid(format!(
                "--add gives new devices to a RAID0; this is a {}: uraid add them first",
                array.level()
            )));
        }
        let handles = array.device_handles();
        array.close()?;
        let next = match crate::reshape::start_raid0_grow(&handles, new, &running(opts)) {
            Ok(r) => Stage::Reshaping(Arc::new(r)),
            Err(e) => {
                // Refused before anything was written (or the takeover undone by md's
                // rules: whatever the members now say is what is served).
                let (a, _) = Array::assemble(handles, &running(opts))?;
                *stage = Stage::Plain(Arc::new(a));
                return Err(e);
            }
        };
        self.back_to_raid0.store(true, std::sync::atomic::Ordering::Release);
        *stage = next.clone();
        Ok(next)
    }

    /// After the reshape finished: requests continue against the array assembled in its
    /// new shape.
    pub fn end_reshape(&self, opts: &ArrayOptions) -> Result<Arc<Array>, EngineError> {
        let mut stage = self.stage.write().unwrap_or_else(|p| p.into_inner());
        let Stage::Reshaping(r) = &*stage else {
            return Err(EngineError::Invalid("no reshape is running".into()));
        };
        if !r.is_finished() {
            return Err(EngineError::Invalid("the reshape has not finished".into()));
        }
        r.close()?;
        if self.back_to_raid0.swap(false, std::sync::atomic::Ordering::AcqRel) {
            crate::reshape::finish_raid0_grow(&r.device_handles(), &running(opts))?;
        }
        let (array, _) = Array::assemble(r.device_handles(), &running(opts))?;
        // A degraded shrink leaves the member it removed a spare: it rebuilds the missing
        // role at once, as md's `remove_and_add_spares` does after the reshape.
        array.start_recovery_if_possible();
        let array = Arc::new(array);
        *stage = Stage::Plain(array.clone());
        Ok(array)
    }

    /// Changes the members' used size (`uraid grow --size`) of the plain array: it is closed,
    /// its superblocks rewritten (`crate::reshape::resize`), and it is assembled again with
    /// the new size and a resync of the new part pending. Refused while a reshape or a job
    /// runs; when refused, the array goes on as it was.
    pub fn resize(&self, opts: &ArrayOptions, ask: uraid_core::metadata::resize::SizeAsk) -> Result<Arc<Array>, EngineError> {
        let mut stage = self.stage.write().unwrap_or_else(|p| p.into_inner());
        let array = plain_and_idle(&stage, "changing the size")?;
        let handles = array.device_handles();
        for h in &handles {
            h.refresh_size().map_err(|error| crate::Fault::Metadata { device: h.label().to_string(), action: "asking its size", error })?;
        }
        array.close()?;
        crate::reshape::resize(&handles, opts, ask)?;
        let (a, _) = Array::assemble(handles, &running(opts))?;
        let a = Arc::new(a);
        *stage = Stage::Plain(a.clone());
        Ok(a)
    }

    /// Flushes and marks the array clean (with a reshape, its position recorded).
    pub fn close(&self) -> Result<(), EngineError> {
        match &*self.current() {
            Stage::Plain(a) => a.close(),
            Stage::Reshaping(r) => r.close(),
        }
    }
}

/// One request against whatever the stage is.
macro_rules! on_stage {
    ($self:ident, $v:ident => $e:expr) => {
        match &*$self.current() {
            Stage::Plain($v) => $e,
            Stage::Reshaping($v) => $e,
        }
    };
}

impl Volume for LiveArray {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn level(&self) -> Level {
        match &*self.current() {
            Stage::Plain(a) => a.level(),
            Stage::Reshaping(r) => r.new_side().level(),
        }
    }
    fn size_bytes(&self) -> u64 {
        on_stage!(self, v => v.size_bytes())
    }
    fn is_writable(&self) -> bool {
        on_stage!(self, v => v.is_writable())
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), EngineError> {
        on_stage!(self, v => v.read(offset, buf))
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), EngineError> {
        on_stage!(self, v => v.write(offset, data))
    }
    fn flush(&self) -> Result<(), EngineError> {
        on_stage!(self, v => v.flush())
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), EngineError> {
        on_stage!(self, v => v.write_zeroes(offset, len))
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), EngineError> {
        on_stage!(self, v => v.discard(offset, len))
    }
    fn discard_is_cheap(&self) -> bool {
        match &*self.current() {
            Stage::Plain(a) => Volume::discard_is_cheap(a.as_ref()),
            Stage::Reshaping(_) => false,
        }
    }
}

/// `opts` for an array that is already running: assembling it degraded needs no `--run`.
fn running(opts: &ArrayOptions) -> ArrayOptions {
    let mut opts = *opts;
    opts.assemble.run = true;
    opts
}

/// The plain array of `stage`, refused while a reshape runs or a job is pending (`what`:
/// the change asked, for the message).
fn plain_and_idle<'a>(stage: &'a Stage, what: &str) -> Result<&'a Arc<Array>, EngineError> {
    let Stage::Plain(array) = stage else {
        return Err(EngineError::Invalid("a reshape is already running; let it finish first".into()));
    };
    if let Some(job) = array.pending_job() {
        return Err(EngineError::Invalid(format!("a {} is pending; let it finish before {what}", job.name())));
    }
    Ok(array)
}
