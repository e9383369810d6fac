//! Request headers: the `Idempotency-Key` of POSTs.

use schemars::JsonSchema;
use serde::Deserialize;

use crate::validate::Check;

/// The printable ASCII characters (space to `~`): what an `Idempotency-Key` is made of.
pub const IDEMPOTENCY_KEY_PATTERN: &str = r"^[ -~]+$";

/// The headers of a POST: its optional `Idempotency-Key`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct IdempotencyHeader {
    /// Makes retrying this POST safe. A repeat with the same key by the same
    /// tenant within 24 hours is not done again: it answers the first answer
    /// (status and body, with the header `Idempotent-Replayed: true`; a streamed
    /// chat or response, its events as they were sent, up to 1 MiB of them;
    /// a longer one is a 409 saying where the answer was saved); the same
    /// key on another request (another route or body, compared byte for byte)
    /// is a 409; a repeat while the first is still being served waits for its
    /// answer (up to 10 s, then a 409). Only successes are remembered: after a
    /// 4xx or 5xx nothing was written, and a repeat runs again. A client that
    /// got a timeout or a 5xx retries with the same key. 1 to 255 printable
    /// ASCII characters, e.g. a UUID.
    #[serde(rename = "idempotency-key", default)]
    #[schemars(length(min = 1, max = 255), regex(path = "IDEMPOTENCY_KEY_PATTERN"))]
    pub idempotency_key: Option<String>,
}

impl Check for IdempotencyHeader {}
