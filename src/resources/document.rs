//! Splitting a text into documents and decoding each into its kind's typed
//! shape, with line numbers for error messages.
//!
//! A document is decoded in one pass: a hand-written map visitor reads
//! `apiVersion`, `kind` and `metadata`, and when it reaches `spec` with the
//! kind already known it deserializes the spec straight into the kind's
//! struct.  Only when `spec` precedes `kind` is the spec buffered as a JSON
//! value and decoded afterwards.  The members of a list (`items`, or a
//! top-level JSON array) are read the same way, straight into typed
//! documents; only when one of them does not decode is the list read again
//! with its members as JSON values and decoded one by one, so that the
//! error names the member.
//!
//! If the typed decode fails, the document is decoded again leniently
//! (identity only).  If that also fails the text is malformed and the whole
//! file is rejected; otherwise the typed failure is a per-resource
//! [`ValidationError`].

use std::fmt;
use std::ops::Range;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;

use super::fastyaml::Reader;
use super::lines::LineIndex;
use super::types::{self, Dyn, Metadata};
use super::{convert, DecodeError, Decoded, Format, Kind, ResourceId, ValidationError};

/// A typed spec, one variant per kind.
#[derive(Debug)]
pub(crate) enum Spec {
    GlobalNetworkPolicy(types::GlobalNetworkPolicySpec),
    NetworkPolicy(types::NetworkPolicySpec),
    Tier(types::TierSpec),
    Profile(types::ProfileSpec),
    WorkloadEndpoint(types::WorkloadEndpointSpec),
    HostEndpoint(types::HostEndpointSpec),
    NetworkSet(types::NetworkSetSpec),
    IpPool(types::IpPoolSpec),
    Node(types::NodeSpec),
    FelixConfiguration(Vec<(String, Dyn)>),
    ClusterInformation(types::ClusterInformationSpec),
    IpamBlock(types::IpamBlockSpec),
    /// Kubernetes kinds: the spec carries nothing we use.
    Ignored,
}

/// Deserializes the spec of a known kind.
struct SpecSeed(Kind);

impl<'de> DeserializeSeed<'de> for SpecSeed {
    type Value = Spec;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Spec, D::Error> {
        use types::nullable;
        Ok(match self.0 {
            Kind::GlobalNetworkPolicy => Spec::GlobalNetworkPolicy(nullable(d)?),
            Kind::NetworkPolicy => Spec::NetworkPolicy(nullable(d)?),
            Kind::Tier => Spec::Tier(nullable(d)?),
            Kind::Profile => Spec::Profile(nullable(d)?),
            Kind::WorkloadEndpoint => Spec::WorkloadEndpoint(nullable(d)?),
            Kind::HostEndpoint => Spec::HostEndpoint(nullable(d)?),
            Kind::GlobalNetworkSet | Kind::NetworkSet => Spec::NetworkSet(nullable(d)?),
            Kind::IPPool => Spec::IpPool(nullable(d)?),
            Kind::Node => Spec::Node(nullable(d)?),
            Kind::FelixConfiguration => match Dyn::deserialize(d)? {
                Dyn::Map(fields) => Spec::FelixConfiguration(fields),
                Dyn::Null => Spec::FelixConfiguration(Vec::new()),
                _ => return Err(de::Error::custom("spec must be a mapping")),
            },
            Kind::ClusterInformation => Spec::ClusterInformation(nullable(d)?),
            Kind::IPAMBlock => Spec::IpamBlock(nullable(d)?),
            Kind::Namespace | Kind::ServiceAccount => {
                IgnoredAny::deserialize(d)?;
                Spec::Ignored
            }
        })
    }
}

enum Body {
    Typed(Box<Spec>),
    Buffered(serde_json::Value),
}

/// A document as read by the typed pass.  `I` is what a list's `items` are
/// read as: JSON values decoded one by one afterwards ([`decode_items`], the
/// path that attributes errors to members), or typed documents read
/// directly ([`TypedItems`]).
struct RawDoc<I = Vec<serde_json::Value>> {
    api_version: Option<String>,
    kind: Option<String>,
    metadata: Option<Metadata>,
    body: Option<Body>,
    items: Option<I>,
}

