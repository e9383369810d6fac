//! The trait's rules, each a function of a store, run on both backends.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use super::on_both;
use crate::metadata::metadata_matches;
use crate::store::{Direction, Expect, Kind, ListQuery, Metadata, Op, Record, SortBy, Store, StoreError};

fn tenant() -> Uuid {
    Uuid::now_v7()
}

fn meta(v: Value) -> Option<Metadata> {
    v.as_object().cloned()
}

fn named(kind: Kind, scope: Uuid, name: &str) -> Record {
    let mut r = Record::fresh(kind, scope, json!({ "name": name }));
    r.unique = Some(name.into());
    r
}

async fn insert(s: &dyn Store, t: Uuid, r: &Record) -> Result<(), StoreError> {
    s.commit(t, vec![Op::Put { record: r.clone(), expect: Expect::Absent }]).await
}

async fn replace(s: &dyn Store, t: Uuid, r: &Record, version: u64) -> Result<(), StoreError> {
    s.commit(t, vec![Op::Put { record: r.clone(), expect: Expect::Version(version) }]).await
}

fn assert_same(got: &Record, want: &Record, version: u64) {
    assert_eq!((got.kind, got.id, got.scope), (want.kind, want.id, want.scope));
    assert_eq!((got.created_at, got.updated_at), (want.created_at, want.updated_at));
    assert_eq!(got.version, version);
    assert_eq!(got.unique, want.unique);
    assert_eq!(got.refs, want.refs);
    assert_eq!(got.metadata, want.metadata);
    assert_eq!(got.data, want.data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_reads_back_as_written_whatever_it_holds() {
    on_both(async |s: &dyn Store| {
        let t = tenant();
        let mut r = Record::fresh(
            Kind::Agent,
            t,
            json!({"text": "nul \u{0} and ünïcödé ✓", "n": [1, 1.0, 2.5, -0.0, 1e300, 18446744073709551615u64],
                   "deep": {"b": null, "a": [true, {"x": "\u{0}"}]}}),
        );
        r.unique = Some(format!("odd \u{0} name {}", "long".repeat(4000)));
        r.refs = vec![Uuid::now_v7(), Uuid::now_v7()];
        r.metadata = meta(json!({"key \u{0}": "value \u{0}", "n": 1.5}));
        insert(s, t, &r).await.unwrap();
        assert_same(&s.get(t, Kind::Agent, r.id).await.unwrap().unwrap(), &r, 0);
        assert_eq!(s.lookup_unique(t, Kind::Agent, t, r.unique.as_ref().unwrap()).await.unwrap(), Some(r.id));
        assert_eq!(s.lookup_unique(t, Kind::Agent, t, "odd").await.unwrap(), None);
        assert!(s.get(tenant(), Kind::Agent, r.id).await.unwrap().is_none(), "another tenant's record");
        assert!(s.get(t, Kind::Tool, r.id).await.unwrap().is_none(), "another kind's record");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn puts_keep_their_preconditions() {
    on_both(async |s: &dyn Store| {
        let t = tenant();
        let mut a = named(Kind::Tool, t, "a");
        insert(s, t, &a).await.unwrap();
        assert!(matches!(insert(s, t, &a).await, Err(StoreError::IdTaken { kind: Kind::Tool, id }) if id == a.id));
        a.data = json!({"name": "a", "v": 2});
        replace(s, t, &a, 0).await.unwrap();
        assert_same(&s.get(t, Kind::Tool, a.id).await.unwrap().unwrap(), &a, 1);
        assert!(matches!(replace(s, t, &a, 0).await, Err(StoreError::Stale)));
        let missing = named(Kind::Tool, t, "missing");
        assert!(
            matches!(replace(s, t, &missing, 0).await, Err(StoreError::NotFound { kind: Kind::Tool, id }) if id == missing.id)
        );

        // Unique names: per kind, scope and tenant.
        let b = named(Kind::Tool, t, "a");
        assert!(
            matches!(insert(s, t, &b).await, Err(StoreError::Duplicate { kind: Kind::Tool, ref name }) if name == "a")
        );
        insert(s, t, &named(Kind::Tool, Uuid::now_v7(), "a")).await.unwrap();
        insert(s, t, &named(Kind::Task, t, "a")).await.unwrap();
        let other = tenant();
        insert(s, other, &named(Kind::Tool, t, "a")).await.unwrap();
        // A replace may keep its own name, and renaming frees the old one.
        replace(s, t, &a, 1).await.unwrap();
        a.unique = Some("a2".into());
        replace(s, t, &a, 2).await.unwrap();
        assert_eq!(s.lookup_unique(t, Kind::Tool, t, "a").await.unwrap(), None);
        insert(s, t, &b).await.unwrap();
        a.unique = Some("a".into());
        assert!(matches!(replace(s, t, &a, 3).await, Err(StoreError::Duplicate { .. })));
        assert_eq!(s.lookup_unique(t, Kind::Tool, t, "a").await.unwrap(), Some(b.id));
        assert_eq!(s.lookup_unique(t, Kind::Tool, t, "a2").await.unwrap(), Some(a.id));

        // Insert then replace in one commit.
        let c = named(Kind::Tool, t, "c");
        let ops = vec![
            Op::Put { record: c.clone(), expect: Expect::Absent },
            Op::Put { record: c.clone(), expect: Expect::Version(0) },
        ];
        s.commit(t, ops).await.unwrap();
        assert_eq!(s.get(t, Kind::Tool, c.id).await.unwrap().unwrap().version, 1);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_requires_and_touches_keep_their_preconditions() {
    on_both(async |s: &dyn Store| {
        let t = tenant();
        let a = named(Kind::Agent, t, "a");
        insert(s, t, &a).await.unwrap();
        let del = |version| vec![Op::Delete { kind: Kind::Agent, id: a.id, version }];
        assert!(matches!(s.commit(t, del(Some(3))).await, Err(StoreError::Stale)));
        let missing = Uuid::now_v7();
        let ops = vec![Op::Delete { kind: Kind::Agent, id: missing, version: None }];
        assert!(matches!(s.commit(t, ops).await, Err(StoreError::NotFound { id, .. }) if id == missing));
        let ops = vec![Op::Delete { kind: Kind::Agent, id: missing, version: Some(0) }];
        assert!(matches!(s.commit(t, ops).await, Err(StoreError::NotFound { .. })));

        let require = |id| vec![Op::Require { kind: Kind::Agent, id }];
        s.commit(t, require(a.id)).await.unwrap();
        assert!(matches!(s.commit(t, require(missing)).await, Err(StoreError::NotFound { .. })));
        assert!(matches!(s.commit(tenant(), require(a.id)).await, Err(StoreError::NotFound { .. })));

        let touch = |id| vec![Op::Touch { kind: Kind::Agent, id }];
        s.commit(t, touch(a.id)).await.unwrap();
        s.commit(t, touch(a.id)).await.unwrap();
        assert_same(&s.get(t, Kind::Agent, a.id).await.unwrap().unwrap(), &a, 2);
        assert!(matches!(s.commit(t, touch(missing)).await, Err(StoreError::NotFound { .. })));
        assert!(matches!(replace(s, t, &a, 1).await, Err(StoreError::Stale)), "a touch bumps the version");

        s.commit(t, del(Some(2))).await.unwrap();
        assert!(s.get(t, Kind::Agent, a.id).await.unwrap().is_none());
        assert_eq!(s.lookup_unique(t, Kind::Agent, t, "a").await.unwrap(), None);
        insert(s, t, &named(Kind::Agent, t, "a")).await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_fails_leaves_nothing() {
    on_both(async |s: &dyn Store| {
        let t = tenant();
        let a = named(Kind::Agent, t, "a");
        insert(s, t, &a).await.unwrap();
        let fresh = named(Kind::Agent, t, "fresh");
        let failing = [
            Op::Require { kind: Kind::Agent, id: Uuid::now_v7() },
            Op::Put { record: named(Kind::Agent, t, "fresh"), expect: Expect::Absent },
            Op::Put { record: a.clone(), expect: Expect::Version(7) },
            Op::Touch { kind: Kind::Agent, id: Uuid::now_v7() },
            Op::Delete { kind: Kind::Agent, id: Uuid::now_v7(), version: None },
        ];
        for last in failing {
            let ops = vec![
                Op::Put { record: fresh.clone(), expect: Expect::Absent },
                Op::Touch { kind: Kind::Agent, id: a.id },
                Op::Delete { kind: Kind::Agent, id: a.id, version: Some(1) },
                Op::DeleteScope { kind: Kind::Tool, scope: a.id },
                last,
            ];
            assert!(s.commit(t, ops).await.is_err());
            assert!(s.get(t, Kind::Agent, fresh.id).await.unwrap().is_none());
            assert_same(&s.get(t, Kind::Agent, a.id).await.unwrap().unwrap(), &a, 0);
            assert_eq!(s.lookup_unique(t, Kind::Agent, t, "fresh").await.unwrap(), None);
        }

        // Commits of inserts and requires only (PostgreSQL sends their
        // statements at once): each failure is the commit's, wherever it is.
        let missing = Uuid::now_v7();
        let cases = [
            (Op::Require { kind: Kind::Agent, id: missing }, "not found"),
            (Op::Put { record: named(Kind::Agent, t, "a"), expect: Expect::Absent }, "duplicate"),
            (Op::Put { record: a.clone(), expect: Expect::Absent }, "id taken"),
        ];
        for (failing, want) in cases {
            for at in 0..3 {
                let mut ops = vec![
                    Op::Require { kind: Kind::Agent, id: a.id },
                    Op::Put { record: fresh.clone(), expect: Expect::Absent },
                ];
                ops.insert(at, failing.clone());
                let got = s.commit(t, ops).await;
                let matched = match (&got, want) {
                    (Err(StoreError::NotFound { id, .. }), "not found") => *id == missing,
                    (Err(StoreError::Duplicate { name, .. }), "duplicate") => name == "a",
                    (Err(StoreError::IdTaken { id, .. }), "id taken") => *id == a.id,
                    _ => false,
                };
                assert!(matched, "{want} at {at}: {got:?}");
                assert!(s.get(t, Kind::Agent, fresh.id).await.unwrap().is_none());
            }
        }
        let child = named(Kind::Tool, a.id, "child");
        let ops = vec![
            Op::Require { kind: Kind::Agent, id: a.id },
            Op::Put { record: child.clone(), expect: Expect::Absent },
            Op::Put { record: fresh.clone(), expect: Expect::Absent },
        ];
        s.commit(t, ops).await.unwrap();
        assert_same(&s.get(t, Kind::Tool, child.id).await.unwrap().unwrap(), &child, 0);
        assert_same(&s.get(t, Kind::Agent, fresh.id).await.unwrap().unwrap(), &fresh, 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_scope_is_gone_for_every_read() {
    on_both(async |s: &dyn Store| {
        let t = tenant();
        let (scope, kept_scope) = (Uuid::now_v7(), Uuid::now_v7());
        let messages: Vec<Record> =
            (0..5).map(|i| Record::fresh(Kind::Message, scope, json!({ "i": i }))).collect();
        for m in &messages {
            insert(s, t, m).await.unwrap();
        }
        let kept = Record::fresh(Kind::Message, kept_scope, json!({}));
        let tool = Record::fresh(Kind::Tool, scope, json!({}));
        insert(s, t, &kept).await.unwrap();
        insert(s, t, &tool).await.unwrap();
        let late = Record::fresh(Kind::Message, scope, json!({ "late": true }));
        let ops = vec![
            // Ops before and after a scope's delete still see its records...
            Op::Touch { kind: Kind::Message, id: messages[0].id },
            Op::DeleteScope { kind: Kind::Message, scope },
            Op::Delete { kind: Kind::Message, id: messages[1].id, version: None },
            Op::Require { kind: Kind::Message, id: messages[2].id },
            // ...and what the commit puts in the scope goes with it.
            Op::Put { record: late.clone(), expect: Expect::Absent },
            Op::DeleteScope { kind: Kind::Message, scope },
        ];
        s.commit(t, ops).await.unwrap();
        let all = ListQuery::oldest_first(0, 100);
        assert!(s.list(t, Kind::Message, scope, &all).await.unwrap().is_empty());
        for m in messages.iter().chain([&late]) {
            assert!(s.get(t, Kind::Message, m.id).await.unwrap().is_none());
        }
        assert_eq!(s.list(t, Kind::Message, kept_scope, &all).await.unwrap().len(), 1);
        assert!(s.get(t, Kind::Tool, tool.id).await.unwrap().is_some(), "another kind in the scope stays");
    })
    .await;
}

/// Records at chosen times: several share a creation time (then the id
/// decides), and update times run the other way.
fn timed(kind: Kind, scope: Uuid, n: usize) -> Vec<Record> {
    let base = DateTime::<Utc>::from_timestamp_micros(1_700_000_000_000_000).unwrap();
    (0..n)
        .map(|i| {
            let mut r = Record::new(kind, Uuid::now_v7(), scope, json!({ "i": i }));
            r.created_at = base + chrono::Duration::microseconds((i / 3) as i64);
            r.updated_at = base + chrono::Duration::microseconds(((n - i) * 7) as i64);
            r
        })
        .collect()
}

fn ids(records: &[Record]) -> Vec<Uuid> {
    records.iter().map(|r| r.id).collect()
}

/// `records` in the order a query asks for.
fn ordered(records: &[Record], sort_by: SortBy, direction: Direction) -> Vec<Record> {
    let mut sorted = records.to_vec();
    sorted.sort_by_key(|r| {
        (
            match sort_by {
                SortBy::CreatedAt => r.created_at,
                SortBy::UpdatedAt => r.updated_at,
            },
            r.id,
        )
    });
    if direction == Direction::Desc {
        sorted.reverse();
    }
    sorted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_page_in_every_order() {
    on_both(async |s: &dyn Store| {
        let t = tenant();
        let scope = Uuid::now_v7();
        let records = timed(Kind::Session, scope, 25);
        for r in &records {
            insert(s, t, r).await.unwrap();
        }
        insert(s, t, &Record::fresh(Kind::Session, Uuid::now_v7(), json!({}))).await.unwrap();
        for sort_by in [SortBy::CreatedAt, SortBy::UpdatedAt] {
            for direction in [Direction::Asc, Direction::Desc] {
                let want = ids(&ordered(&records, sort_by, direction));
                for (offset, limit) in
                    [(0, 100), (0, 1), (3, 5), (20, 10), (25, 1), (usize::MAX, 5), (2, usize::MAX)]
                {
                    let q = ListQuery { limit, offset, sort_by, direction, ..Default::default() };
                    let got = ids(&s.list(t, Kind::Session, scope, &q).await.unwrap());
                    let expected: Vec<Uuid> = want.iter().skip(offset).take(limit).copied().collect();
                    assert_eq!(got, expected, "{sort_by:?} {direction:?} offset {offset} limit {limit}");
                }
                let q = ListQuery { limit: 0, sort_by, direction, ..Default::default() };
                assert!(s.list(t, Kind::Session, scope, &q).await.unwrap().is_empty());
            }
        }
        assert!(
            s.list(tenant(), Kind::Session, scope, &ListQuery::oldest_first(0, 10)).await.unwrap().is_empty()
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_stops_past_max_bytes_but_always_has_one_record() {
    on_both(async |s: &dyn Store| {
        let (t, scope) = (tenant(), Uuid::nil());
        for i in 0..3 {
            let r = Record::fresh(
                Kind::Agent,
                scope,
                json!({"name": format!("a{i}"), "about": "x".repeat(1000)}),
            );
            insert(s, t, &r).await.unwrap();
        }
        let page = async |offset, max_bytes| {
            let q = ListQuery { limit: 100, offset, max_bytes, ..Default::default() };
            s.list(t, Kind::Agent, scope, &q).await.unwrap().len()
        };
        assert_eq!(page(0, None).await, 3);
        assert_eq!(page(0, Some(1)).await, 1, "a page always has one record");
        assert_eq!(page(0, Some(3000)).await, 2, "two records of ~1.3 KB fit 3,000 bytes, three do not");
        assert_eq!(page(0, Some(1 << 20)).await, 3);
        assert_eq!(page(1, Some(3000)).await, 2);
        assert_eq!(page(2, Some(1)).await, 1);
        let q = ListQuery {
            limit: 100,
            max_bytes: Some(3000),
            metadata_filter: meta(json!({"none": 1})),
            ..Default::default()
        };
        assert!(s.list(t, Kind::Agent, scope, &q).await.unwrap().is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_filters_match_as_the_filter_module_says() {
    on_both(async |s: &dyn Store| {
        let (t, scope) = (tenant(), Uuid::now_v7());
        let stored = [
            json!({"n": 1}),
            json!({"n": 1.0}),
            json!({"n": 1152921504606846976.0_f64}),
            json!({"n": 1152921504606846976_i64}),
            json!({"n": 2.5}),
            json!({"tags": ["a", "b"]}),
            json!({"tags": ["a"]}),
            json!({"s": "x\u{0}y", "n": 1}),
            json!(null),
            json!({"n": 1, "k": "v"}),
            json!({"o": {"a": 1, "b": 2}}),
            json!({}),
        ];
        let mut records = Vec::new();
        for m in &stored {
            let mut r = Record::fresh(Kind::Doc, scope, json!({}));
            r.metadata = meta(m.clone());
            insert(s, t, &r).await.unwrap();
            records.push(r);
        }
        let filters = [
            json!({"n": 1}),
            json!({"n": 1.0}),
            json!({"n": 1152921504606846976_i64}),
            json!({"n": 2.5}),
            json!({"n": 2}),
            json!({"tags": ["a"]}),
            json!({"tags": ["b", "a"]}),
            json!({"s": "x\u{0}y"}),
            json!({"s": "x\u{0}y", "n": 1.0}),
            json!({"o": {"a": 1}}),
            json!({"o": {"b": 2.0, "a": 1}}),
            json!({"k": "v", "n": 1}),
            json!({"missing": null}),
        ];
        for f in filters {
            let filter = meta(f.clone()).unwrap();
            let want: Vec<Uuid> = records
                .iter()
                .filter(|r| metadata_matches(&filter, r.metadata.as_ref()))
                .map(|r| r.id)
                .collect();
            for direction in [Direction::Asc, Direction::Desc] {
                let q = ListQuery {
                    limit: 100,
                    direction,
                    sort_by: SortBy::CreatedAt,
                    metadata_filter: Some(filter.clone()),
                    ..Default::default()
                };
                let mut got = ids(&s.list(t, Kind::Doc, scope, &q).await.unwrap());
                if direction == Direction::Desc {
                    got.reverse();
                }
                assert_eq!(got, want, "filter {f}");
            }
        }
        assert_eq!(
            ids(&s.list(t, Kind::Doc, scope, &ListQuery { limit: 3, ..Default::default() }).await.unwrap())
                .len(),
            3
        );
        let q = ListQuery { limit: 100, metadata_filter: Some(Metadata::new()), ..Default::default() };
        assert_eq!(s.list(t, Kind::Doc, scope, &q).await.unwrap().len(), records.len(), "an empty filter");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_continue_after_a_cursor_in_every_order() {
    on_both(async |s: &dyn Store| {
        let (t, scope) = (tenant(), Uuid::now_v7());
        // Times shared by three records each: the id decides among them.
        let mut records = timed(Kind::Message, scope, 30);
        let mut ops = Vec::new();
        for (i, r) in records.iter_mut().enumerate() {
            r.metadata = meta(json!({ "even": i % 2 == 0 }));
            ops.push(Op::Put { record: r.clone(), expect: Expect::Absent });
        }
        s.commit(t, ops).await.unwrap();
        // A record of another scope and another tenant around the same times.
        let mut stray = timed(Kind::Message, Uuid::now_v7(), 30);
        s.commit(t, vec![Op::Put { record: stray.remove(7), expect: Expect::Absent }]).await.unwrap();
        insert(s, tenant(), &timed(Kind::Message, scope, 30)[12]).await.unwrap();
        let even = meta(json!({"even": true})).unwrap();
        for sort_by in [SortBy::CreatedAt, SortBy::UpdatedAt] {
            for direction in [Direction::Asc, Direction::Desc] {
                let sorted = ordered(&records, sort_by, direction);
                for filter in [None, Some(even.clone())] {
                    let want: Vec<Uuid> = sorted
                        .iter()
                        .filter(|r| filter.as_ref().is_none_or(|f| metadata_matches(f, r.metadata.as_ref())))
                        .map(|r| r.id)
                        .collect();
                    for (at, offset, limit) in [(0, 0, 100), (4, 0, 5), (10, 2, 3), (28, 0, 10), (29, 0, 10)]
                    {
                        let base = ListQuery { limit, offset, sort_by, direction, ..Default::default() };
                        for max_bytes in [None, Some(1 << 20)] {
                            let q = ListQuery { metadata_filter: filter.clone(), max_bytes, ..base.clone() }
                                .after_record(&sorted[at]);
                            let got = ids(&s.list(t, Kind::Message, scope, &q).await.unwrap());
                            let after: Vec<Uuid> = sorted[at + 1..].iter().map(|r| r.id).collect();
                            let expected: Vec<Uuid> = want
                                .iter()
                                .filter(|id| after.contains(id))
                                .skip(offset)
                                .take(limit)
                                .copied()
                                .collect();
                            assert_eq!(
                                got, expected,
                                "{sort_by:?} {direction:?} after #{at} offset {offset} limit {limit} \
                                 filter {filter:?} max_bytes {max_bytes:?}"
                            );
                        }
                    }
                }
                // Paging by cursor alone reads the whole scope once, in order.
                let mut seen = Vec::new();
                let mut q = ListQuery { limit: 7, sort_by, direction, ..Default::default() };
                loop {
                    let page = s.list(t, Kind::Message, scope, &q).await.unwrap();
                    let Some(last) = page.last() else { break };
                    q = q.clone().after_record(last);
                    seen.extend(ids(&page));
                }
                assert_eq!(seen, ids(&sorted), "{sort_by:?} {direction:?} paged by cursor");
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filtered_pages_skip_and_stop_in_order_across_many_records() {
    on_both(async |s: &dyn Store| {
        let (t, scope) = (tenant(), Uuid::now_v7());
        let mut records = timed(Kind::Message, scope, 600);
        let mut ops = Vec::new();
        for (i, r) in records.iter_mut().enumerate() {
            r.metadata = meta(json!({ "third": i % 3 == 0, "i": i }));
            ops.push(Op::Put { record: r.clone(), expect: Expect::Absent });
        }
        s.commit(t, ops).await.unwrap();
        let filter = meta(json!({"third": true})).unwrap();
        for sort_by in [SortBy::CreatedAt, SortBy::UpdatedAt] {
            for direction in [Direction::Asc, Direction::Desc] {
                let want: Vec<Uuid> = ordered(&records, sort_by, direction)
                    .into_iter()
                    .filter(|r| metadata_matches(&filter, r.metadata.as_ref()))
                    .map(|r| r.id)
                    .collect();
                for (offset, limit) in [(0, 1000), (40, 30), (150, 100), (199, 5), (200, 5), (0, 1)] {
                    let q = ListQuery {
                        limit,
                        offset,
                        sort_by,
                        direction,
                        metadata_filter: Some(filter.clone()),
                        ..Default::default()
                    };
                    let got = ids(&s.list(t, Kind::Message, scope, &q).await.unwrap());
                    let expected: Vec<Uuid> = want.iter().skip(offset).take(limit).copied().collect();
                    assert_eq!(got, expected, "{sort_by:?} {direction:?} offset {offset} limit {limit}");
                }
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn references_and_scans_find_what_they_name() {
    on_both(async |s: &dyn Store| {
        let (t, other) = (tenant(), tenant());
        let (agent, user) = (Uuid::now_v7(), Uuid::now_v7());
        let mut both = Record::fresh(Kind::Session, t, json!({}));
        both.refs = vec![agent, user];
        let mut one = Record::fresh(Kind::Session, t, json!({}));
        one.refs = vec![agent];
        let mut elsewhere = Record::fresh(Kind::Session, other, json!({}));
        elsewhere.refs = vec![agent];
        insert(s, t, &both).await.unwrap();
        insert(s, t, &one).await.unwrap();
        insert(s, other, &elsewhere).await.unwrap();
        let mut want = vec![both.id, one.id];
        want.sort();
        assert_eq!(s.referencing(t, Kind::Session, agent).await.unwrap(), want);
        assert_eq!(s.referencing(t, Kind::Session, user).await.unwrap(), vec![both.id]);
        assert_eq!(s.referencing(t, Kind::Agent, agent).await.unwrap(), Vec::<Uuid>::new());
        assert_eq!(s.referencing(other, Kind::Session, agent).await.unwrap(), vec![elsewhere.id]);
        // Replacing drops old references.
        one.refs = vec![user];
        replace(s, t, &one, 0).await.unwrap();
        assert_eq!(s.referencing(t, Kind::Session, agent).await.unwrap(), vec![both.id]);

        let mut scanned: Vec<(Uuid, Uuid)> =
            s.scan_kind(Kind::Session).await.unwrap().into_iter().map(|(t, r)| (t, r.id)).collect();
        scanned.sort();
        let mut want = vec![(t, both.id), (t, one.id), (other, elsewhere.id)];
        want.sort();
        assert_eq!(scanned, want);
        assert!(s.scan_kind(Kind::Task).await.unwrap().is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_two_commits_racing_on_one_version_one_is_stale() {
    on_both(async |s: &dyn Store| {
        let t = tenant();
        let mut r = named(Kind::Agent, t, "raced");
        insert(s, t, &r).await.unwrap();
        for round in 0..20u64 {
            r.data = json!({ "round": round });
            let (x, y) = tokio::join!(replace(s, t, &r, round), replace(s, t, &r, round));
            assert!(
                matches!((&x, &y), (Ok(()), Err(StoreError::Stale)) | (Err(StoreError::Stale), Ok(()))),
                "round {round}: {x:?} {y:?}"
            );
            // And of two inserts of one name, one is a duplicate.
            let (a, b) =
                (named(Kind::Tool, t, &format!("n{round}")), named(Kind::Tool, t, &format!("n{round}")));
            let (x, y) = tokio::join!(insert(s, t, &a), insert(s, t, &b));
            assert!(
                matches!(
                    (&x, &y),
                    (Ok(()), Err(StoreError::Duplicate { .. })) | (Err(StoreError::Duplicate { .. }), Ok(()))
                ),
                "round {round}: {x:?} {y:?}"
            );
        }
        assert_eq!(s.get(t, Kind::Agent, r.id).await.unwrap().unwrap().version, 20);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_reads_every_record_of_a_kind_across_tenants() {
    on_both(async |s: &dyn Store| {
        let mut want = Vec::new();
        for n in [1, 1200, 901] {
            let t = tenant();
            let records: Vec<Record> = (0..n).map(|_| Record::fresh(Kind::Task, t, json!({}))).collect();
            want.extend(records.iter().map(|r| (t, r.id)));
            let ops = records.into_iter().map(|record| Op::Put { record, expect: Expect::Absent }).collect();
            s.commit(t, ops).await.unwrap();
            s.commit(
                t,
                vec![Op::Put { record: Record::fresh(Kind::Tool, t, json!({})), expect: Expect::Absent }],
            )
            .await
            .unwrap();
        }
        want.sort();
        let mut got: Vec<(Uuid, Uuid)> =
            s.scan_kind(Kind::Task).await.unwrap().into_iter().map(|(t, r)| (t, r.id)).collect();
        got.sort();
        assert_eq!(got.len(), want.len());
        assert!(got == want);
    })
    .await;
}
