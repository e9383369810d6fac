// Copyright 2025 Oxide Computer Company

//! Extractors: traits and impls
//!
//! See top-level crate documentation for details

mod common;
pub use common::ExclusiveExtractor;
pub use common::ExtractorMetadata;
pub use common::RequestExtractor;
pub use common::SharedExtractor;

mod body;
pub use body::MultipartBody;
pub use body::StreamingBody;
pub use body::TypedBody;
pub use body::UntypedBody;

mod metadata;

mod path;
pub use path::Path;

mod query;
pub use query::Query;

mod header;
pub use header::Header;

mod raw_request;
pub use raw_request::RawRequest;
