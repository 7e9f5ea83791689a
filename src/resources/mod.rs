//! Calico v3 resources: parsing, validation and conversion into
//! [`crate::model`].
//!
//! This is where the file (and etcd) datastores turn text into model
//! updates:
//!
//! * [`decode_documents`] / [`decode_file`] split a YAML or JSON text into
//!   documents and decode each into the typed v3 shapes of [`types`].
//! * Each resource is then validated the way upstream's v3 validator (plus
//!   the CRD schema rules it now relies on) validates it, and converted with
//!   upstream's update-processor rewrites ([`convert`], [`rules`]).
//!
//! # Error policy
//!
//! * A file that is not valid YAML/JSON, or a document without `apiVersion`,
//!   `kind` or `metadata.name`, or with a kind we do not know, fails the
//!   **whole file** with a [`DecodeError`] (`"<file>:<line>: <reason>"`): the
//!   datastore keeps the file's last good contents in force.
//! * A document that is well-formed but does not decode into its kind's
//!   shape (unknown field, wrong type) or fails validation yields a
//!   [`Decoded`] whose `result` is a [`ValidationError`] naming the field:
//!   only that resource is treated as absent.
//!
//! Unknown fields are rejected (strict decoding, as `calicoctl apply`),
//! except the standard Kubernetes metadata fields and `status`, which are
//! accepted and ignored.  A namespaced kind without `metadata.namespace` is
//! placed in `default`, as calicoctl does; a namespace given on a
//! cluster-scoped kind is ignored.

mod convert;
mod document;
mod fastyaml;
mod felixconfig;
#[doc(hidden)]
pub mod fuzzing;
mod lines;
mod rules;
mod selectors;
pub mod types;
mod validate;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use crate::model;

pub use document::decode_documents;
pub(crate) use document::decode_documents_at;
pub use selectors::prefix_selector_labels;

/// One resource's identity: (kind, namespace, name).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceId {
    /// The resource's kind.
    pub kind: Kind,
    /// Set for namespaced kinds only (`NetworkPolicy`, `NetworkSet`,
    /// `WorkloadEndpoint`, `ServiceAccount`).
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
}

impl fmt::Display for ResourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}({}/{})", self.kind, ns, self.name),
            None => write!(f, "{}({})", self.kind, self.name),
        }
    }
}

/// The resource kinds the datastores accept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `projectcalico.org/v3` `GlobalNetworkPolicy`.
    GlobalNetworkPolicy,
    /// `projectcalico.org/v3` `NetworkPolicy` (namespaced).
    NetworkPolicy,
    /// `projectcalico.org/v3` `Tier`.
    Tier,
    /// `projectcalico.org/v3` `Profile`.
    Profile,
    /// `projectcalico.org/v3` `WorkloadEndpoint` (namespaced).
    WorkloadEndpoint,
    /// `projectcalico.org/v3` `HostEndpoint`.
    HostEndpoint,
    /// `projectcalico.org/v3` `GlobalNetworkSet`.
    GlobalNetworkSet,
    /// `projectcalico.org/v3` `NetworkSet` (namespaced).
    NetworkSet,
    /// `projectcalico.org/v3` `IPPool`.
    IPPool,
    /// `projectcalico.org/v3` `Node`.
    Node,
    /// `projectcalico.org/v3` `FelixConfiguration`.
    FelixConfiguration,
    /// `projectcalico.org/v3` `ClusterInformation`.
    ClusterInformation,
    /// `projectcalico.org/v3` `IPAMBlock`.
    IPAMBlock,
    /// Kubernetes `v1` `Namespace`.
    Namespace,
    /// Kubernetes `v1` `ServiceAccount` (namespaced).
    ServiceAccount,
}

impl Kind {
    /// Every kind, in declaration order.
    pub const ALL: [Kind; 15] = [
        Kind::GlobalNetworkPolicy,
        Kind::NetworkPolicy,
        Kind::Tier,
        Kind::Profile,
        Kind::WorkloadEndpoint,
        Kind::HostEndpoint,
        Kind::GlobalNetworkSet,
        Kind::NetworkSet,
        Kind::IPPool,
        Kind::Node,
        Kind::FelixConfiguration,
        Kind::ClusterInformation,
        Kind::IPAMBlock,
        Kind::Namespace,
        Kind::ServiceAccount,
    ];

