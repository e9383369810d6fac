//! Server-sent event streams as the tests read them, parsed by sse-stream
//! (the parser the client crate uses).

use std::time::{Duration, Instant};

use futures::StreamExt;
use sse_stream::SseByteStream;

/// How long a chat's stream (a few chunks from the fake provider) may take
/// to end before a test fails.
pub const CHAT_STREAM_WITHIN: Duration = Duration::from_secs(30);

/// One event with data: its `event:` name, its `id:`, its `data:` (lines
/// joined), and when it arrived, counted from when the reading began.
#[derive(Debug)]
pub struct SseEvent {
    pub event: Option<String>,
    pub id: Option<String>,
    pub data: String,
    pub at: Duration,
}

impl SseEvent {
    /// The data as JSON (panics, naming it, when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("{e}: {}", self.data))
    }
}

/// Reads `resp` to the end of its stream, calling `on_event` as each event
/// arrives. Blocks without data (comments, keep-alives) are skipped, as is a
/// body that is not a stream (an error's JSON). Panics when the stream has not
/// ended `within` or does not parse.
pub async fn read_events(
    resp: reqwest::Response,
    within: Duration,
    mut on_event: impl FnMut(&SseEvent),
) -> Vec<SseEvent> {
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + within;
    let (status, url) = (resp.status().as_u16(), resp.url().clone());
    let path = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_owned(),
    };
    let mut stream = SseByteStream::new(resp.bytes_stream());
    let mut events = Vec::new();
    while let Some(next) =
        tokio::time::timeout_at(deadline, stream.next()).await.expect("the stream ends in time")
    {
        let sse = next.expect("a well-formed event stream");
        let Some(data) = sse.data else { continue };
        let event = SseEvent { event: sse.event, id: sse.id, data, at: started.elapsed() };
        crate::record::event(&path, status, event.event.as_deref(), &event.data);
        on_event(&event);
        events.push(event);
    }
    events
}