impl<I> Default for RawDoc<I> {
    fn default() -> Self {
        RawDoc {
            api_version: None,
            kind: None,
            metadata: None,
            body: None,
            items: None,
        }
    }
}

/// A document whose list members are JSON values.
type ValueDoc = RawDoc<Vec<serde_json::Value>>;

/// A list's members read straight into typed documents, without building a
/// `serde_json::Value` for each first.  Only a list all of whose members
/// decode gets this far (any failure sends the whole document to the
/// [`decode_items`] path, which names the failing member); the members are
/// then finished exactly as [`decode_items`] finishes members that decode.
type TypedItems = Vec<RawDoc>;

/// The members of a list document, finished into `out`.
trait Members: Default {
    fn finish_all(self, ctx: &Ctx<'_>, out: &mut Vec<Decoded>) -> Result<(), DecodeError>;
}

impl Members for Vec<serde_json::Value> {
    fn finish_all(self, ctx: &Ctx<'_>, out: &mut Vec<Decoded>) -> Result<(), DecodeError> {
        decode_items(&self, ctx, out)
    }
}

impl Members for TypedItems {
    fn finish_all(self, ctx: &Ctx<'_>, out: &mut Vec<Decoded>) -> Result<(), DecodeError> {
        out.reserve(self.len());
        for (i, doc) in self.into_iter().enumerate() {
            if doc.items.is_some() {
                return Err(nested_list(ctx, i));
            }
            finish(doc, ctx, out)?;
        }
        Ok(())
    }
}

fn nested_list(ctx: &Ctx<'_>, i: usize) -> DecodeError {
    ctx.err(
        ctx.line,
        format!("items[{i}]: nested lists are not supported"),
    )
}

const TOP_FIELDS: &[&str] = &["apiVersion", "kind", "metadata", "spec", "status", "items"];
const SA_FIELDS: &[&str] = &[
    "secrets",
    "imagePullSecrets",
    "automountServiceAccountToken",
];

/// A top-level key, read without allocating unless it is not one of
/// [`TOP_FIELDS`].
enum TopKey {
    ApiVersion,
    Kind,
    Metadata,
    Spec,
    Status,
    Items,
    Other(String),
}

impl<'de> Deserialize<'de> for TopKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = TopKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TopKey, E> {
                Ok(match v {
                    "apiVersion" => TopKey::ApiVersion,
                    "kind" => TopKey::Kind,
                    "metadata" => TopKey::Metadata,
                    "spec" => TopKey::Spec,
                    "status" => TopKey::Status,
                    "items" => TopKey::Items,
                    other => TopKey::Other(other.to_owned()),
                })
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de, I: Deserialize<'de> + Default> Deserialize<'de> for RawDoc<I> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<I>(std::marker::PhantomData<I>);
        impl<'de, I: Deserialize<'de> + Default> Visitor<'de> for V<I> {
            type Value = RawDoc<I>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a resource (a mapping with apiVersion, kind, metadata and spec)")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawDoc<I>, A::Error> {
                let mut doc = RawDoc::default();
                while let Some(key) = map.next_key::<TopKey>()? {
                    match key {
                        TopKey::ApiVersion => doc.api_version = Some(map.next_value()?),
                        TopKey::Kind => doc.kind = Some(map.next_value()?),
                        TopKey::Metadata => doc.metadata = Some(types::nullable_value(&mut map)?),
                        TopKey::Spec => {
                            let kind = doc.kind.as_deref().and_then(|k| k.parse::<Kind>().ok());
                            doc.body = Some(match kind {
                                Some(k) => Body::Typed(Box::new(map.next_value_seed(SpecSeed(k))?)),
                                None => Body::Buffered(map.next_value()?),
                            });
                        }
                        TopKey::Items => doc.items = Some(types::nullable_value(&mut map)?),
                        TopKey::Status => {
                            map.next_value::<IgnoredAny>()?;
                        }
                        TopKey::Other(k)
                            if SA_FIELDS.contains(&k.as_str())
                                && doc.kind.as_deref() == Some("ServiceAccount") =>
                        {
                            map.next_value::<IgnoredAny>()?;
                        }
                        TopKey::Other(k) => return Err(de::Error::unknown_field(&k, TOP_FIELDS)),
                    }
                }
                Ok(doc)
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// The identity part of a document, read leniently (everything else is
/// ignored) to tell a malformed text from a malformed resource.
#[derive(Deserialize)]
struct Header {
    #[serde(default, rename = "apiVersion")]
    api_version: Option<Dyn>,
    #[serde(default)]
    kind: Option<Dyn>,
    #[serde(default)]
    metadata: Option<HeaderMeta>,
}

#[derive(Deserialize)]
struct HeaderMeta {
    #[serde(default)]
    name: Option<Dyn>,
    #[serde(default)]
    namespace: Option<Dyn>,
}

fn dyn_str(d: Option<Dyn>) -> Option<String> {
    match d {
        Some(Dyn::Str(s)) => Some(s),
        _ => None,
    }
}

/// Where a document came from, for error messages.
struct Ctx<'a> {
    origin: &'a str,
    /// 1-based line of the document's first content line.
    line: usize,
}

impl Ctx<'_> {
    fn err(&self, line: usize, reason: impl Into<String>) -> DecodeError {
        DecodeError {
            origin: self.origin.to_owned(),
            line,
            reason: reason.into(),
        }
    }
}

