//! Writing resources into etcd the way calicoctl stores them, and reading
//! them back (the engine behind `felix datastore apply` / `get`).
//!
//! # What is stored
//!
//! For the Calico v3 kinds, the value is the v3 object as JSON, as
//! calicoctl's client writes it: `apiVersion: projectcalico.org/v3`,
//! `kind`, `metadata` and `spec`, where `metadata`
//!
//! * keeps `name`, `labels`, `annotations` (and `namespace` for namespaced
//!   kinds; a namespaced resource without one goes to `default`);
//! * gets a `uid` (a random UUID) and a `creationTimestamp` (now, RFC 3339,
//!   UTC) when the resource is created, and keeps the stored ones when it
//!   is replaced;
//! * loses `resourceVersion` and `selfLink` (the revision is etcd's);
//! * for `GlobalNetworkPolicy` and `NetworkPolicy`, carries the annotation
//!   `projectcalico.org/metadata: {"name":"<name>"}` that upstream's etcd
//!   backend adds to remember the policy name.
//!
//! `IPAMBlock` is stored as upstream's IPAM code stores blocks (the
//! `AllocationBlock` JSON at the block key), with allocation bookkeeping
//! taken from the spec or initialised as an empty block.  `Namespace` and
//! `ServiceAccount` are stored as their Kubernetes v1 objects under the
//! extension keys of [`super::keys`].
//!
//! Not replicated: calicoctl's spec defaulting (for example filling in
//! policy `types` or the default tier) and its existence checks (the tier
//! of a policy must exist).  Key order inside the JSON differs from Go's
//! (fields are sorted), which does not change the content.
//!
//! # Input
//!
//! [`load`] reads a file or a directory (same file selection as the file
//! datastore) and validates every resource with the datastore decoder; any
//! problem rejects the whole input, so nothing is written for bad input.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Map, Value as Json};

use super::client::{EtcdClient, EtcdError};
use super::keys;
use crate::datastore::walk;
use crate::resources::{decode_documents, Format, Kind, ResourceId};

/// The annotation upstream's etcd backend uses to keep a policy's name.
pub const POLICY_NAME_ANNOTATION: &str = "projectcalico.org/metadata";

/// One validated resource from the input.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// Identity of the resource.
    pub id: ResourceId,
    /// `file:line` of the document.
    pub origin: String,
    /// The document as written (a JSON object).
    pub doc: Json,
}

