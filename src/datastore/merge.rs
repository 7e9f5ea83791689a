//! The merged view of a file datastore.
//!
//! [`Merger`] holds, per file, the last good list of decoded resources, and
//! derives from all files together the effective value of every
//! [`Key`], applying the duplicate rule documented on [`crate::datastore`]:
//!
//! * an identity (kind, namespace, name) claimed by several documents is
//!   owned by the claimant whose [`Origin`] (relative path, byte-wise, then
//!   document index) sorts first; the owner decides the identity's keys
//!   even when it failed validation (an invalid owner makes the resource
//!   absent rather than reviving a stale copy elsewhere);
//! * a [`Key`] produced by several owners takes the value of the owner whose
//!   origin sorts first.
//!
//! Both rules depend only on the current set of files, never on the order
//! in which they were loaded.  The merger also remembers what it last
//! handed out per key, so [`Merger::take_updates`] yields exactly the net
//! per-key differences since the previous call.

use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use smallvec::SmallVec;

use crate::hash::FastMap as HashMap;
use crate::model::{Key, Update, UpdateType, Value};
use crate::resources::ResourceId;

/// A file's path relative to the datastore root.  Compared, ordered and
/// hashed byte-wise (not component-wise, as `Path` does): the duplicate
/// rule orders by bytes, and equality must agree with that order.  The
/// byte-wise forms are also much cheaper than `Path`'s, which parse
/// components on every call.
#[derive(Clone)]
pub(crate) struct RelPath(Arc<Path>);

impl PartialEq for RelPath {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.bytes() == other.bytes()
    }
}

impl Eq for RelPath {}

impl std::hash::Hash for RelPath {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.bytes().hash(state);
    }
}

impl RelPath {
    pub(crate) fn new(path: &Path) -> Self {
        RelPath(Arc::from(path))
    }

    pub(crate) fn as_path(&self) -> &Path {
        &self.0
    }

    fn bytes(&self) -> &[u8] {
        self.0.as_os_str().as_bytes()
    }
}

impl Ord for RelPath {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.bytes().cmp(other.bytes())
    }
}

impl PartialOrd for RelPath {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Debug for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// Where one document lives: its file and its position in that file.
/// The derived order (path first, then index) is the precedence order.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Origin {
    path: RelPath,
    index: usize,
}

/// One decoded document of a file: its identity, the line it starts on and
/// either its converted keys/values or the validation error (rendered as
/// one line naming file, line and field).
#[derive(Clone, Debug)]
pub(crate) struct Doc {
    pub id: ResourceId,
    pub line: usize,
    pub result: Result<Vec<(Key, Value)>, String>,
}

/// Per-key state: every owner's value (sorted by owner, usually one) and
/// what was last handed out. `O` names an owner and orders owners by precedence:
/// an [`Origin`] here, an etcd key in [`super::keyed::KeyedMerger`].
pub(crate) struct KeyEntry<O> {
    /// Inline for the usual single owner (no allocation per key).
    claims: SmallVec<[(O, Value); 1]>,
    emitted: Option<Value>,
    /// Listed in the merger's dirty list (each key at most once).
    dirty: bool,
}

impl<O> Default for KeyEntry<O> {
    fn default() -> Self {
        KeyEntry {
            claims: SmallVec::new(),
            emitted: None,
            dirty: false,
        }
    }
}

/// The merged state of a set of files; see the module docs.
pub(crate) struct Merger {
    root: PathBuf,
    files: HashMap<RelPath, Vec<Doc>>,
    /// Every claimant of an identity, sorted; the first is the owner.
    ids: HashMap<ResourceId, SmallVec<[Origin; 1]>>,
    keys: HashMap<Key, KeyEntry<Origin>>,
    /// Keys whose effective value may differ from `emitted`; each key at
    /// most once (guarded by [`KeyEntry::dirty`]), and every listed key has
    /// an entry in `keys` until [`Merger::take_updates`] runs.
    dirty: Vec<Key>,
}

impl Merger {
    /// An empty merger.  `root` is only used to name files in messages.
    pub(crate) fn new(root: &Path) -> Self {
        Merger {
            root: root.to_path_buf(),
            files: HashMap::default(),
            ids: HashMap::default(),
            keys: HashMap::default(),
            dirty: Vec::new(),
        }
    }