/// Parse a YAML or JSON text holding one or more documents (YAML `---`
/// separated; for JSON one object or an array of objects; in both formats a
/// `kind: List` (or `kind: <Kind>List`) document with `items`).  `origin` is
/// the file path, used in error messages.
pub fn decode_documents(
    text: &str,
    origin: &str,
    format: Format,
) -> Result<Vec<Decoded>, DecodeError> {
    decode_documents_with(text, origin, format, 0, true)
}

/// [`decode_documents`] for a part of a file that has `lines_before` lines
/// before it: every line number, in documents and in messages, is the
/// file's, exactly as a decode of the whole file gives it.
pub(crate) fn decode_documents_at(
    text: &str,
    origin: &str,
    format: Format,
    lines_before: usize,
) -> Result<Vec<Decoded>, DecodeError> {
    decode_documents_with(text, origin, format, lines_before, true)
}

/// [`decode_documents_at`]; `fast_reader` false sends every YAML document
/// straight to `serde_yaml_ng` (the fuzz targets check that the fast reader
/// never changes the outcome).
pub(crate) fn decode_documents_with(
    text: &str,
    origin: &str,
    format: Format,
    lines_before: usize,
    fast_reader: bool,
) -> Result<Vec<Decoded>, DecodeError> {
    let mut out = Vec::new();
    match format {
        Format::Yaml => {
            // One scan of the whole text finds every line and tells whether
            // any document can hold a character the fast reader declines.
            let index = LineIndex::new(text);
            let chunks = split_yaml(&index);
            out.reserve(chunks.len());
            let clean = !index.maybe_special() || !super::fastyaml::has_special_chars(text);
            let mut reader = Reader::default();
            for chunk in chunks {
                let ctx = Ctx {
                    origin,
                    line: chunk.content_line + lines_before,
                };
                let reader = clean.then_some(&mut reader);
                let shift = chunk.offset() + lines_before;
                decode_yaml_chunk(&chunk, &index, &ctx, shift, fast_reader, reader, &mut out)?;
            }
        }
        Format::Json => decode_json(text, origin, lines_before, &mut out)?,
    }
    Ok(out)
}

/// One YAML document of a multi-document text.
struct Chunk<'a> {
    text: &'a str,
    /// The document's lines in the file's [`LineIndex`]; the first one is
    /// the number of lines before `text` in the file.
    lines: Range<usize>,
    /// 1-based line of the first line that is not blank, a comment or a
    /// document marker.
    content_line: usize,
}

impl Chunk<'_> {
    /// Number of lines before the document in the file.
    fn offset(&self) -> usize {
        self.lines.start
    }
}

