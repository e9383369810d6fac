//! agent-platform: a self-hostable backend for AI agents over HTTP/JSON.
//!
//! Layers, outermost first: [`api`] (the contract: Dropshot trait, types,
//! errors, validation) → [`http`] (handlers) → [`app`] (the domain, with
//! [`search`], its in-memory document index) → [`store`] (storage behind a
//! trait; sled embedded). [`server`] wires them
//! together from a [`config::Config`].

#![forbid(unsafe_code)]

pub mod api;
pub mod app;
pub mod chat;
pub mod config;
pub mod http;
pub mod http_stream;
pub mod search;
pub mod server;
pub mod store;