    /// The `kind:` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::GlobalNetworkPolicy => "GlobalNetworkPolicy",
            Kind::NetworkPolicy => "NetworkPolicy",
            Kind::Tier => "Tier",
            Kind::Profile => "Profile",
            Kind::WorkloadEndpoint => "WorkloadEndpoint",
            Kind::HostEndpoint => "HostEndpoint",
            Kind::GlobalNetworkSet => "GlobalNetworkSet",
            Kind::NetworkSet => "NetworkSet",
            Kind::IPPool => "IPPool",
            Kind::Node => "Node",
            Kind::FelixConfiguration => "FelixConfiguration",
            Kind::ClusterInformation => "ClusterInformation",
            Kind::IPAMBlock => "IPAMBlock",
            Kind::Namespace => "Namespace",
            Kind::ServiceAccount => "ServiceAccount",
        }
    }

    /// Whether resources of this kind live in a namespace.
    pub fn is_namespaced(self) -> bool {
        matches!(
            self,
            Kind::NetworkPolicy | Kind::NetworkSet | Kind::WorkloadEndpoint | Kind::ServiceAccount
        )
    }

    /// The `apiVersion` this kind must carry.
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::Namespace | Kind::ServiceAccount => "v1",
            _ => "projectcalico.org/v3",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error of [`Kind::from_str`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown kind {0:?}")]
pub struct UnknownKind(pub String);

impl FromStr for Kind {
    type Err = UnknownKind;
    fn from_str(s: &str) -> Result<Kind, UnknownKind> {
        Kind::ALL
            .iter()
            .copied()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownKind(s.to_owned()))
    }
}

/// Input format of a text, normally chosen from the file extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// YAML: one or more `---`-separated documents.
    Yaml,
    /// JSON: one object or an array of objects.
    Json,
}

impl Format {
    /// `.json` is JSON; `.yaml`, `.yml` (and anything else) is YAML.
    pub fn from_path(path: &Path) -> Format {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("json") => Format::Json,
            _ => Format::Yaml,
        }
    }
}

/// One decoded document.
#[derive(Clone, Debug, PartialEq)]
pub struct Decoded {
    /// Identity of the decoded resource.
    pub id: ResourceId,
    /// 1-based line where the document starts.
    pub line: usize,
    /// The model entries the resource converts to (possibly none, e.g. a
    /// `FelixConfiguration` with an unrecognised name), or why the resource
    /// is invalid (it is then treated as absent).
    pub result: Result<Vec<(model::Key, model::Value)>, ValidationError>,
}

/// The whole file is unusable (syntax error, missing identity, unknown
/// kind).  Display: `"<origin>:<line>: <reason>"`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{origin}:{line}: {reason}")]
pub struct DecodeError {
    /// The file the text came from (its path as displayed).
    pub origin: String,
    /// 1-based; 0 when the file could not be read at all.
    pub line: usize,
    /// Why the file is unusable.
    pub reason: String,
}

/// A resource failed validation.  `field` is the path of the offending
/// field (e.g. `spec.ingress[0].source.nets[1]`), empty if the problem is
/// not tied to one field.  Display is one line: `"<field>: <reason>"`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ValidationError {
    /// Path of the offending field; empty if none.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

impl ValidationError {
    pub(crate) fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        ValidationError {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.reason)
        } else {
            write!(f, "{}: {}", self.field, self.reason)
        }
    }
}

/// Reads `path` and decodes it, choosing the format from the extension
/// (see [`Format::from_path`]).  An unreadable file is a [`DecodeError`]
/// with line 0.
pub fn decode_file(path: &Path) -> Result<Vec<Decoded>, DecodeError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| DecodeError {
        origin: origin.clone(),
        line: 0,
        reason: format!("cannot read file: {e}"),
    })?;
    decode_documents(&text, &origin, Format::from_path(path))
}
