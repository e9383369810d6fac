//! A stored doc record as a search reads it ([`super::Store::doc_parts`]):
//! its scope and metadata, and of its data only the title and the snippets
//! that the domain's [`DocLayout`] names, the snippets left as raw JSON
//! (borrowed) so that only those asked for are decoded. One pass over the
//! record's bytes; everything else (the embeddings) is skipped unread.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::store::{DocLayout, Metadata};

pub(super) struct DocView<'a> {
    pub(super) scope: Uuid,
    pub(super) metadata: Option<Metadata>,
    pub(super) title: Option<String>,
    pub(super) snippets: Vec<&'a RawValue>,
}

impl<'a> DocView<'a> {
    /// Reads the record's JSON `bytes`, its data laid out as `layout` says.
    pub(super) fn read(bytes: &'a [u8], layout: &DocLayout) -> serde_json::Result<Self> {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let view = RecordSeed(layout).deserialize(&mut de)?;
        de.end()?;
        Ok(view)
    }
}

/// The record: `scope`, `metadata` and `data` are the store's own fields.
struct RecordSeed<'l>(&'l DocLayout);

impl<'de> DeserializeSeed<'de> for RecordSeed<'_> {
    type Value = DocView<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<DocView<'de>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for RecordSeed<'_> {
    type Value = DocView<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a doc record")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DocView<'de>, A::Error> {
        let (mut scope, mut metadata, mut data) = (None, None, None);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "scope" => scope = Some(map.next_value()?),
                "metadata" => metadata = map.next_value()?,
                "data" => data = Some(map.next_value_seed(DataSeed(self.0))?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let scope = scope.ok_or_else(|| serde::de::Error::missing_field("scope"))?;
        let (title, snippets) = data.ok_or_else(|| serde::de::Error::missing_field("data"))?;
        Ok(DocView { scope, metadata, title, snippets })
    }
}

/// The record's data: the title and the snippets the layout names.
struct DataSeed<'l>(&'l DocLayout);

type Parts<'de> = (Option<String>, Vec<&'de RawValue>);

impl<'de> DeserializeSeed<'de> for DataSeed<'_> {
    type Value = Parts<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Parts<'de>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for DataSeed<'_> {
    type Value = Parts<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a doc's data")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parts<'de>, A::Error> {
        let (mut title, mut snippets) = (None, Vec::new());
        while let Some(key) = map.next_key::<String>()? {
            if key == self.0.title {
                title = map.next_value()?;
            } else if key == self.0.snippets {
                snippets = map.next_value()?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok((title, snippets))
    }
}