/// Reads and validates `path` (a file or a directory).  `Err` lists every
/// problem, one line each, naming file, line and field.
pub fn load(path: &Path) -> Result<Vec<Prepared>, Vec<String>> {
    let meta = std::fs::metadata(path).map_err(|e| vec![format!("{}: {e}", path.display())])?;
    let files: Vec<std::path::PathBuf> = if meta.is_dir() {
        let listing = walk::list(path).map_err(|e| vec![format!("{}: {e}", path.display())])?;
        let mut problems: Vec<String> = listing
            .unreadable
            .iter()
            .map(|(rel, e)| format!("{}: {e}", path.join(rel).display()))
            .collect();
        if !problems.is_empty() {
            problems.sort();
            return Err(problems);
        }
        listing
            .files
            .into_iter()
            .map(|(rel, _)| path.join(rel))
            .collect()
    } else {
        vec![path.to_path_buf()]
    };
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for file in files {
        match load_file(&file) {
            Ok(mut docs) => out.append(&mut docs),
            Err(mut p) => problems.append(&mut p),
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

fn load_file(file: &Path) -> Result<Vec<Prepared>, Vec<String>> {
    let origin = file.display().to_string();
    let text = std::fs::read_to_string(file).map_err(|e| vec![format!("{origin}: {e}")])?;
    let format = walk::format_for(file);
    let decoded = decode_documents(&text, &origin, format).map_err(|e| vec![e.to_string()])?;
    let mut problems = Vec::new();
    for d in &decoded {
        if let Err(e) = &d.result {
            problems.push(format!("{origin}:{}: invalid {}: {e}", d.line, d.id));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let raw = raw_documents(&text, format).map_err(|e| vec![format!("{origin}: {e}")])?;
    if raw.len() != decoded.len() {
        return Err(vec![format!(
            "{origin}: found {} documents but decoded {}",
            raw.len(),
            decoded.len()
        )]);
    }
    Ok(decoded
        .into_iter()
        .zip(raw)
        .map(|(d, doc)| Prepared {
            origin: format!("{origin}:{}", d.line),
            id: d.id,
            doc,
        })
        .collect())
}

/// The documents of a text as JSON values, lists expanded, in the order
/// the decoder reports them.
fn raw_documents(text: &str, format: Format) -> Result<Vec<Json>, String> {
    let mut top = Vec::new();
    match format {
        Format::Json => {
            let v: Json = serde_json::from_str(text).map_err(|e| e.to_string())?;
            match v {
                Json::Array(items) => top.extend(items),
                other => top.push(other),
            }
        }
        Format::Yaml => {
            for doc in serde_yaml_ng::Deserializer::from_str(text) {
                let v = Json::deserialize(doc).map_err(|e| e.to_string())?;
                if !v.is_null() {
                    top.push(v);
                }
            }
        }
    }
    let mut out = Vec::new();
    for v in top {
        let is_list = v.get("items").is_some()
            || v.get("kind")
                .and_then(Json::as_str)
                .is_some_and(|k| k == "List" || (k.ends_with("List") && k.len() > 4));
        if is_list {
            if let Some(Json::Array(items)) = v.get("items") {
                out.extend(items.iter().cloned());
            }
        } else {
            out.push(v);
        }
    }
    Ok(out)
}

/// The key and JSON value calicoctl would store for `p`.  `existing` is
/// the value currently stored under that key, if any (its `uid` and
/// `creationTimestamp` are kept); `now` is an RFC 3339 timestamp and `uid`
/// a fresh UUID, used for new resources.
pub fn stored_form(
    p: &Prepared,
    existing: Option<&Json>,
    now: &str,
    uid: &str,
) -> Result<(String, Json), String> {
    let Json::Object(doc) = &p.doc else {
        return Err(format!("{}: document is not an object", p.origin));
    };
    if p.id.kind == Kind::IPAMBlock {
        return block_form(p, doc);
    }
    let key = keys::resource_key(p.id.kind, p.id.namespace.as_deref(), &p.id.name);
    let mut meta = match doc.get("metadata") {
        Some(Json::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    meta.insert("name".into(), Json::String(p.id.name.clone()));
    match &p.id.namespace {
        Some(ns) => {
            meta.insert("namespace".into(), Json::String(ns.clone()));
        }
        None => {
            meta.remove("namespace");
        }
    }
    meta.remove("resourceVersion");
    meta.remove("selfLink");
    let old_meta = existing.and_then(|e| e.get("metadata"));
    for (field, fresh) in [("uid", uid), ("creationTimestamp", now)] {
        let kept = old_meta
            .and_then(|m| m.get(field))
            .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
            .cloned();
        let given = meta
            .get(field)
            .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
            .cloned();
        let v = kept.or(given).unwrap_or_else(|| Json::String(fresh.into()));
        meta.insert(field.into(), v);
    }
    for field in ["labels", "annotations"] {
        if meta
            .get(field)
            .is_some_and(|v| v.is_null() || v.as_object().is_some_and(Map::is_empty))
        {
            meta.remove(field);
        }
    }
    if matches!(p.id.kind, Kind::GlobalNetworkPolicy | Kind::NetworkPolicy) {
        let annotations = meta
            .entry("annotations")
            .or_insert_with(|| Json::Object(Map::new()));
        if let Json::Object(a) = annotations {
            let name = serde_json::json!({ "name": p.id.name }).to_string();
            a.insert(POLICY_NAME_ANNOTATION.into(), Json::String(name));
        }
    }
    let mut value = Map::new();
    value.insert(
        "apiVersion".into(),
        Json::String(p.id.kind.api_version().into()),
    );
    value.insert("kind".into(), Json::String(p.id.kind.as_str().into()));
    value.insert("metadata".into(), Json::Object(meta));
    match doc.get("spec") {
        Some(spec) if !spec.is_null() => {
            value.insert("spec".into(), spec.clone());
        }
        _ if matches!(p.id.kind, Kind::Namespace | Kind::ServiceAccount) => {}
        _ => {
            value.insert("spec".into(), Json::Object(Map::new()));
        }
    }
    Ok((key, Json::Object(value)))
}

/// `IPAMBlock`: upstream's `AllocationBlock` at the block key.
fn block_form(p: &Prepared, doc: &Map<String, Json>) -> Result<(String, Json), String> {
    let empty = Map::new();
    let spec = doc.get("spec").and_then(Json::as_object).unwrap_or(&empty);
    let cidr_text = spec.get("cidr").and_then(Json::as_str).unwrap_or_default();
    let cidr: ipnet::IpNet = cidr_text
        .parse()
        .map_err(|_| format!("{}: spec.cidr {cidr_text:?} is not a CIDR", p.origin))?;
    let cidr = cidr.trunc();
    let host_bits = u32::from(cidr.max_prefix_len() - cidr.prefix_len());
    if host_bits > 16 {
        return Err(format!(
            "{}: block {cidr} is too large (at most 65536 addresses)",
            p.origin
        ));
    }
    let size = 1usize << host_bits;
    let take = |name: &str, default: Json| -> Json {
        spec.get(name)
            .filter(|v| !v.is_null())
            .cloned()
            .unwrap_or(default)
    };
    let mut block = Map::new();
    block.insert("cidr".into(), Json::String(cidr.to_string()));
    block.insert("affinity".into(), take("affinity", Json::Null));
    if let Some(t) = spec.get("affinityClaimTime").filter(|v| !v.is_null()) {
        block.insert("affinity_claim_time".into(), t.clone());
    }
    block.insert(
        "allocations".into(),
        take("allocations", Json::Array(vec![Json::Null; size])),
    );
    block.insert(
        "unallocated".into(),
        take(
            "unallocated",
            Json::Array((0..size).map(Json::from).collect()),
        ),
    );
    block.insert(
        "attributes".into(),
        take("attributes", Json::Array(Vec::new())),
    );
    block.insert(
        "sequenceNumber".into(),
        take("sequenceNumber", Json::from(0)),
    );
    block.insert(
        "sequenceNumberForAllocation".into(),
        take("sequenceNumberForAllocation", Json::Null),
    );
    block.insert("deleted".into(), take("deleted", Json::Bool(false)));
    Ok((keys::block_key(cidr), Json::Object(block)))
}

/// What [`apply`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplySummary {
    /// Resources stored under a new key.
    pub created: usize,
    /// Resources whose stored value changed.
    pub updated: usize,
    /// Resources already stored as given.
    pub unchanged: usize,
}

/// Stores every resource (in input order; a later copy of one resource
/// replaces an earlier one, as repeated `calicoctl apply` would).
pub fn apply(client: &EtcdClient, resources: &[Prepared]) -> Result<ApplySummary, EtcdError> {
    let mut summary = ApplySummary::default();
    let now = rfc3339_now();
    for p in resources {
        let probe_key = match p.id.kind {
            Kind::IPAMBlock => stored_form(p, None, &now, "")
                .map(|(k, _)| k)
                .map_err(EtcdError::Protocol)?,
            kind => keys::resource_key(kind, p.id.namespace.as_deref(), &p.id.name),
        };
        let existing = client.get(probe_key.as_bytes())?;
        let existing_json = existing
            .as_ref()
            .and_then(|kv| serde_json::from_slice::<Json>(&kv.value).ok());
        let (key, value) = stored_form(p, existing_json.as_ref(), &now, &new_uuid())
            .map_err(EtcdError::Protocol)?;
        let bytes = serde_json::to_vec(&value).map_err(|e| EtcdError::Protocol(e.to_string()))?;
        match &existing {
            Some(kv) if kv.value == bytes => summary.unchanged += 1,
            Some(_) => {
                client.put(key.as_bytes(), &bytes)?;
                summary.updated += 1;
            }
            None => {
                client.put(key.as_bytes(), &bytes)?;
                summary.created += 1;
            }
        }
    }
    Ok(summary)
}

/// One stored resource of a kind, as `get` shows it.
#[derive(Clone, Debug)]
pub struct Listed {
    /// The etcd key.
    pub key: String,
    /// Identity of the resource.
    pub id: ResourceId,
    /// The stored object (IPAM blocks shown as v3 `IPAMBlock` objects),
    /// with `metadata.resourceVersion` set to the key's modification
    /// revision; `None` if the value is not JSON.
    pub object: Option<Json>,
    /// Why the value is not usable (it is treated as absent), if so.
    pub problem: Option<String>,
}

/// Lists what is stored for `kind`, sorted by key.
pub fn list(client: &EtcdClient, kind: Kind) -> Result<Vec<Listed>, EtcdError> {
    let (_, kvs) = client.get_prefix(keys::kind_prefix(kind).as_bytes(), 1000)?;
    let mut out = Vec::new();
    for kv in kvs {
        let Ok(key) = String::from_utf8(kv.key) else {
            continue;
        };
        let Some(id) = keys::parse_key(&key).filter(|id| id.kind == kind) else {
            continue;
        };
        let problem = super::value::decode(&key, &id, &kv.value).err();
        let object = serde_json::from_slice::<Json>(&kv.value).ok().map(|v| {
            let mut v = if kind == Kind::IPAMBlock {
                block_as_v3(&id, v)
            } else {
                v
            };
            if let Some(Json::Object(m)) = v.get_mut("metadata") {
                // Upstream drops its policy-name annotation when reading.
                if let Some(Json::Object(a)) = m.get_mut("annotations") {
                    a.remove(POLICY_NAME_ANNOTATION);
                    if a.is_empty() {
                        m.remove("annotations");
                    }
                }
                m.insert(
                    "resourceVersion".into(),
                    Json::String(kv.mod_revision.to_string()),
                );
            }
            v
        });
        out.push(Listed {
            key,
            id,
            object,
            problem,
        });
    }
    Ok(out)
}

/// Shows a stored `AllocationBlock` as the v3 `IPAMBlock` object (name as
/// Kubernetes names blocks: the CIDR with `.`, `:` and `/` as `-`).
fn block_as_v3(id: &ResourceId, stored: Json) -> Json {
    let name = keys::block_cidr(&id.name)
        .map(|c| c.to_string().replace(['.', ':', '/'], "-"))
        .unwrap_or_else(|| id.name.clone());
    let mut spec = Map::new();
    if let Json::Object(fields) = stored {
        for (k, v) in fields {
            let k = match k.as_str() {
                "affinity_claim_time" => "affinityClaimTime".to_owned(),
                "hostAffinity" => continue,
                _ => k,
            };
            spec.insert(k, v);
        }
    }
    serde_json::json!({
        "apiVersion": "projectcalico.org/v3",
        "kind": "IPAMBlock",
        "metadata": { "name": name },
        "spec": spec,
    })
}

/// A list object (`<Kind>List`) holding `items`, as calicoctl prints for a
/// plural `get`.
pub fn as_list(kind: Kind, items: Vec<Json>) -> Json {
    let mut m = BTreeMap::new();
    m.insert("apiVersion", Json::String(kind.api_version().into()));
    m.insert("kind", Json::String(format!("{}List", kind.as_str())));
    m.insert("items", Json::Array(items));
    serde_json::to_value(m).unwrap_or(Json::Null)
}

/// A random (version 4) UUID from the kernel's random source, or one
/// derived from the clock and process if that is unavailable.
pub fn new_uuid() -> String {
    use std::io::Read;
    let mut b = [0u8; 16];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok();
    if !ok {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let mixed = t ^ (u128::from(std::process::id()) << 64);
        b = mixed.to_le_bytes();
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The current time as RFC 3339 UTC with second precision.
pub fn rfc3339_now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// Formats seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn rfc3339(secs: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepared(yaml: &str) -> Prepared {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("r.yaml");
        std::fs::write(&f, yaml).unwrap();
        let mut v = load(&f).unwrap();
        assert_eq!(v.len(), 1);
        v.remove(0)
    }

    #[test]
    fn timestamps_and_uuids() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_798_761_600 + 3661), "2027-01-01T01:01:01Z");
        let u = new_uuid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert_ne!(u, new_uuid());
    }

    #[test]
    fn policy_is_stored_as_calicoctl_stores_it() {
        let p = prepared(
            "apiVersion: projectcalico.org/v3\nkind: NetworkPolicy\nmetadata:\n  name: p1\n  resourceVersion: '9'\n  labels: {a: b}\nspec:\n  selector: all()\n",
        );
        let (key, v) = stored_form(&p, None, "2026-01-01T00:00:00Z", "u-1").unwrap();
        assert_eq!(
            key,
            "/calico/resources/v3/projectcalico.org/networkpolicies/default/p1"
        );
        let m = &v["metadata"];
        assert_eq!(m["namespace"], "default");
        assert_eq!(m["uid"], "u-1");
        assert_eq!(m["creationTimestamp"], "2026-01-01T00:00:00Z");
        assert!(m.get("resourceVersion").is_none());
        assert_eq!(m["labels"]["a"], "b");
        assert_eq!(m["annotations"][POLICY_NAME_ANNOTATION], r#"{"name":"p1"}"#);
        assert_eq!(v["apiVersion"], "projectcalico.org/v3");
        assert_eq!(v["kind"], "NetworkPolicy");
        assert_eq!(v["spec"]["selector"], "all()");

        // Replacing keeps the stored identity fields.
        let (_, again) = stored_form(&p, Some(&v), "2030-01-01T00:00:00Z", "u-2").unwrap();
        assert_eq!(again["metadata"]["uid"], "u-1");
        assert_eq!(
            again["metadata"]["creationTimestamp"],
            "2026-01-01T00:00:00Z"
        );
    }

    #[test]
    fn block_is_stored_as_an_allocation_block() {
        let p = prepared(
            "apiVersion: projectcalico.org/v3\nkind: IPAMBlock\nmetadata:\n  name: b\nspec:\n  cidr: 10.1.2.0/30\n  affinity: host:n1\n",
        );
        let (key, v) = stored_form(&p, None, "t", "u").unwrap();
        assert_eq!(key, "/calico/ipam/v2/assignment/ipv4/block/10.1.2.0-30");
        assert_eq!(v["cidr"], "10.1.2.0/30");
        assert_eq!(v["affinity"], "host:n1");
        assert_eq!(
            v["allocations"],
            serde_json::json!([null, null, null, null])
        );
        assert_eq!(v["unallocated"], serde_json::json!([0, 1, 2, 3]));
        assert_eq!(v["deleted"], false);
        // And the syncer's decoder reads it back.
        let id = keys::parse_key(&key).unwrap();
        let entries = super::super::value::decode(&key, &id, v.to_string().as_bytes()).unwrap();
        assert_eq!(entries.len(), 1);
    }

    #[test]
    fn bad_input_is_rejected_with_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("a.yaml"),
            "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata:\n  name: ok\nspec: {}\n---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: bad\nspec:\n  nets: [10.0.0.0/33]\n",
        )
        .unwrap();
        let problems = load(dir.path()).unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("a.yaml:7"), "{problems:?}");
        assert!(problems[0].contains("nets"), "{problems:?}");
    }

    #[test]
    fn lists_are_expanded_in_order() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("l.json"),
            r#"{"apiVersion":"v1","kind":"List","items":[
                {"apiVersion":"projectcalico.org/v3","kind":"Tier","metadata":{"name":"a"},"spec":{}},
                {"apiVersion":"v1","kind":"Namespace","metadata":{"name":"ns1","labels":{"x":"y"}}}]}"#,
        )
        .unwrap();
        let v = load(dir.path()).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].id.name, "a");
        assert_eq!(v[1].id.kind, Kind::Namespace);
        let (key, stored) = stored_form(&v[1], None, "t", "u").unwrap();
        assert_eq!(key, "/calico/resources/v3/kubernetes/namespaces/ns1");
        assert_eq!(stored["apiVersion"], "v1");
        assert!(stored.get("spec").is_none());
    }
}
