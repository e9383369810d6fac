//! The keys of an execution's transitions: which step of which list, and
//! which of its moments (its end, a wait, a resume), a transition records.
//!
//! A run replays by key (see [`super::run`]): a step whose key is already
//! committed answers its recorded output. Keys are stored as text in every
//! transition (and a sleeping step's key in its execution's timers), so the
//! text is fixed for good; it is written by [`Display`] and read by
//! [`FromStr`] here only:
//!
//! ```text
//! transition := "init" | "finish" | "error" | "cancelled"
//!             | step                        a step's own transition
//!             | step "#wait" [ "/resume" ]  a wait_for_input's wait, and its resume
//!             | step "#call" n [ "/resume" ] the n-th function tool call it waited for (from 1)
//!             | step "#args" | step "#init" | step "#fin"   a yield's way in and out
//! step       := list "[" i "]"               the i-th step of a list (from 0)
//! list       := "main"
//!             | step ".foreach[" i "]"       the body, for the i-th item
//!             | step ".map" | step ".parallel"   map_reduce's map, parallel's branches (one step each)
//!             | step ".then" | step ".else" | step ".switch[" c "]"
//!             | step ">" workflow            a yielded workflow's steps
//! ```
//!
//! e.g. `main[3].foreach[2][0]`, `main[1]>double[0]#wait/resume`.
//! A workflow's name may hold any character, so a step's key is kept as its
//! text: a parse checks the ends the grammar fixes (`main` first, `[i]`
//! last) and splits off what follows the last `]`.

use std::fmt;
use std::str::FromStr;

/// A list of steps: `main`, a branch, a body, a yielded workflow.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ListKey(String);

/// One step of a list: `main[0]`, `main[2].then[1]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StepKey(String);

/// What a paused step waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pause {
    /// A `wait_for_input` step's input (`#wait`).
    Input,
    /// The result of the n-th function tool call of a `prompt` or `tool_call` step (`#call{n}`, from 1).
    Call(u32),
}

/// A paused step: the key of its `wait`, and with `/resume`, of its `resume`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WaitKey {
    pub step: StepKey,
    pub pause: Pause,
}

/// The key of a transition: unique within its execution.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TransitionKey {
    /// The execution's first transition.
    Init,
    /// The execution's last, when it succeeds.
    Finish,
    /// The execution's last, when it fails.
    Error,
    /// The execution's last, when it is cancelled.
    Cancelled,
    /// A step's output.
    Step(StepKey),
    /// A step waits (`wait`).
    Wait(WaitKey),
    /// A waiting step is resumed (`resume`).
    Resume(WaitKey),
    /// A yield's arguments (`#args`).
    YieldArgs(StepKey),
    /// A yielded workflow starts (`#init`).
    YieldInit(StepKey),
    /// A yielded workflow ends (`#fin`).
    YieldFinish(StepKey),
}

impl ListKey {
    /// The task's `main` workflow.
    pub fn main() -> ListKey {
        ListKey("main".into())
    }

    /// The `i`-th step of this list (from 0).
    pub fn step(&self, i: usize) -> StepKey {
        StepKey(format!("{}[{i}]", self.0))
    }
}

impl StepKey {
    fn sub(&self, suffix: fmt::Arguments) -> ListKey {
        ListKey(format!("{}{suffix}", self.0))
    }

    /// A `foreach`'s body for its `i`-th item.
    pub fn foreach(&self, i: usize) -> ListKey {
        self.sub(format_args!(".foreach[{i}]"))
    }

    /// A `map_reduce`'s map: its `i`-th step is the map of the `i`-th item.
    pub fn map(&self) -> ListKey {
        self.sub(format_args!(".map"))
    }

    /// A `parallel`'s branches: its `i`-th step is the `i`-th branch.
    pub fn parallel(&self) -> ListKey {
        self.sub(format_args!(".parallel"))
    }

    /// An `if`'s `then`.
    pub fn then(&self) -> ListKey {
        self.sub(format_args!(".then"))
    }

    /// An `if`'s `else`.
    pub fn otherwise(&self) -> ListKey {
        self.sub(format_args!(".else"))
    }

