//! Content parts of messages given through `/v1` (images and files beside
//! the text): a request's parts (the contract's [`ContentPart`]) as a
//! message's ([`MessagePart`]), each image or file checked against
//! `models.max_input_part_bytes`; a message's parts as the provider is sent
//! them, and as OpenAI's items show them.
//!
//! A message of text alone keeps no parts: its text parts are joined by
//! newlines into its `content`. A message with an image or a file keeps all
//! its parts, in order (its `content` is still its text), so that what the
//! provider is sent again when a chain goes on is what was given.

use super::{Error, Result};
use crate::api::types::{
    CompletionContent, ContentPart, ImageDetail, ImageUrl, ImageUrlInput, ItemContent, MessageFile,
    MessagePart,
};
use crate::models::{tokens, wire};

/// A content's text and, when it has images or files, all its parts.
pub type Parted = (String, Option<Vec<MessagePart>>);

/// The text and parts of `content` (given in the request at `field`, e.g.
/// `input[0].content`); an image URL or a file's data over `max_bytes` is an
/// error naming it. The kinds of parts were checked with the request
/// (`unsupported`); one that is still not known here is an error too.
pub fn of_content(content: Option<CompletionContent>, field: &str, max_bytes: usize) -> Result<Parted> {
    let parts = match content {
        None => return Ok((String::new(), None)),
        Some(CompletionContent::Text(text)) => return Ok((text, None)),
        Some(CompletionContent::Parts(parts)) => parts,
    };
    let mut out = Vec::with_capacity(parts.len());
    for (j, part) in parts.into_iter().enumerate() {
        out.push(message_part(part, &format!("{field}[{j}]"), max_bytes)?);
    }
    let text = text_of(&out);
    let has_media = out.iter().any(|p| !matches!(p, MessagePart::Text { .. }));
    Ok((text, has_media.then_some(out)))
}

/// The text parts of `parts`, joined by newlines.
pub fn text_of(parts: &[MessagePart]) -> String {
    let texts: Vec<&str> = parts
        .iter()
        .filter_map(|p| match p {
            MessagePart::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    texts.join("\n")
}

fn invalid(param: String, message: String) -> Error {
    Error::Invalid { param, message }
}

/// `value` (at `param`) within `max_bytes`.
fn within(value: String, param: String, what: &str, max_bytes: usize) -> Result<String> {
    if value.len() > max_bytes {
        return Err(invalid(
            param,
            format!(
                "{what} is {} bytes, over the {max_bytes} one part may have (models.max_input_part_bytes)",
                value.len()
            ),
        ));
    }
    Ok(value)
}

fn message_part(part: ContentPart, at: &str, max_bytes: usize) -> Result<MessagePart> {
    if part.is_text() {
        return Ok(MessagePart::Text { text: part.text.unwrap_or_default() });
    }
    match part.kind.as_str() {
        "image_url" | "input_image" => {
            let (url, detail, param) = match part.image_url {
                Some(ImageUrlInput::Url(url)) => (url, part.detail, format!("{at}.image_url")),
                Some(ImageUrlInput::Object(ImageUrl { url, detail })) => {
                    (url, detail.or(part.detail), format!("{at}.image_url.url"))
                }
                None => {
                    return Err(invalid(format!("{at}.image_url"), "an image part has `image_url`".into()));
                }
            };
            let url = within(url, param, "the image's URL", max_bytes)?;
            Ok(MessagePart::ImageUrl { image_url: ImageUrl { url, detail } })
        }
        "file" | "input_file" => {
            let (data, filename, param) = match part.file {
                Some(file) => (file.file_data, file.filename, format!("{at}.file.file_data")),
                None => (part.file_data, part.filename, format!("{at}.file_data")),
            };
            let Some(data) = data else {
                return Err(invalid(param, "a file part has `file_data`".into()));
            };
            let file_data = within(data, param, "the file's data", max_bytes)?;
            Ok(MessagePart::File { file: MessageFile { file_data, filename } })
        }
        other => {
            Err(invalid(format!("{at}.type"), format!("content parts of type {other:?} are not supported")))
        }
    }
}

/// A message's part as the provider is sent it.
pub fn wire_part(part: &MessagePart) -> wire::ContentPart {
    match part {
        MessagePart::Text { text } => wire::ContentPart::Text { text: text.clone() },
        MessagePart::ImageUrl { image_url } => wire::ContentPart::ImageUrl {
            image_url: wire::ImageUrl {
                url: image_url.url.clone(),
                detail: image_url.detail.map(|d| detail_name(d).to_owned()),
            },
        },
        MessagePart::File { file } => wire::ContentPart::File {
            file: wire::FileData { file_data: Some(file.file_data.clone()), filename: file.filename.clone() },
        },
    }
}

fn detail_name(detail: ImageDetail) -> &'static str {
    match detail {
        ImageDetail::Auto => "auto",
        ImageDetail::Low => "low",
        ImageDetail::High => "high",
    }
}

/// A user message's part as OpenAI's items show it.
pub fn item_content(part: &MessagePart) -> ItemContent {
    match part {
        MessagePart::Text { text } => ItemContent::InputText { text: text.clone() },
        MessagePart::ImageUrl { image_url } => ItemContent::InputImage {
            image_url: Some(image_url.url.clone()),
            detail: image_url.detail.unwrap_or_default(),
        },
        MessagePart::File { file } => {
            ItemContent::InputFile { filename: file.filename.clone(), file_data: file.file_data.clone() }
        }
    }
}

/// The tokens of the parts that are not text (the text is the content's):
/// see [`tokens::IMAGE_TOKENS`].
pub fn media_tokens(parts: &[MessagePart]) -> usize {
    parts
        .iter()
        .map(|p| match p {
            MessagePart::Text { .. } => 0,
            MessagePart::ImageUrl { image_url } if image_url.detail == Some(ImageDetail::Low) => {
                tokens::IMAGE_LOW_TOKENS
            }
            MessagePart::ImageUrl { .. } => tokens::IMAGE_TOKENS,
            MessagePart::File { .. } => tokens::FILE_TOKENS,
        })
        .sum()
}
