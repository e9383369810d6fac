//! One model turn: what session chat, `/v1/chat/completions`,
//! `/v1/responses` and a task's `prompt` step have in common.
//!
//! A turn is three parts, each written once:
//!
//! 1. **Plan** ([`plan`]): an [`Ask`] (agent or none, session or none, the
//!    model asked for, the request's settings, the tools on offer, recall,
//!    the system message, the history, the new messages) becomes a [`Plan`]:
//!    the provider, the request to send (settings merged under the agent's
//!    defaults, the recalled docs in the system message, the history fitted to
//!    the session's token budget) and the docs recalled.
//! 2. **Drive** ([`drive`]): a [`Driver`] owns the provider's answer, streamed
//!    or whole: the accumulator, the first chunk's id and model, and the usage
//!    counted when the provider reports none. A [`Shape`] turns the provider's
//!    chunks into a route's items (a session chunk, a chat-completion chunk, a
//!    Responses event) and saves at the end; [`drive::stream`] is the one state
//!    machine that runs a shape. A whole answer is collected by the same
//!    driver ([`Driver::collect`]), so its usage, id and model are the ones a
//!    stream ends with.
//! 3. **Save** ([`save`]): [`App::save_turn`](super::App::save_turn) commits
//!    the new messages and the reply (ids chosen in advance where the answer
//!    names them first), extra records (a response), the release of the
//!    session's lease and the request's answer for its `Idempotency-Key`, in
//!    one commit; then the session's cached history follows.
//!
//! The routes' own modules hold only what differs: `super::chat` (session
//! chat), `super::completions`, `super::responses` and a task's prompt step
//! (`server/src/exec/prompt.rs`).

pub mod convert;
pub mod drive;
pub mod plan;
pub mod rounds;
pub mod save;
pub mod tools;

pub use self::drive::{Answered, Driver, Shape};
pub use self::plan::{Ask, Plan, SystemFor};
pub use self::save::Saving;
