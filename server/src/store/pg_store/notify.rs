//! Hearing other servers' commits: a commit sends, in its transaction, a
//! notification of what it changed that other servers act on
//! ([`Domain::heard`](crate::store::Domain::heard)); each server listens on one connection of its own and
//! passes what it hears on as [`Change`]s.
//!
//! A notification is a hint, not the truth: it arrives after the commit (a
//! few milliseconds), and none arrives while the listening connection is
//! down. So the listener reconnects by itself (with backoff) and, once it
//! listens again, sends [`Change::Unknown`]: whatever was cached may have
//! changed unheard. What caches keep must also expire or be checked against
//! the store (see the application's caches); notifications only make them
//! fresher sooner.
//!
//! The listening connection is not one of the pool's: it stays open and
//! idle, and is made from the same URL, so a multi-host URL with
//! `target_session_attrs=read-write` reaches the primary (a standby cannot
//! `LISTEN`).

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;
use tokio_postgres::config::SslMode;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{AsyncMessage, Socket};
use uuid::Uuid;

use crate::store::{Change, Kind};

/// The channel every server listens on.
pub(super) const CHANNEL: &str = "agent_platform_changes";

/// PostgreSQL refuses a payload of 8000 bytes or more.
const MAX_PAYLOAD: usize = 7999;

/// The first word of every payload: the encoding's version, so that a server
/// that reads a newer one treats it as [`Change::Unknown`] instead of guessing.
const FORMAT: &str = "c1";

/// How many changes the channel to the application holds for a slow reader;
/// one that falls further behind is told it lagged (and forgets everything).
const BUFFERED_CHANGES: usize = 4096;

/// How often a quiet listening connection is checked (a lost peer is not
/// always noticed by TCP alone), and how long the check may take.
const HEARTBEAT: Duration = Duration::from_secs(5);
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(5);

/// The wait before reconnecting: doubled after each failure, up to the most.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MOST_BACKOFF: Duration = Duration::from_secs(5);

/// The notification payloads (each under PostgreSQL's 8000 bytes) that tell
/// listeners of `changes`, all of tenant `tenant`; several when one would be
/// too long. A commit sends all of them in its transaction, in one statement
/// (`SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`), so a commit of
/// many records costs one round trip. Only the changes another server acts
/// on are sent (`heard`, the domain's): a commit with none sends nothing, and so
/// does not wait for other notifying commits to be flushed before its own.
/// [`Change::Unknown`] is never sent.
///
/// Each payload is `c1 <tenant>` then one word per change:
/// `r<kind>.<id>.<scope>` for a record, `s<kind>.<scope>` for a scope (ids as
/// 32 hex digits, kinds as their number).
pub(super) fn payloads(tenant: Uuid, changes: &[Change], heard: fn(&Change) -> bool) -> Vec<String> {
    let header = format!("{FORMAT} {}", tenant.simple());
    let mut out = Vec::new();
    let mut current = header.clone();
    for change in changes.iter().filter(|c| heard(c)) {
        let word = match change {
            Change::Record { kind, id, scope, .. } => {
                format!(" r{}.{}.{}", *kind as u8, id.simple(), scope.simple())
            }
            Change::Scope { kind, scope, .. } => format!(" s{}.{}", *kind as u8, scope.simple()),
            Change::Unknown => continue,
        };
        if current.len() + word.len() > MAX_PAYLOAD {
            out.push(std::mem::replace(&mut current, header.clone()));
        }
        current.push_str(&word);
    }
    if current.len() > header.len() {
        out.push(current);
    }
    out
}

/// The changes a payload tells of. A payload this server cannot read (from a
/// newer server, or damaged) is [`Change::Unknown`]: forget everything rather
/// than miss a change.
pub(super) fn decode(payload: &str) -> Vec<Change> {
    decode_words(payload).unwrap_or_else(|| vec![Change::Unknown])
}

fn decode_words(payload: &str) -> Option<Vec<Change>> {
    let mut words = payload.split(' ');
    if words.next()? != FORMAT {
        return None;
    }
    let tenant = Uuid::try_parse(words.next()?).ok()?;
    words
        .map(|word| {
            let (tag, rest) = word.split_at_checked(1)?;
            let mut parts = rest.split('.');
            let kind = kind_of(parts.next()?.parse().ok()?)?;
            let first = Uuid::try_parse(parts.next()?).ok()?;
            let change = match tag {
                "r" => {
                    let scope = Uuid::try_parse(parts.next()?).ok()?;
                    Change::Record { tenant, kind, id: first, scope }
                }
                "s" => Change::Scope { tenant, kind, scope: first },
                _ => return None,
            };
            parts.next().is_none().then_some(change)
        })
        .collect()
}