fn is_marker(line: &str, marker: &str) -> bool {
    line.strip_prefix(marker)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r']))
}

/// Splits on `---` lines (each chunk starts with its marker line, which the
/// YAML parser accepts) and drops chunks without content.
fn split_yaml<'a>(index: &LineIndex<'a>) -> Vec<Chunk<'a>> {
    let mut chunks = Vec::new();
    let mut start_line = 0usize;
    let mut content_line: Option<usize> = None;
    let lines = index.len();
    for idx in 0..lines {
        let line = index.line(idx);
        let body = line.strip_suffix('\r').unwrap_or(line);
        let marker = body.starts_with('-') && is_marker(body, "---");
        if marker && idx > 0 {
            if let Some(cl) = content_line.take() {
                chunks.push(Chunk {
                    text: index.span(start_line..idx),
                    lines: start_line..idx,
                    content_line: cl,
                });
            }
            start_line = idx;
        }
        if content_line.is_none() {
            let after_marker = if marker { &body[3..] } else { body };
            let trimmed = after_marker.trim_start();
            if !trimmed.is_empty() && !trimmed.starts_with('#') && !is_marker(body, "...") {
                content_line = Some(idx + 1);
            }
        }
    }
    if let Some(cl) = content_line {
        chunks.push(Chunk {
            text: index.span(start_line..lines),
            lines: start_line..lines,
            content_line: cl,
        });
    }
    chunks
}