    /// Names files in messages relative to `root` from now on (a `felix calc`
    /// state after another, in another directory).
    pub(crate) fn set_root(&mut self, root: &Path) {
        if self.root != root {
            self.root = root.to_path_buf();
        }
    }

    /// The documents last stored for `path` (empty if none).
    pub(crate) fn docs(&self, path: &RelPath) -> &[Doc] {
        self.files.get(path).map_or(&[], Vec::as_slice)
    }

    /// Number of keys that may have changed since the last
    /// [`Merger::take_updates`].
    pub(crate) fn dirty_len(&self) -> usize {
        self.dirty.len()
    }

    /// Replaces the documents of `path` (`None` or an empty list: the file
    /// is gone).  Returns one message per duplicate involving this file.
    pub(crate) fn replace_file(&mut self, path: &RelPath, docs: Option<Vec<Doc>>) -> Vec<String> {
        let old = self.files.remove(path).unwrap_or_default();
        let new = docs.unwrap_or_default();

        // A document with the identity and content its index held before, whose identity
        // and keys nobody else claims, changes nothing and has nothing to report: its claim
        // (same origin), its ownership and its contributions stay as they are.  Editing one
        // policy of a file of 2,000 so touches one identity, not 2,000
        // (`an_edit_touches_only_the_changed_documents_keys`); documents involved in a
        // duplicate go through the full path, so their messages are given again, as for a
        // file whose every document is new
        // (`an_unchanged_duplicate_is_reported_again_when_its_file_changes`).
        let kept_flags: Vec<bool> = new
            .iter()
            .enumerate()
            .map(|(i, n)| {
                old.get(i).is_some_and(|o| {
                    o.id == n.id
                        && o.result == n.result
                        && self.ids.get(&o.id).is_some_and(|c| c.len() == 1)
                        && o.result.as_ref().map_or(true, |kvs| {
                            kvs.iter()
                                .all(|(k, _)| self.keys.get(k).is_some_and(|e| e.claims.len() == 1))
                        })
                })
            })
            .collect();
        let kept = |i: usize| kept_flags.get(i).copied().unwrap_or(false);
        let old_changed: Vec<usize> = (0..old.len()).filter(|&i| !kept(i)).collect();
        let new_changed: Vec<usize> = (0..new.len()).filter(|&i| !kept(i)).collect();

        let mut affected: Vec<&ResourceId> = old_changed
            .iter()
            .map(|&i| &old[i].id)
            .chain(new_changed.iter().map(|&i| &new[i].id))
            .collect();
        affected.sort_unstable();
        affected.dedup();
        let old_owners: Vec<Option<Origin>> = affected
            .iter()
            .map(|id| self.ids.get(id).and_then(|c| c.first().cloned()))
            .collect();

        for &index in &old_changed {
            let id = &old[index].id;
            let origin = Origin {
                path: path.clone(),
                index,
            };
            if let Some(claims) = self.ids.get_mut(id) {
                claims.retain(|o| *o != origin);
                if claims.is_empty() {
                    self.ids.remove(id);
                }
            }
        }
        // Grow the maps once per file rather than rehashing (and re-hashing
        // every key) repeatedly while a large first load streams in.
        self.ids.reserve(new_changed.len());
        self.keys.reserve(
            new_changed
                .iter()
                .map(|&i| new[i].result.as_ref().map_or(0, Vec::len))
                .sum(),
        );
        // Whether any identity of this file has another claimant: if not,
        // there is no duplicate to report below.
        let mut shared_ids = false;
        for &index in &new_changed {
            let doc = &new[index];
            let origin = Origin {
                path: path.clone(),
                index,
            };
            let claims = self.ids.entry(doc.id.clone()).or_default();
            if let Err(pos) = claims.binary_search(&origin) {
                claims.insert(pos, origin);
            }
            shared_ids |= claims.len() > 1;
        }

        // Withdraw the contributions of owners that lost ownership or whose
        // content changed; remember who contributes instead.
        let mut incoming = Vec::new();
        for (id, old_owner) in affected.iter().zip(old_owners) {
            let new_owner = self.ids.get(id).and_then(|c| c.first().cloned());
            let unchanged =
                old_owner == new_owner && old_owner.as_ref().is_some_and(|o| o.path != *path);
            if unchanged {
                continue;
            }
            if let Some(owner) = old_owner {
                let doc = doc_at(&self.files, path, &old, &owner);
                if let Some(Doc {
                    result: Ok(kvs), ..
                }) = doc
                {
                    for (key, _) in kvs {
                        withdraw(&mut self.keys, &mut self.dirty, key, &owner);
                    }
                }
                if owner.path != *path && new_owner.as_ref() != Some(&owner) {
                    tracing::info!(resource = %id, "duplicate copy in {} no longer in force", self.name(&owner.path));
                }
            }
            if let Some(owner) = new_owner {
                incoming.push(owner);
            }
        }

        // Contribute the incoming owners' keys.  Documents of this file are
        // read from `new` directly (it is stored afterwards); duplicate keys
        // are reported once the file is stored, so that messages can name
        // its lines.
        let mut shared_keys: Vec<(Origin, Origin, Key)> = Vec::new();
        for owner in incoming {
            let Some(doc) = doc_at(&self.files, path, &new, &owner) else {
                continue;
            };
            if owner.path != *path {
                tracing::info!(resource = %doc.id, "copy in {} is now in force", self.name(&owner.path));
            }
            if let Ok(kvs) = &doc.result {
                for (key, value) in kvs {
                    if let Some(other) =
                        contribute(&mut self.keys, &mut self.dirty, key, &owner, value.clone())
                    {
                        let (first, second) = if other < owner {
                            (other, owner.clone())
                        } else {
                            (owner.clone(), other)
                        };
                        shared_keys.push((first, second, key.clone()));
                    }
                }
            }
        }

        if !new.is_empty() {
            self.files.insert(path.clone(), new);
        }

        let mut messages: Vec<String> = shared_keys
            .into_iter()
            .map(|(first, second, key)| {
                format!(
                    "{}: key {key} is also produced by {}; the copy in {} is in force",
                    self.locate(&second),
                    self.locate(&first),
                    self.name(&first.path)
                )
            })
            .collect();
        if !shared_ids {
            return messages;
        }

        // Duplicate identities involving this file.
        if let Some(docs) = self.files.get(path) {
            for doc in docs {
                let Some(claims) = self.ids.get(&doc.id) else {
                    continue;
                };
                if claims.len() < 2 {
                    continue;
                }
                let owner = &claims[0];
                for other in &claims[1..] {
                    if owner.path != *path && other.path != *path {
                        continue;
                    }
                    let message = format!(
                        "{}: duplicate {} ignored; the copy at {} is in force",
                        self.locate(other),
                        doc.id,
                        self.locate(owner)
                    );
                    if !messages.contains(&message) {
                        messages.push(message);
                    }
                }
            }
        }
        messages
    }