/// The kind of a number (the discriminants of [`Kind`]).
fn kind_of(code: u8) -> Option<Kind> {
    use Kind::*;
    [
        Tenant,
        ApiKey,
        User,
        Agent,
        Session,
        Message,
        Tool,
        Task,
        Doc,
        Idempotency,
        Execution,
        Transition,
        ExecutionTask,
        ActiveExecution,
        ExecutionLease,
        SessionLock,
        Response,
        Secret,
        Run,
        RunLease,
        Block,
        BlockEdit,
        LearningPolicy,
        LearningJob,
    ]
    .into_iter()
    .find(|k| *k as u8 == code)
}

/// The task that listens, and the channel it passes changes on. Dropping it
/// (or [`Listener::stop`]) stops the task and closes its connection.
pub(super) struct Listener {
    /// Taken when listening stops, so that receivers see the channel close.
    sender: std::sync::Mutex<Option<broadcast::Sender<Change>>>,
    task: JoinHandle<()>,
}

impl Listener {
    /// Starts listening on a connection of its own to the database of `pg`
    /// (`target` names it in messages). Returns at once: the connection is
    /// made, and remade whenever it is lost, in the background.
    pub(super) fn start(pg: tokio_postgres::Config, target: String) -> Listener {
        let (sender, _) = broadcast::channel(BUFFERED_CHANGES);
        let task = tokio::spawn(run(pg, target, sender.clone()));
        Listener { sender: std::sync::Mutex::new(Some(sender)), task }
    }