/// Adds `offset` to every `line N` in a YAML error message (the parser
/// counts from the start of the chunk).
fn shift_lines(msg: &str, offset: usize) -> String {
    if offset == 0 {
        return msg.to_owned();
    }
    let mut out = String::with_capacity(msg.len() + 4);
    let mut rest = msg;
    while let Some(i) = rest.find("line ") {
        out.push_str(&rest[..i + 5]);
        rest = &rest[i + 5..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        match rest[..digits].parse::<usize>() {
            Ok(n) => out.push_str(&(n + offset).to_string()),
            Err(_) => out.push_str(&rest[..digits]),
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

/// Splits a serde_yaml message `"<path>: <message>"` into its parts.
fn split_path(msg: &str) -> (String, String) {
    if let Some((head, tail)) = msg.split_once(": ") {
        if !head.is_empty() && !head.contains(' ') {
            return (head.to_owned(), tail.to_owned());
        }
    }
    (String::new(), msg.to_owned())
}

/// `reader`: given when the whole text is known to hold no character the
/// fast reader must decline (see `fastyaml::has_special_chars`), so it need
/// not check this chunk again; it reads the chunk from the file's line
/// index with buffers reused across the file's documents.  `shift`: the
/// lines of the file before the chunk (added to the chunk's own line
/// numbers in messages).  `fast_reader` false skips the fast reader.
fn decode_yaml_chunk<'a>(
    chunk: &Chunk<'a>,
    index: &LineIndex<'a>,
    ctx: &Ctx<'_>,
    shift: usize,
    fast_reader: bool,
    reader: Option<&mut Reader<'a>>,
    out: &mut Vec<Decoded>,
) -> Result<(), DecodeError> {
    // The fast reader handles the common subset; anything it declines, and
    // any document that fails to decode, goes through `serde_yaml_ng`, whose
    // errors name the line and field.
    let fast = match reader {
        _ if !fast_reader => None,
        Some(reader) => reader
            .parse_lines(index.lines(chunk.lines.clone()))
            .and_then(|tree| read_doc(|| tree.root()).ok()),
        None => super::fastyaml::parse(chunk.text).and_then(|tree| read_doc(|| tree.root()).ok()),
    };
    if let Some(doc) = fast {
        return doc.finish(ctx, out);
    }
    match read_doc(|| serde_yaml_ng::Deserializer::from_str(chunk.text)) {
        Ok(doc) => doc.finish(ctx, out),
        Err(typed_err) => {
            match Header::deserialize(serde_yaml_ng::Deserializer::from_str(chunk.text)) {
                Err(syntax) => {
                    let line = syntax.location().map_or(ctx.line, |l| l.line() + shift);
                    Err(ctx.err(line, shift_lines(&syntax.to_string(), shift)))
                }
                Ok(header) => {
                    let (field, reason) = split_path(&shift_lines(&typed_err.to_string(), shift));
                    finish_invalid(header, ctx, ValidationError::new(field, reason), out)
                }
            }
        }
    }
}

/// A document read by the typed pass, with its list members (if any)
/// either typed or, when some member does not decode, as JSON values.
enum AnyDoc {
    Typed(RawDoc<TypedItems>),
    Values(ValueDoc),
}

impl AnyDoc {
    fn finish(self, ctx: &Ctx<'_>, out: &mut Vec<Decoded>) -> Result<(), DecodeError> {
        match self {
            AnyDoc::Typed(doc) => finish(doc, ctx, out),
            AnyDoc::Values(doc) => finish(doc, ctx, out),
        }
    }
}

/// Reads a document from the deserializers `de` makes (one per attempt):
/// with typed list members first, and if that fails with members as JSON
/// values, whose error is the one returned.  The two readings agree on
/// every document without members; typed members read their fields in text
/// order, as a document of its own does, while members read as values see
/// them in key order (`serde_json`'s map), as members always did when one
/// of them does not decode.
fn read_doc<'de, D: Deserializer<'de>>(de: impl Fn() -> D) -> Result<AnyDoc, D::Error> {
    match RawDoc::<TypedItems>::deserialize(de()) {
        Ok(doc) => Ok(AnyDoc::Typed(doc)),
        Err(_) => ValueDoc::deserialize(de()).map(AnyDoc::Values),
    }
}

/// `lines_before`: lines of the file before `text` (added to every line).
fn decode_json(
    text: &str,
    origin: &str,
    lines_before: usize,
    out: &mut Vec<Decoded>,
) -> Result<(), DecodeError> {
    let first = text.find(|c: char| !c.is_whitespace());
    let Some(first) = first else {
        return Ok(());
    };
    let line = text[..first].matches('\n').count() + 1 + lines_before;
    let ctx = Ctx { origin, line };
    // Typed first: a list's members straight into typed documents.  Any
    // failure (syntax, a member that does not decode) takes the path below,
    // which reads the text again and attributes the error.
    if text[first..].starts_with('[') {
        if let Ok(items) = serde_json::from_str::<TypedItems>(text) {
            return items.finish_all(&ctx, out);
        }
    } else {
        let mut de = serde_json::Deserializer::from_str(text);
        let typed =
            RawDoc::<TypedItems>::deserialize(&mut de).and_then(|doc| de.end().map(|()| doc));
        if let Ok(doc) = typed {
            return finish(doc, &ctx, out);
        }
    }
    if text[first..].starts_with('[') {
        let items: Vec<serde_json::Value> = serde_json::from_str(text)
            .map_err(|e| ctx.err(e.line() + lines_before, strip_json_location(&e)))?;
        return decode_items(&items, &ctx, out);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let typed = ValueDoc::deserialize(&mut de).and_then(|doc| de.end().map(|()| doc));
    match typed {
        Ok(doc) => finish(doc, &ctx, out),
        Err(typed_err) => {
            let mut de = serde_json::Deserializer::from_str(text);
            match Header::deserialize(&mut de).and_then(|h| de.end().map(|()| h)) {
                Err(syntax) => {
                    Err(ctx.err(syntax.line() + lines_before, strip_json_location(&syntax)))
                }
                Ok(header) => {
                    let err = ValidationError::new("", typed_err.to_string());
                    finish_invalid(header, &ctx, err, out)
                }
            }
        }
    }
}

fn strip_json_location(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_owned(),
        None => msg,
    }
}

/// Decodes the members of a list (`items` or a top-level JSON array).
fn decode_items(
    items: &[serde_json::Value],
    ctx: &Ctx<'_>,
    out: &mut Vec<Decoded>,
) -> Result<(), DecodeError> {
    for (i, item) in items.iter().enumerate() {
        match ValueDoc::deserialize(item) {
            Ok(doc) => {
                if doc.items.is_some() {
                    return Err(nested_list(ctx, i));
                }
                finish(doc, ctx, out)?
            }
            Err(typed_err) => match Header::deserialize(item) {
                Err(e) => return Err(ctx.err(ctx.line, format!("items[{i}]: {e}"))),
                Ok(header) => {
                    let err = ValidationError::new("", typed_err.to_string());
                    finish_invalid(header, ctx, err, out)?
                }
            },
        }
    }
    Ok(())
}

/// Checks the identity fields and builds the resource id (taking the
/// name and namespace strings rather than copying them).
fn identify(
    api_version: Option<&str>,
    kind: Option<&str>,
    name: Option<String>,
    namespace: Option<String>,
    ctx: &Ctx<'_>,
) -> Result<ResourceId, DecodeError> {
    let api_version = api_version
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ctx.err(ctx.line, "document has no apiVersion"))?;
    let kind_str = kind
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ctx.err(ctx.line, "document has no kind"))?;
    let kind: Kind = kind_str
        .parse()
        .map_err(|_| ctx.err(ctx.line, format!("unknown kind {kind_str:?}")))?;
    if api_version != kind.api_version() {
        return Err(ctx.err(
            ctx.line,
            format!(
                "unsupported apiVersion {api_version:?} for kind {kind} (expected {:?})",
                kind.api_version()
            ),
        ));
    }
    let name = name
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ctx.err(ctx.line, format!("{kind} has no metadata.name")))?;
    let namespace = if kind.is_namespaced() {
        Some(
            namespace
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "default".to_owned()),
        )
    } else {
        None
    };
    Ok(ResourceId {
        kind,
        namespace,
        name,
    })
}