    /// The net per-key changes since the previous call, sorted by key.
    pub(crate) fn take_updates(&mut self) -> Vec<Update> {
        drain_updates(&mut self.keys, &mut self.dirty)
    }

    /// Names a file for messages: the datastore root joined with `path`.
    fn name(&self, path: &RelPath) -> String {
        self.root.join(path.as_path()).display().to_string()
    }

    /// `file:line` of a document.
    fn locate(&self, origin: &Origin) -> String {
        let line = self
            .files
            .get(&origin.path)
            .and_then(|d| d.get(origin.index))
            .map_or(0, |d| d.line);
        format!("{}:{line}", self.name(&origin.path))
    }
}

/// The document `owner` names: from `local` (the documents of `path`, the
/// file being replaced, which are not in `files` while it is replaced) or
/// from the stored files.
fn doc_at<'a>(
    files: &'a HashMap<RelPath, Vec<Doc>>,
    path: &RelPath,
    local: &'a [Doc],
    owner: &Origin,
) -> Option<&'a Doc> {
    if owner.path == *path {
        local.get(owner.index)
    } else {
        files.get(&owner.path).and_then(|d| d.get(owner.index))
    }
}

/// The net per-key changes of the `dirty` keys since they were last drained, sorted by key;
/// empties `dirty`, forgets keys without owners once their removal is handed out.
pub(crate) fn drain_updates<O>(
    keys: &mut HashMap<Key, KeyEntry<O>>,
    dirty: &mut Vec<Key>,
) -> Vec<Update> {
    let mut dirty = std::mem::take(dirty);
    dirty.sort_unstable();
    let mut updates = Vec::new();
    for key in dirty {
        let Some(entry) = keys.get_mut(&key) else {
            continue;
        };
        entry.dirty = false;
        let effective = entry.claims.first().map(|(_, v)| v);
        if effective != entry.emitted.as_ref() {
            let update_type = match (&entry.emitted, effective) {
                (_, None) => UpdateType::Deleted,
                (None, Some(_)) => UpdateType::New,
                (Some(_), Some(_)) => UpdateType::Updated,
            };
            let value = effective.cloned();
            entry.emitted = value.clone();
            let done = entry.claims.is_empty();
            if done {
                keys.remove(&key);
            }
            updates.push(Update {
                key,
                value,
                update_type,
            });
        } else if entry.claims.is_empty() {
            keys.remove(&key);
        }
    }
    updates
}

