//! Driving a turn: the provider's answer, streamed or whole, into a route's items.
//!
//! A [`Driver`] reads the provider: chunk by chunk from its stream, folding
//! each into an accumulator and keeping the first chunk's id and model, or
//! one whole answer. [`Driver::finish`] ends either as an [`Answered`]: the
//! answer, its usage (the provider's, else counted), id and model.
//!
//! [`stream`] runs a [`Shape`] over a driver: the items a route sends for
//! each chunk, then, once the provider is done, what the shape's
//! [`Shape::end`] saves and sends last. A failure (the provider's, or the
//! save's) is the stream's last item. Dropping the stream (a client that
//! went away) drops the provider's stream, which aborts its request, and
//! whatever the shape holds (the session's lock): nothing is saved.

use std::collections::VecDeque;

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};

use super::super::{Error, Result};
use super::convert::usage_or_count;
use crate::api::types::ChatUsage;
use crate::models::provider::CompletionStream as UpstreamStream;
use crate::models::{ChunkAccumulator, wire};

/// The provider's answer to a turn, as it comes.
pub struct Driver {
    source: Source,
    acc: ChunkAccumulator,
    /// The provider's id and model for the answer, from its first chunk.
    id: String,
    model: String,
}

enum Source {
    Stream(UpstreamStream),
    Whole(Option<wire::CompletionResponse>),
}

/// A turn's answer, once the provider is done.
pub struct Answered {
    pub answer: wire::CompletionResponse,
    /// The provider's, or counted when it reported none.
    pub usage: ChatUsage,
    /// The provider's id and model (empty when it sent none).
    pub id: String,
    pub model: String,
}

impl Answered {
    /// The answer's model, or the one asked for when the provider named none.
    pub fn model_or(&self, request: &wire::CompletionRequest) -> String {
        if self.model.is_empty() { request.model.clone() } else { self.model.clone() }
    }
}

impl Driver {
    /// Over the provider's stream.
    pub fn streamed(upstream: UpstreamStream) -> Driver {
        Driver::with(Source::Stream(upstream))
    }

    /// Over the provider's whole answer.
    pub fn whole(answer: wire::CompletionResponse) -> Driver {
        Driver::with(Source::Whole(Some(answer)))
    }

    fn with(source: Source) -> Driver {
        Driver { source, acc: ChunkAccumulator::new(), id: String::new(), model: String::new() }
    }

    /// The provider's id and model for the answer (empty before its first chunk, or when it sent none).
    pub fn first(&self) -> (&str, &str) {
        (&self.id, &self.model)
    }

    /// The provider's next chunk (folded in); `None` once it is done. A whole answer has none.
    pub async fn next(&mut self) -> Option<Result<wire::CompletionChunk>> {
        let Source::Stream(upstream) = &mut self.source else { return None };
        let chunk = match upstream.next().await? {
            Ok(chunk) => chunk,
            Err(e) => return Some(Err(e.into())),
        };
        self.acc.push(&chunk);
        if self.id.is_empty() {
            self.id.clone_from(&chunk.id);
            self.model.clone_from(&chunk.model);
        }
        Some(Ok(chunk))
    }

    /// The answer, once [`Driver::next`] gave `None`; `request` is what the
    /// provider was sent (its tokens are counted when the provider reported none).
    pub fn finish(&mut self, request: &wire::CompletionRequest) -> Answered {
        match &mut self.source {
            Source::Whole(answer) => {
                let answer = answer.take().unwrap_or_default();
                let usage = usage_or_count(request, answer.usage, &answer.text());
                let (id, model) = (answer.id.clone(), answer.model.clone());
                Answered { answer, usage, id, model }
            }
            Source::Stream(_) => {
                let acc = std::mem::take(&mut self.acc);
                let usage = usage_or_count(request, acc.usage(), acc.content());
                Answered {
                    answer: acc.finish(),
                    usage,
                    id: std::mem::take(&mut self.id),
                    model: std::mem::take(&mut self.model),
                }
            }
        }
    }

    /// The whole answer: every chunk read, then [`Driver::finish`].
    pub async fn collect(mut self, request: &wire::CompletionRequest) -> Result<Answered> {
        while let Some(chunk) = self.next().await {
            chunk?;
        }
        Ok(self.finish(request))
    }
}

/// What a route makes of a turn's answer.
pub trait Shape: Send + 'static {
    /// What the route's stream yields (a failure is one of them, and the last).
    type Item: Send + 'static;
    /// The request the provider was sent.
    fn request(&self) -> &wire::CompletionRequest;
    /// The items to send for one of the provider's chunks (none to pass it over).
    /// `first`: the provider's id and model for the answer ([`Driver::first`]).
    fn chunk(&mut self, chunk: wire::CompletionChunk, first: (&str, &str), out: &mut VecDeque<Self::Item>);
    /// Once the provider is done: saves the turn and gives the last items;
    /// or, when the model is to be asked again (the agent loop: see
    /// [`super::rounds`]), gives the items to send before its next stream.
    fn end(&mut self, answered: Answered) -> BoxFuture<'_, Result<End<Self::Item>>>;
    /// The item that ends a stream that failed.
    fn failure(&mut self, error: Error) -> Self::Item;
}

/// What [`Shape::end`] leads to.
pub enum End<T> {
    /// The stream ends after these items.
    Done(Vec<T>),
    /// These items, then the provider's next stream.
    Again(UpstreamStream, Vec<T>),
}

/// The items of a streamed turn, in order; it ends after the shape's last
/// items, or with one failure.
pub type Items<T> = std::pin::Pin<Box<dyn Stream<Item = T> + Send>>;

/// Runs `shape` over the provider's stream, after `head` (items sent before the first chunk).
pub fn stream<S: Shape>(upstream: UpstreamStream, shape: S, head: Vec<S::Item>) -> Items<S::Item> {
    let streaming = Streaming { driver: Driver::streamed(upstream), shape, queue: head.into(), done: false };
    Box::pin(futures::stream::unfold(streaming, |mut streaming| async move {
        let item = streaming.next().await?;
        Some((item, streaming))
    }))
}

/// A stream under way.
struct Streaming<S: Shape> {
    driver: Driver,
    shape: S,
    queue: VecDeque<S::Item>,
    done: bool,
}

impl<S: Shape> Streaming<S> {
    async fn next(&mut self) -> Option<S::Item> {
        loop {
            if let Some(item) = self.queue.pop_front() {
                return Some(item);
            }
            if self.done {
                return None;
            }
            match self.driver.next().await {
                Some(Ok(chunk)) => self.shape.chunk(chunk, self.driver.first(), &mut self.queue),
                Some(Err(e)) => {
                    self.done = true;
                    return Some(self.shape.failure(e));
                }
                None => {
                    self.done = true;
                    let answered = self.driver.finish(self.shape.request());
                    match self.shape.end(answered).await {
                        Ok(End::Done(last)) => self.queue.extend(last),
                        Ok(End::Again(upstream, items)) => {
                            self.queue.extend(items);
                            self.driver = Driver::streamed(upstream);
                            self.done = false;
                        }
                        Err(e) => return Some(self.shape.failure(e)),
                    }
                }
            }
        }
    }
}