    /// A receiver of the changes heard from now on (closed once stopped).
    pub(super) fn subscribe(&self) -> broadcast::Receiver<Change> {
        match &*self.sender.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(sender) => sender.subscribe(),
            None => broadcast::channel(1).1,
        }
    }

    /// Stops listening: the connection closes, and receivers see the channel closed.
    pub(super) fn stop(&self) {
        self.task.abort();
        self.sender.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Listens, reconnecting with backoff whenever the connection fails or is lost.
async fn run(mut pg: tokio_postgres::Config, target: String, sender: broadcast::Sender<Change>) {
    pg.application_name("agent-platform listener");
    let mut backoff = FIRST_BACKOFF;
    let mut failing = false;
    loop {
        let outcome = match pg.get_ssl_mode() {
            SslMode::Disable => listen(&pg, tokio_postgres::NoTls, &sender).await,
            _ => match super::tls() {
                Ok(tls) => listen(&pg, tls, &sender).await,
                Err(e) => Err(Lost { listened: false, why: e.to_string() }),
            },
        };
        let Err(lost) = outcome;
        if lost.listened {
            backoff = FIRST_BACKOFF;
            failing = false;
        }
        if !failing {
            eprintln!(
                "store: not hearing other servers' changes from the database at {target} ({}); \
                 reconnecting, and caches are flushed once back",
                lost.why
            );
            failing = true;
        }
        let jitter = rand::random_range(0..=backoff.as_millis() as u64 / 4);
        tokio::time::sleep(backoff + Duration::from_millis(jitter)).await;
        backoff = (backoff * 2).min(MOST_BACKOFF);
    }
}

/// Why listening stopped, and whether it had started (which resets the backoff).
struct Lost {
    listened: bool,
    why: String,
}

/// Listens on one connection until it is lost.
async fn listen<T>(
    pg: &tokio_postgres::Config,
    tls: T,
    sender: &broadcast::Sender<Change>,
) -> Result<std::convert::Infallible, Lost>
where
    T: MakeTlsConnect<Socket>,
    T::Stream: Send + 'static,
{
    let not_yet = |why: String| Lost { listened: false, why };
    let (client, mut connection) = pg.connect(tls).await.map_err(|e| not_yet(e.to_string()))?;
    // The connection delivers notifications only while it is polled: a task
    // drives it and hands them over; it ends when the connection does.
    let (heard, mut hearing) = mpsc::unbounded_channel();
    let driver = AbortOnDrop(tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    if heard.send(n).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
    }));
    client.batch_execute(&format!("LISTEN {CHANNEL}")).await.map_err(|e| not_yet(e.to_string()))?;
    // Listening from here on; what committed before is unknown.
    let _ = sender.send(Change::Unknown);
    let lost = |why: &str| Lost { listened: true, why: why.to_owned() };
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    heartbeat.tick().await;
    loop {
        tokio::select! {
            n = hearing.recv() => match n {
                Some(n) if n.channel() == CHANNEL => {
                    for change in decode(n.payload()) {
                        let _ = sender.send(change);
                    }
                    heartbeat.reset();
                }
                Some(_) => {}
                None => {
                    drop(driver);
                    return Err(lost("the connection was closed"));
                }
            },
            _ = heartbeat.tick() => {
                match tokio::time::timeout(HEARTBEAT_TIMEOUT, client.simple_query("")).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return Err(lost(&e.to_string())),
                    Err(_) => return Err(lost("the connection did not answer a check in time")),
                }
            }
        }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The domain's: which changes are told.
    const HEARD: fn(&Change) -> bool = crate::app::records::STORE_DOMAIN.heard;

    fn record(kind: Kind, n: u128) -> Change {
        Change::Record {
            tenant: Uuid::from_u128(9),
            kind,
            id: Uuid::from_u128(n),
            scope: Uuid::from_u128(n + 1),
        }
    }

    #[test]
    fn changes_read_back_as_sent() {
        let tenant = Uuid::from_u128(9);
        let changes = vec![
            record(Kind::ApiKey, 1),
            Change::Scope { tenant, kind: Kind::Message, scope: Uuid::max() },
            record(Kind::SessionLock, 3),
            Change::Unknown,
        ];
        let sent = payloads(tenant, &changes, HEARD);
        assert_eq!(sent.len(), 1);
        assert_eq!(decode(&sent[0]), changes[..3]);
        assert!(payloads(tenant, &[], HEARD).is_empty(), "a commit that changed nothing sends nothing");
        assert!(payloads(tenant, &[Change::Unknown], HEARD).is_empty());
        let unheard = [record(Kind::Agent, 4), record(Kind::Message, 5), record(Kind::Doc, 6)];
        assert!(payloads(tenant, &unheard, HEARD).is_empty(), "no server acts on these: not sent");
    }

    #[test]
    fn many_changes_are_split_under_the_limit() {
        let tenant = Uuid::from_u128(9);
        let changes: Vec<Change> = (0..1000).map(|n| record(Kind::Execution, n)).collect();
        let sent = payloads(tenant, &changes, HEARD);
        assert!(sent.len() > 1);
        assert!(sent.iter().all(|p| p.len() < 8000), "every payload under PostgreSQL's limit");
        let heard: Vec<Change> = sent.iter().flat_map(|p| decode(p)).collect();
        assert_eq!(heard, changes);
    }

    /// Sends `changes` as a commit would.
    async fn notify(store: &super::super::PgStore, tenant: Uuid, changes: &[Change]) {
        let client = store.pool().get().await.unwrap();
        for payload in payloads(tenant, changes, HEARD) {
            client.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &payload]).await.unwrap();
        }
    }

    /// The next change heard other than `Unknown`, within `within`.
    async fn next_known(changes: &mut broadcast::Receiver<Change>, within: Duration) -> Option<Change> {
        tokio::time::timeout(within, async {
            loop {
                match changes.recv().await.unwrap() {
                    Change::Unknown => {}
                    change => return change,
                }
            }
        })
        .await
        .ok()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn changes_are_heard_and_a_lost_connection_says_some_were_missed() {
        use crate::store::Store;
        use crate::store::conformance::TestDb;
        let Some(db) = TestDb::create().await else { return };
        let store = db.store().await;
        let mut changes = store.changes().expect("a shared store tells its changes");
        let tenant = Uuid::from_u128(9);
        let key = record(Kind::ApiKey, 1);
        // The listener connects in the background: send until it hears.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            notify(&store, tenant, std::slice::from_ref(&key)).await;
            if let Some(heard) = next_known(&mut changes, Duration::from_millis(200)).await {
                assert_eq!(heard, key);
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "the listener never heard a notification");
        }

        // The listening connection is cut: once back, it says changes may have been missed.
        let cut = db
            .client()
            .await
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE application_name = 'agent-platform listener' AND datname = current_database()",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(cut, 1, "one listening connection");
        let unknown = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if changes.recv().await.unwrap() == Change::Unknown {
                    return;
                }
            }
        });
        unknown.await.expect("a reconnected listener says changes were missed");
        let scope = Change::Scope { tenant, kind: Kind::Message, scope: Uuid::from_u128(5) };
        notify(&store, tenant, std::slice::from_ref(&scope)).await;
        assert_eq!(next_known(&mut changes, Duration::from_secs(5)).await, Some(scope));

        // Closing the store stops listening.
        store.close();
        let closed = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if let Err(broadcast::error::RecvError::Closed) = changes.recv().await {
                    return;
                }
            }
        });
        closed.await.expect("the channel closes with the store");
        db.drop().await;
    }

    #[test]
    fn a_payload_not_understood_is_unknown() {
        for bad in [
            "",
            "c2 00000000000000000000000000000009",
            "c1 xyz",
            "c1 00000000000000000000000000000009 r99.1.2",
            "c1 00000000000000000000000000000009 q2.00000000000000000000000000000001",
        ] {
            assert_eq!(decode(bad), [Change::Unknown], "{bad:?}");
        }
        assert_eq!(decode("c1 00000000000000000000000000000009"), []);
    }
}