/// Adds `owner`'s value for `key`.  Returns another owner of the same key
/// if there is one (a duplicate worth reporting).
pub(crate) fn contribute<O: Ord + Clone>(
    keys: &mut HashMap<Key, KeyEntry<O>>,
    dirty: &mut Vec<Key>,
    key: &Key,
    owner: &O,
    value: Value,
) -> Option<O> {
    let entry = keys.entry(key.clone()).or_default();
    match entry.claims.binary_search_by(|(o, _)| o.cmp(owner)) {
        Ok(pos) => entry.claims[pos].1 = value,
        Err(pos) => entry.claims.insert(pos, (owner.clone(), value)),
    }
    let other = entry
        .claims
        .iter()
        .find(|(o, _)| o != owner)
        .map(|(o, _)| o.clone());
    if !entry.dirty {
        entry.dirty = true;
        dirty.push(key.clone());
    }
    other
}

/// Removes `owner`'s value for `key`, if any.
pub(crate) fn withdraw<O: Ord>(
    keys: &mut HashMap<Key, KeyEntry<O>>,
    dirty: &mut Vec<Key>,
    key: &Key,
    owner: &O,
) {
    if let Some(entry) = keys.get_mut(key) {
        if let Ok(pos) = entry.claims.binary_search_by(|(o, _)| o.cmp(owner)) {
            entry.claims.remove(pos);
            if !entry.dirty {
                entry.dirty = true;
                dirty.push(key.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::model::Tier;
    use crate::resources::Kind;

    fn tier_doc(name: &str, order: f64, line: usize) -> Doc {
        Doc {
            id: ResourceId {
                kind: Kind::Tier,
                namespace: None,
                name: name.to_string(),
            },
            line,
            result: Ok(vec![(
                Key::Tier(name.to_string()),
                Value::Tier(Arc::new(Tier {
                    order: Some(order),
                    ..Tier::default()
                })),
            )]),
        }
    }

    fn invalid_doc(name: &str) -> Doc {
        Doc {
            id: ResourceId {
                kind: Kind::Tier,
                namespace: None,
                name: name.to_string(),
            },
            line: 1,
            result: Err("spec.order: not a number".to_string()),
        }
    }

    fn rel(p: &str) -> RelPath {
        RelPath::new(Path::new(p))
    }

    /// Applies updates to a consumer-side map, as a syncer client would.
    fn apply(state: &mut BTreeMap<Key, Value>, updates: Vec<Update>) {
        for u in updates {
            match u.value {
                Some(v) => {
                    state.insert(u.key, v);
                }
                None => {
                    state.remove(&u.key);
                }
            }
        }
    }

    fn order_of(state: &BTreeMap<Key, Value>, name: &str) -> Option<f64> {
        match state.get(&Key::Tier(name.to_string())) {
            Some(Value::Tier(t)) => t.order,
            _ => None,
        }
    }

    #[test]
    fn rel_paths_sort_bytewise_not_by_component() {
        // '.' (0x2e) < '/' (0x2f): byte-wise "a.b" < "a/b"; component-wise
        // it would be the other way round.
        assert!(rel("a.b/x.yaml") < rel("a/x.yaml"));
        assert!(Path::new("a.b/x.yaml") > Path::new("a/x.yaml"));
    }

    #[test]
    fn duplicate_winner_is_first_path_whatever_the_load_order() {
        for reverse in [false, true] {
            let mut m = Merger::new(Path::new("/ds"));
            let mut state = BTreeMap::new();
            let mut messages = Vec::new();
            let loads = [("a.yaml", 1.0), ("b.yaml", 2.0)];
            let order: Vec<_> = if reverse {
                loads.iter().rev().collect()
            } else {
                loads.iter().collect()
            };
            for (path, o) in order {
                messages.extend(m.replace_file(&rel(path), Some(vec![tier_doc("t", *o, 3)])));
                apply(&mut state, m.take_updates());
            }
            assert_eq!(order_of(&state, "t"), Some(1.0), "reverse={reverse}");
            assert_eq!(messages.len(), 1, "{messages:?}");
            assert!(messages[0].contains("/ds/a.yaml:3") && messages[0].contains("/ds/b.yaml:3"));
        }
    }

    #[test]
    fn deleting_the_winner_lets_the_other_copy_take_over() {
        let mut m = Merger::new(Path::new("/ds"));
        let mut state = BTreeMap::new();
        m.replace_file(&rel("a.yaml"), Some(vec![tier_doc("t", 1.0, 1)]));
        m.replace_file(&rel("b.yaml"), Some(vec![tier_doc("t", 2.0, 1)]));
        apply(&mut state, m.take_updates());
        m.replace_file(&rel("a.yaml"), None);
        let updates = m.take_updates();
        assert_eq!(updates.len(), 1);
        assert_eq!(updates[0].update_type, UpdateType::Updated);
        apply(&mut state, updates);
        assert_eq!(order_of(&state, "t"), Some(2.0));
        m.replace_file(&rel("b.yaml"), None);
        apply(&mut state, m.take_updates());
        assert!(state.is_empty());
    }

    #[test]
    fn invalid_winner_makes_the_resource_absent() {
        let mut m = Merger::new(Path::new("/ds"));
        let mut state = BTreeMap::new();
        m.replace_file(&rel("a.yaml"), Some(vec![tier_doc("t", 1.0, 1)]));
        m.replace_file(&rel("b.yaml"), Some(vec![tier_doc("t", 2.0, 1)]));
        apply(&mut state, m.take_updates());
        m.replace_file(&rel("a.yaml"), Some(vec![invalid_doc("t")]));
        apply(&mut state, m.take_updates());
        assert!(state.is_empty());
    }

    #[test]
    fn first_document_in_a_file_wins_within_that_file() {
        let mut m = Merger::new(Path::new("/ds"));
        let mut state = BTreeMap::new();
        let messages = m.replace_file(
            &rel("a.yaml"),
            Some(vec![tier_doc("t", 1.0, 1), tier_doc("t", 2.0, 9)]),
        );
        apply(&mut state, m.take_updates());
        assert_eq!(order_of(&state, "t"), Some(1.0));
        assert_eq!(messages.len(), 1, "{messages:?}");
    }

    #[test]
    fn same_key_from_two_identities_takes_the_first_path() {
        let other = |order: f64| Doc {
            id: ResourceId {
                kind: Kind::Profile,
                namespace: None,
                name: "t".to_string(),
            },
            ..tier_doc("t", order, 1)
        };
        for reverse in [false, true] {
            let mut m = Merger::new(Path::new("/ds"));
            let mut state = BTreeMap::new();
            let mut messages = Vec::new();
            let mut steps = vec![("a.yaml", tier_doc("t", 1.0, 1)), ("b.yaml", other(2.0))];
            if reverse {
                steps.reverse();
            }
            for (path, doc) in steps {
                messages.extend(m.replace_file(&rel(path), Some(vec![doc])));
                apply(&mut state, m.take_updates());
            }
            assert_eq!(order_of(&state, "t"), Some(1.0));
            assert_eq!(messages.len(), 1, "{messages:?}");
        }
    }

    #[test]
    fn reloading_identical_content_emits_nothing() {
        let mut m = Merger::new(Path::new("/ds"));
        m.replace_file(&rel("a.yaml"), Some(vec![tier_doc("t", 1.0, 1)]));
        assert_eq!(m.take_updates().len(), 1);
        m.replace_file(&rel("a.yaml"), Some(vec![tier_doc("t", 1.0, 1)]));
        assert!(m.take_updates().is_empty());
        // A transient removal undone before the next take is coalesced away.
        m.replace_file(&rel("a.yaml"), None);
        m.replace_file(&rel("a.yaml"), Some(vec![tier_doc("t", 1.0, 1)]));
        assert!(m.take_updates().is_empty());
    }

    #[test]
    fn an_edit_touches_only_the_changed_documents_keys() {
        let mut m = Merger::new(Path::new("/ds"));
        let file = |changed: f64| -> Vec<Doc> {
            (0..100)
                .map(|i| {
                    let order = if i == 42 { changed } else { f64::from(i) };
                    tier_doc(&format!("t{i}"), order, i as usize * 5 + 1)
                })
                .collect()
        };
        m.replace_file(&rel("a.yaml"), Some(file(42.0)));
        assert_eq!(m.take_updates().len(), 100);
        m.replace_file(&rel("a.yaml"), Some(file(4200.0)));
        assert_eq!(m.dirty_len(), 1, "only t42's key is looked at again");
        let updates = m.take_updates();
        assert_eq!(updates.len(), 1);
        assert_eq!(updates[0].key, Key::Tier("t42".to_string()));
    }

    #[test]
    fn an_unchanged_duplicate_is_reported_again_when_its_file_changes() {
        let mut m = Merger::new(Path::new("/ds"));
        // "t" twice (a duplicate), then "u" with the given order.
        let file = |u: f64| {
            Some(vec![
                tier_doc("t", 1.0, 1),
                tier_doc("t", 2.0, 5),
                tier_doc("u", u, 9),
            ])
        };
        let first = m.replace_file(&rel("a.yaml"), file(1.0));
        assert_eq!(first.len(), 1, "{first:?}");
        let again = m.replace_file(&rel("a.yaml"), file(3.0));
        assert_eq!(again, first);
    }

    /// Docs of one file: (tier name index, order, valid).
    type DocSpec = Vec<(usize, u8, bool)>;

    fn arb_files() -> impl Strategy<Value = Vec<(usize, Option<DocSpec>)>> {
        // (file index, None = delete | docs of (tier name, order, valid)).
        let doc = (0usize..3, 0u8..3, proptest::bool::weighted(0.8));
        let op = (
            0usize..3,
            proptest::option::weighted(0.8, proptest::collection::vec(doc, 0..4)),
        );
        proptest::collection::vec(op, 1..20)
    }

    fn docs_of(spec: &[(usize, u8, bool)]) -> Vec<Doc> {
        spec.iter()
            .map(|(n, o, valid)| {
                let name = format!("t{n}");
                if *valid {
                    tier_doc(&name, f64::from(*o), 1)
                } else {
                    invalid_doc(&name)
                }
            })
            .collect()
    }

    proptest! {
        /// The outcome depends only on the final files, never on the order
        /// in which changes were seen.
        #[test]
        fn incremental_state_equals_fresh_load_in_any_order(ops in arb_files(), reverse: bool) {
            let names = ["a.yaml", "a/b.yaml", "a.b.yaml"];
            let mut m = Merger::new(Path::new("/ds"));
            let mut state = BTreeMap::new();
            let mut last: BTreeMap<usize, DocSpec> = BTreeMap::new();
            for (f, docs) in &ops {
                m.replace_file(&rel(names[*f]), docs.as_ref().map(|d| docs_of(d)));
                match docs {
                    Some(d) => { last.insert(*f, d.clone()); }
                    None => { last.remove(f); }
                }
                apply(&mut state, m.take_updates());
            }
            let mut fresh = Merger::new(Path::new("/ds"));
            let mut files: Vec<_> = last.iter().collect();
            if reverse {
                files.reverse();
            }
            for (f, d) in files {
                fresh.replace_file(&rel(names[*f]), Some(docs_of(d)));
            }
            let mut fresh_state = BTreeMap::new();
            apply(&mut fresh_state, fresh.take_updates());
            prop_assert_eq!(state, fresh_state);
        }
    }
}
