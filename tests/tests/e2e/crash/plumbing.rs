//! The crash test's plumbing: a raw HTTP client that tells a request never
//! sent from one whose fate is unknown, and a seedable random source.

use std::time::Duration;

use serde_json::Value;

use super::WORDS;

#[derive(Clone)]
pub(super) struct Api {
    http: reqwest::Client,
    base: String,
    auth: String,
}

pub(super) enum Outcome {
    Answered(u16, Value),
    /// The connection was refused: the request never reached the server.
    NotSent,
    /// No (whole) answer: the request may or may not have been carried out.
    Unknown,
}

impl Api {
    pub(super) fn new(base: &str, key: &str) -> Api {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
        Api { http, base: base.to_owned(), auth: format!("Bearer {key}") }
    }

    pub(super) async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Outcome {
        let mut req = self
            .http
            .request(method.parse().unwrap(), format!("{}{path}", self.base))
            .header("authorization", &self.auth);
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) if e.is_connect() => return Outcome::NotSent,
            Err(_) => return Outcome::Unknown,
        };
        let status = resp.status().as_u16();
        match resp.bytes().await {
            Ok(b) if b.is_empty() => Outcome::Answered(status, Value::Null),
            Ok(b) => Outcome::Answered(status, serde_json::from_slice(&b).unwrap_or(Value::Null)),
            Err(_) => Outcome::Unknown,
        }
    }

    /// A read during the checks: the server must answer.
    pub(super) async fn get(&self, path: &str) -> (u16, Value) {
        match self.call("GET", path, None).await {
            Outcome::Answered(status, body) => (status, body),
            _ => panic!("GET {path}: no answer"),
        }
    }

    /// Every item of a collection, oldest first; None if it is 404.
    pub(super) async fn list(&self, path: &str) -> Option<Vec<Value>> {
        let mut all = Vec::new();
        loop {
            let page = format!("{path}?limit=1000&offset={}&direction=asc", all.len());
            let (status, body) = self.get(&page).await;
            match status {
                200 => {}
                404 => return None,
                _ => panic!("GET {page}: {status} {body}"),
            }
            let items = body["items"].as_array().expect("a list answers items").clone();
            let n = items.len();
            all.extend(items);
            if n < 1000 {
                return Some(all);
            }
        }
    }
}

/// SplitMix64: small and seedable, enough to pick operations.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub(super) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    pub(super) fn words(&mut self, n: usize) -> String {
        (0..n).map(|_| *self.pick(&WORDS)).collect::<Vec<_>>().join(" ")
    }
}
