//! Bounds on what one evaluation may allocate and how long it may run (added
//! by agent-platform's patch: see `PATCHED.md`).
//!
//! Fuel counts instructions, but one instruction can ask for any amount of
//! memory (`'x' * n`, `indent(n)`, `replace`, `join`, `~`) and take any time
//! (a scan of a long string). Inside [`with_limits`], every place of the
//! engine that builds a value whose size the template chooses *charges* the
//! bytes it is about to allocate, before allocating them, against a budget
//! kept for the current thread; and the VM checks a deadline as it runs. The
//! budget is cumulative (bytes built, not bytes alive), so the memory one
//! evaluation holds never exceeds it, whatever it frees meanwhile.
//!
//! Outside [`with_limits`] nothing is charged and nothing changes.

use std::cell::RefCell;
use std::fmt;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind};

/// What one evaluation may use.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The most bytes the evaluation may build, in all.
    pub max_bytes: usize,
    /// How long the evaluation may run.
    pub max_time: Option<Duration>,
}

/// Which bound an evaluation passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    /// It would have built more than this many bytes.
    Bytes(usize),
    /// It ran longer than this.
    Time(Duration),
}

impl fmt::Display for Exceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exceeded::Bytes(max) => write!(f, "it would build more than {max} bytes"),
            Exceeded::Time(max) => write!(f, "it ran longer than {} ms", max.as_millis()),
        }
    }
}

struct Active {
    limits: Limits,
    left: usize,
    deadline: Option<Instant>,
    ticks: u32,
    exceeded: Option<Exceeded>,
}

thread_local! {
    static ACTIVE: RefCell<Option<Active>> = const { RefCell::new(None) };
}

/// How many instructions run between two looks at the clock.
const TICKS_PER_CLOCK: u32 = 256;

/// Runs `f` (an evaluation) within `limits` on this thread; answers its
/// result and which bound it passed, if any. A bound passed fails the
/// operation that passed it with an `InvalidOperation` error; an evaluation
/// that went on (an error caught by a filter such as `default`) is still
/// reported here, and every later charge in it fails.
pub fn with_limits<R>(limits: Limits, f: impl FnOnce() -> R) -> (R, Option<Exceeded>) {
    let active = Active {
        limits,
        left: limits.max_bytes,
        deadline: limits.max_time.map(|t| Instant::now() + t),
        ticks: 0,
        exceeded: None,
    };
    let outer = ACTIVE.with(|a| a.borrow_mut().replace(active));
    /// Puts back the limits of an enclosing evaluation (or none), even on a panic.
    struct Restore(Option<Active>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            ACTIVE.with(|a| *a.borrow_mut() = outer);
        }
    }
    let restore = Restore(outer);
    let rv = f();
    let exceeded = ACTIVE.with(|a| a.borrow().as_ref().and_then(|a| a.exceeded));
    drop(restore);
    (rv, exceeded)
}

fn exceeded_error(exceeded: Exceeded) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("the evaluation was stopped: {exceeded}"),
    )
}

/// Charges `bytes` about to be allocated against the current budget.
pub fn charge(bytes: usize) -> Result<(), Error> {
    ACTIVE.with(|a| {
        let mut a = a.borrow_mut();
        let Some(active) = a.as_mut() else {
            return Ok(());
        };
        if let Some(exceeded) = active.exceeded {
            return Err(exceeded_error(exceeded));
        }
        match active.left.checked_sub(bytes) {
            Some(left) => {
                active.left = left;
                Ok(())
            }
            None => {
                let exceeded = Exceeded::Bytes(active.limits.max_bytes);
                active.left = 0;
                active.exceeded = Some(exceeded);
                Err(exceeded_error(exceeded))
            }
        }
    })
}

/// Charges `items` values about to be allocated in a list.
pub fn charge_items(items: usize) -> Result<(), Error> {
    charge(items.saturating_mul(std::mem::size_of::<crate::value::Value>()))
}

/// Called for every instruction the VM runs: fails once the deadline passed.
pub(crate) fn tick() -> Result<(), Error> {
    ACTIVE.with(|a| {
        let mut a = a.borrow_mut();
        let Some(active) = a.as_mut() else {
            return Ok(());
        };
        if let Some(exceeded) = active.exceeded {
            return Err(exceeded_error(exceeded));
        }
        active.ticks = active.ticks.wrapping_add(1);
        if active.ticks % TICKS_PER_CLOCK != 0 {
            return Ok(());
        }
        match (active.deadline, active.limits.max_time) {
            (Some(deadline), Some(max)) if Instant::now() > deadline => {
                let exceeded = Exceeded::Time(max);
                active.exceeded = Some(exceeded);
                Err(exceeded_error(exceeded))
            }
            _ => Ok(()),
        }
    })
}

/// A string that charges what is written into it.
struct Charged<'a>(&'a mut String);

impl fmt::Write for Charged<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        charge(s.len()).map_err(|_| fmt::Error)?;
        self.0.push_str(s);
        Ok(())
    }
}

/// `value`'s text (as `Display` writes it), charged as it is built.
pub fn display(value: &dyn fmt::Display) -> Result<String, Error> {
    let mut out = String::new();
    match fmt::write(&mut Charged(&mut out), format_args!("{value}")) {
        Ok(()) => Ok(out),
        Err(_) => Err(charge(0).err().unwrap_or_else(|| {
            Error::new(ErrorKind::WriteFailure, "formatting failed")
        })),
    }
}