    /// A `switch`'s `c`-th case.
    pub fn case(&self, c: usize) -> ListKey {
        self.sub(format_args!(".switch[{c}]"))
    }

    /// The steps of `workflow`, yielded to by this step.
    pub fn yielded(&self, workflow: &str) -> ListKey {
        self.sub(format_args!(">{workflow}"))
    }

    /// This step's wait for `pause`.
    pub fn wait(&self, pause: Pause) -> WaitKey {
        WaitKey { step: self.clone(), pause }
    }

    /// The text of the key, as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ListKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for StepKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for Pause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pause::Input => f.write_str("#wait"),
            Pause::Call(n) => write!(f, "#call{n}"),
        }
    }
}

impl fmt::Display for WaitKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.step, self.pause)
    }
}

impl fmt::Display for TransitionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransitionKey::Init => f.write_str("init"),
            TransitionKey::Finish => f.write_str("finish"),
            TransitionKey::Error => f.write_str("error"),
            TransitionKey::Cancelled => f.write_str("cancelled"),
            TransitionKey::Step(step) => write!(f, "{step}"),
            TransitionKey::Wait(wait) => write!(f, "{wait}"),
            TransitionKey::Resume(wait) => write!(f, "{wait}/resume"),
            TransitionKey::YieldArgs(step) => write!(f, "{step}#args"),
            TransitionKey::YieldInit(step) => write!(f, "{step}#init"),
            TransitionKey::YieldFinish(step) => write!(f, "{step}#fin"),
        }
    }
}

/// A text that is not a key of this grammar.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a transition key (e.g. `main[0]`, `main[1].foreach[0][2]#wait/resume`)")]
pub struct BadKey(String);

impl FromStr for StepKey {
    type Err = BadKey;

    /// A step's key: `main` first, `[i]` last (see the module docs).
    fn from_str(s: &str) -> Result<Self, BadKey> {
        let bad = || BadKey(s.to_owned());
        let list = s.strip_suffix(']').ok_or_else(bad)?;
        let (list, index) = list.rsplit_once('[').ok_or_else(bad)?;
        let digits = !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit());
        let from_main = list == "main" || list.starts_with("main[");
        if !digits || !from_main {
            return Err(bad());
        }
        Ok(StepKey(s.to_owned()))
    }
}

impl FromStr for TransitionKey {
    type Err = BadKey;

    fn from_str(s: &str) -> Result<Self, BadKey> {
        let bad = || BadKey(s.to_owned());
        match s {
            "init" => return Ok(TransitionKey::Init),
            "finish" => return Ok(TransitionKey::Finish),
            "error" => return Ok(TransitionKey::Error),
            "cancelled" => return Ok(TransitionKey::Cancelled),
            _ => {}
        }
        // What follows a step's key holds no `]`, whatever its workflows' names hold.
        let end = s.rfind(']').ok_or_else(bad)? + 1;
        let (step, moment) = s.split_at(end);
        let step: StepKey = step.parse().map_err(|_| bad())?;
        let (moment, resume) = match moment.strip_suffix("/resume") {
            Some(paused) => (paused, true),
            None => (moment, false),
        };
        let call = moment
            .strip_prefix("#call")
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()) && !n.starts_with('0'));
        let pause = match (moment, call.map(str::parse::<u32>)) {
            ("#wait", _) => Some(Pause::Input),
            (_, Some(Ok(n))) => Some(Pause::Call(n)),
            (_, Some(Err(_))) => return Err(bad()),
            (_, None) => None,
        };
        Ok(match (pause, resume) {
            (Some(pause), false) => TransitionKey::Wait(step.wait(pause)),
            (Some(pause), true) => TransitionKey::Resume(step.wait(pause)),
            (None, true) => return Err(bad()),
            (None, false) => match moment {
                "" => TransitionKey::Step(step),
                "#args" => TransitionKey::YieldArgs(step),
                "#init" => TransitionKey::YieldInit(step),
                "#fin" => TransitionKey::YieldFinish(step),
                _ => return Err(bad()),
            },
        })
    }
}

#[cfg(test)]
#[path = "key_tests.rs"]
mod tests;