fn is_list_kind(kind: Option<&str>) -> bool {
    kind.is_some_and(|k| k == "List" || (k.ends_with("List") && k.len() > 4))
}

fn finish<I: Members>(
    doc: RawDoc<I>,
    ctx: &Ctx<'_>,
    out: &mut Vec<Decoded>,
) -> Result<(), DecodeError> {
    if is_list_kind(doc.kind.as_deref()) || doc.items.is_some() {
        return doc.items.unwrap_or_default().finish_all(ctx, out);
    }
    let mut meta = doc.metadata.unwrap_or_default();
    // The conversion reads the name and namespace from the id only.
    let id = identify(
        doc.api_version.as_deref(),
        doc.kind.as_deref(),
        Some(std::mem::take(&mut meta.name)),
        Some(std::mem::take(&mut meta.namespace)),
        ctx,
    )?;
    let spec = match doc.body {
        Some(Body::Typed(spec)) => Ok(*spec),
        Some(Body::Buffered(value)) => SpecSeed(id.kind)
            .deserialize(value)
            .map_err(|e| ValidationError::new("spec", e.to_string())),
        None => SpecSeed(id.kind)
            .deserialize(serde_json::Value::Null)
            .map_err(|e| ValidationError::new("spec", e.to_string())),
    };
    let result = spec.and_then(|spec| convert::convert(&id, meta, spec));
    out.push(Decoded {
        id,
        line: ctx.line,
        result,
    });
    Ok(())
}

fn finish_invalid(
    header: Header,
    ctx: &Ctx<'_>,
    err: ValidationError,
    out: &mut Vec<Decoded>,
) -> Result<(), DecodeError> {
    let api_version = dyn_str(header.api_version);
    let kind = dyn_str(header.kind);
    if is_list_kind(kind.as_deref()) {
        return Err(ctx.err(ctx.line, format!("invalid list: {err}")));
    }
    let (name, namespace) = match header.metadata {
        Some(m) => (dyn_str(m.name), dyn_str(m.namespace)),
        None => (None, None),
    };
    let id = identify(
        api_version.as_deref(),
        kind.as_deref(),
        name,
        namespace,
        ctx,
    )?;
    out.push(Decoded {
        id,
        line: ctx.line,
        result: Err(err),
    });
    Ok(())
}
