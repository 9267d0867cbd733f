//! Namespaced, bounded, screened provider metadata and its allowlist.

use crate::secrets::{self, SecretRule};
use keel_message::{Bound, CanonicalJson, JsonError, LimitExceeded, Limits, NameProblem};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

/// The longest namespace name, in bytes.
pub const NAMESPACE_MAX_BYTES: usize = 32;

/// Why provider metadata (or an allowlist entry) was rejected.
///
/// [`path`](Self::path) is a JSON path such as
/// `$.openai.headers.authorization`. Member names appear in it only when
/// they are plain (1 to 64 ASCII letters, digits, `_`, `-`) and do not
/// themselves look like a secret; any other member is written by position,
/// `[key#3]` (its 0-based index among its object's members, in sorted
/// order). Values never appear, in `Display` or `Debug`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataError {
    path: String,
    kind: MetadataErrorKind,
}

/// The rule or bound a [`MetadataError`] broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MetadataErrorKind {
    /// Metadata must be a JSON object of namespaces.
    #[error("metadata is not a JSON object (rule metadata.object)")]
    NotObject,
    /// Each namespace holds a JSON object.
    #[error("namespace value is not a JSON object (rule metadata.namespace_object)")]
    NamespaceNotObject,
    /// A namespace name broke `^[a-z][a-z0-9_]{0,31}$`.
    #[error("namespace name {problem} (rule metadata.namespace_name: ^[a-z][a-z0-9_]{{0,31}}$)")]
    InvalidNamespace {
        /// What is wrong, without echoing the name.
        problem: NameProblem,
    },
    /// A count, depth or byte bound was exceeded.
    #[error(transparent)]
    Limit(#[from] LimitExceeded),
    /// A member name in a prohibited category, or one shaped like a secret.
    #[error("member name is prohibited by {rule} (rule metadata.no_secrets)")]
    SecretKey {
        /// The screening rule that matched.
        rule: SecretRule,
    },
    /// A string value shaped like a secret.
    #[error("value is prohibited by {rule} (rule metadata.no_secrets)")]
    SecretValue {
        /// The screening rule that matched.
        rule: SecretRule,
    },
    /// A namespace value broke a canonical JSON rule or bound.
    #[error(transparent)]
    Json(#[from] JsonError),
}

impl MetadataError {
    fn new(path: String, kind: impl Into<MetadataErrorKind>) -> Self {
        MetadataError {
            path,
            kind: kind.into(),
        }
    }

    /// Where the violation is, e.g. `$.openai.headers`.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The rule or bound that was broken.
    pub fn kind(&self) -> &MetadataErrorKind {
        &self.kind
    }
}

impl fmt::Display for MetadataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.kind)
    }
}

impl std::error::Error for MetadataError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.kind)
    }
}

/// Checks the namespace rule `^[a-z][a-z0-9_]{0,31}$`.
fn check_namespace(name: &str) -> Result<(), NameProblem> {
    if name.is_empty() {
        return Err(NameProblem::Empty);
    }
    if name.len() > NAMESPACE_MAX_BYTES {
        return Err(NameProblem::TooLong {
            len: name.len(),
            max: NAMESPACE_MAX_BYTES,
        });
    }
    match name
        .bytes()
        .enumerate()
        .find(|&(i, b)| !(b.is_ascii_lowercase() || (i > 0 && (b.is_ascii_digit() || b == b'_'))))
    {
        Some((offset, _)) => Err(NameProblem::Character { offset }),
        None => Ok(()),
    }
}

// ------------------------------------------------------------- paths ----

#[derive(Clone, Copy)]
enum Seg<'a> {
    Key { name: &'a str, index: usize },
    Index(usize),
}

fn plain_key(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && secrets::screen_value(name).is_none()
}

fn render(path: &[Seg<'_>]) -> String {
    use std::fmt::Write;
    let mut out = String::from("$");
    for seg in path {
        // Writing to a String cannot fail.
        let _ = match *seg {
            Seg::Key { name, .. } if plain_key(name) => write!(out, ".{name}"),
            Seg::Key { index, .. } => write!(out, "[key#{index}]"),
            Seg::Index(i) => write!(out, "[{i}]"),
        };
    }
    out
}

// ------------------------------------------------------------ walking ----

struct Walk<'l> {
    limits: &'l Limits,
    keys: usize,
}

impl Walk<'_> {
    /// Walks the members of an object at nesting `depth` (a namespace's
    /// object is depth 1).
    fn object<'a>(
        &mut self,
        map: &'a Map<String, Value>,
        depth: usize,
        path: &mut Vec<Seg<'a>>,
    ) -> Result<(), MetadataError> {
        for (index, (name, value)) in map.iter().enumerate() {
            path.push(Seg::Key { name, index });
            self.keys += 1;
            Bound::MetadataKeys
                .check(self.limits, self.keys)
                .map_err(|e| MetadataError::new(render(path), e))?;
            if let Some(rule) = secrets::screen_key(name).or_else(|| secrets::screen_value(name)) {
                return Err(MetadataError::new(
                    render(path),
                    MetadataErrorKind::SecretKey { rule },
                ));
            }
            self.value(value, depth, path)?;
            path.pop();
        }
        Ok(())
    }

    /// Walks a member value; `depth` is the nesting of its container.
    fn value<'a>(
        &mut self,
        value: &'a Value,
        depth: usize,
        path: &mut Vec<Seg<'a>>,
    ) -> Result<(), MetadataError> {
        match value {
            Value::String(s) => match secrets::screen_value(s) {
                Some(rule) => Err(MetadataError::new(
                    render(path),
                    MetadataErrorKind::SecretValue { rule },
                )),
                None => Ok(()),
            },
            Value::Object(map) => {
                self.depth(depth + 1, path)?;
                self.object(map, depth + 1, path)
            }
            Value::Array(items) => {
                self.depth(depth + 1, path)?;
                for (i, item) in items.iter().enumerate() {
                    path.push(Seg::Index(i));
                    self.value(item, depth + 1, path)?;
                    path.pop();
                }
                Ok(())
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => Ok(()),
        }
    }

    fn depth(&self, depth: usize, path: &[Seg<'_>]) -> Result<(), MetadataError> {
        Bound::MetadataDepth
            .check(self.limits, depth)
            .map_err(|e| MetadataError::new(render(path), e))
    }
}

// ----------------------------------------------------------- metadata ----

/// Provider-specific safe facts (request ids, system fingerprints, service
/// tiers, …): a JSON object of namespace → JSON object.
///
/// Rules, each a typed [`MetadataError`] naming the rule or bound and the
/// JSON path, never the value:
///
/// - the value is a JSON object, each member a namespace whose value is a
///   JSON object; namespace names follow `^[a-z][a-z0-9_]{0,31}$`;
/// - at most `limits.metadata_namespaces` namespaces;
/// - at most `limits.metadata_keys` member names across all namespaces,
///   counted at every depth (namespace names themselves are not counted);
/// - nesting depth at most `limits.metadata_depth`, where a namespace's own
///   object is depth 1 and each nested object or array adds one;
/// - each namespace value is canonical JSON (`limits.json_bytes`,
///   `limits.json_depth`, the canonical JSON rules), and the canonical
///   encoding of the whole is at most `limits.metadata_bytes`;
/// - no member name (namespace names included) passes
///   [`secrets::screen_key`] or [`secrets::screen_value`], and no string
///   value passes [`secrets::screen_value`]: credentials, headers, prompt and
///   tool content and raw payloads are refused even when they fit.
///
/// Metadata enters events only for namespaces the engine composition has
/// allowlisted: see [`retain_allowed`](Self::retain_allowed) and
/// [`from_value_allowed`](Self::from_value_allowed).
///
/// ```
/// use keel_stream::{MetadataAllowlist, ProviderMetadata};
/// let meta = ProviderMetadata::from_value(&serde_json::json!({
///     "openai": {"system_fingerprint": "fp_44709d6fcb", "request_id": "req_abc123"},
///     "debug": {"region": "eu"}
/// }))?;
/// let allow = MetadataAllowlist::new(["openai"])?;
/// let kept = meta.retain_allowed(&allow);
/// assert_eq!(
///     kept.to_canonical_string(),
///     r#"{"openai":{"request_id":"req_abc123","system_fingerprint":"fp_44709d6fcb"}}"#
/// );
///
/// let err = ProviderMetadata::from_value(&serde_json::json!({
///     "openai": {"headers": {"authorization": "Bearer abc"}}
/// })).unwrap_err();
/// assert_eq!(err.path(), "$.openai.headers");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ProviderMetadata {
    /// Sorted by name; names are plain ASCII, so byte order is RFC 8785
    /// (UTF-16) order and the names need no escaping.
    namespaces: Arc<[(Box<str>, CanonicalJson)]>,
    canonical_len: usize,
}

fn canonical_len_of(namespaces: &[(Box<str>, CanonicalJson)]) -> usize {
    // {"ns":<json>,"ns":<json>}
    2 + namespaces
        .iter()
        .map(|(name, json)| name.len() + 3 + json.len())
        .sum::<usize>()
        + namespaces.len().saturating_sub(1)
}

impl ProviderMetadata {
    /// No metadata: `{}`.
    pub fn empty() -> ProviderMetadata {
        ProviderMetadata {
            namespaces: Arc::from([]),
            canonical_len: 2,
        }
    }

    /// Validates `value` under the default limits.
    pub fn from_value(value: &Value) -> Result<ProviderMetadata, MetadataError> {
        Self::from_value_with(value, Limits::default_ref())
    }

    /// Validates `value` under `limits` (see the type docs for the rules).
    pub fn from_value_with(
        value: &Value,
        limits: &Limits,
    ) -> Result<ProviderMetadata, MetadataError> {
        Self::build(value, limits, |_| true)
    }

    /// Drops every namespace that `allowlist` does not name, *without
    /// inspecting it*, and validates the rest under `limits`.
    ///
    /// This is what the stream validator does with a completion's metadata:
    /// a namespace nobody allowed never enters an event, so a problem inside
    /// it (even a credential) is no reason to fail the model call. The value
    /// must still be a JSON object.
    pub fn from_value_allowed(
        value: &Value,
        allowlist: &MetadataAllowlist,
        limits: &Limits,
    ) -> Result<ProviderMetadata, MetadataError> {
        Self::build(value, limits, |name| allowlist.contains(name))
    }

    fn build(
        value: &Value,
        limits: &Limits,
        keep: impl Fn(&str) -> bool,
    ) -> Result<ProviderMetadata, MetadataError> {
        let Value::Object(top) = value else {
            return Err(MetadataError::new("$".into(), MetadataErrorKind::NotObject));
        };
        let kept = top.iter().enumerate().filter(|(_, (name, _))| keep(name));
        let count = kept.clone().count();
        Bound::MetadataNamespaces
            .check(limits, count)
            .map_err(|e| MetadataError::new("$".into(), e))?;
        let mut walk = Walk { limits, keys: 0 };
        let mut namespaces = Vec::with_capacity(count);
        for (index, (name, ns_value)) in kept {
            let mut path = vec![Seg::Key { name, index }];
            check_namespace(name).map_err(|problem| {
                MetadataError::new(
                    render(&path),
                    MetadataErrorKind::InvalidNamespace { problem },
                )
            })?;
            if let Some(rule) = secrets::screen_key(name) {
                return Err(MetadataError::new(
                    render(&path),
                    MetadataErrorKind::SecretKey { rule },
                ));
            }
            let Value::Object(map) = ns_value else {
                return Err(MetadataError::new(
                    render(&path),
                    MetadataErrorKind::NamespaceNotObject,
                ));
            };
            walk.depth(1, &path)?;
            walk.object(map, 1, &mut path)?;
            let json = CanonicalJson::from_value_with(ns_value, limits)
                .map_err(|e| MetadataError::new(render(&[Seg::Key { name, index }]), e))?;
            namespaces.push((Box::<str>::from(name.as_str()), json));
        }
        // serde_json maps iterate in key order already (BTreeMap, or insertion
        // order with `preserve_order`): sort to be sure either way.
        namespaces.sort_by(|a, b| a.0.cmp(&b.0));
        let canonical_len = canonical_len_of(&namespaces);
        Bound::MetadataBytes
            .check(limits, canonical_len)
            .map_err(|e| MetadataError::new("$".into(), e))?;
        Ok(ProviderMetadata {
            namespaces: namespaces.into(),
            canonical_len,
        })
    }

    /// Only the namespaces `allowlist` names; the others are dropped (not an
    /// error): they never enter events.
    pub fn retain_allowed(&self, allowlist: &MetadataAllowlist) -> ProviderMetadata {
        if self.namespaces.iter().all(|(n, _)| allowlist.contains(n)) {
            return self.clone();
        }
        let namespaces: Vec<_> = self
            .namespaces
            .iter()
            .filter(|(n, _)| allowlist.contains(n))
            .cloned()
            .collect();
        ProviderMetadata {
            canonical_len: canonical_len_of(&namespaces),
            namespaces: namespaces.into(),
        }
    }

    /// Whether there are no namespaces.
    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty()
    }

    /// The number of namespaces.
    pub fn len(&self) -> usize {
        self.namespaces.len()
    }

    /// One namespace's canonical JSON object.
    pub fn namespace(&self, name: &str) -> Option<&CanonicalJson> {
        self.namespaces
            .binary_search_by(|(n, _)| (**n).cmp(name))
            .ok()
            .map(|i| &self.namespaces[i].1)
    }

    /// The namespaces and their canonical JSON objects, sorted by name.
    pub fn namespaces(&self) -> impl Iterator<Item = (&str, &CanonicalJson)> {
        self.namespaces.iter().map(|(n, j)| (&**n, j))
    }

    /// Bytes of the canonical encoding (what `limits.metadata_bytes`
    /// bounds).
    pub fn canonical_len(&self) -> usize {
        self.canonical_len
    }

    /// The RFC 8785 canonical encoding of the whole value.
    pub fn to_canonical_string(&self) -> String {
        let mut out = String::with_capacity(self.canonical_len);
        out.push('{');
        for (i, (name, json)) in self.namespaces.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push('"');
            out.push_str(name);
            out.push_str("\":");
            out.push_str(json.as_str());
        }
        out.push('}');
        out
    }

    /// The value as a `serde_json::Value` (a fresh copy).
    pub fn to_value(&self) -> Value {
        Value::Object(
            self.namespaces
                .iter()
                .map(|(n, j)| (n.to_string(), j.to_value()))
                .collect(),
        )
    }
}

impl Default for ProviderMetadata {
    fn default() -> Self {
        Self::empty()
    }
}

impl fmt::Debug for ProviderMetadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProviderMetadata({})", self.to_canonical_string())
    }
}

impl Serialize for ProviderMetadata {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.namespaces.len()))?;
        for (name, json) in self.namespaces.iter() {
            map.serialize_entry(&**name, json)?;
        }
        map.end()
    }
}

/// Decoding validates under the default limits.
impl<'de> Deserialize<'de> for ProviderMetadata {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        ProviderMetadata::from_value(&value).map_err(serde::de::Error::custom)
    }
}

// ---------------------------------------------------------- allowlist ----

/// The metadata namespaces allowed into events, fixed by engine composition
/// (a scenario's `allow_metadata`). Names follow the namespace rule
/// `^[a-z][a-z0-9_]{0,31}$`.
///
/// ```
/// use keel_stream::MetadataAllowlist;
/// let allow = MetadataAllowlist::new(["openai", "anthropic"])?;
/// assert!(allow.contains("openai") && !allow.contains("debug"));
/// assert!(MetadataAllowlist::new(["OpenAI"]).is_err());
/// # Ok::<(), keel_stream::MetadataError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetadataAllowlist {
    names: BTreeSet<Box<str>>,
}

impl MetadataAllowlist {
    /// Allows nothing: every namespace is dropped.
    pub fn empty() -> MetadataAllowlist {
        Self::default()
    }

    /// Allows these namespaces. An invalid name is an error whose path is
    /// its position, `$[i]`.
    pub fn new<I, S>(names: I) -> Result<MetadataAllowlist, MetadataError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut out = BTreeSet::new();
        for (i, name) in names.into_iter().enumerate() {
            let name = name.as_ref();
            check_namespace(name).map_err(|problem| {
                MetadataError::new(
                    format!("$[{i}]"),
                    MetadataErrorKind::InvalidNamespace { problem },
                )
            })?;
            out.insert(Box::from(name));
        }
        Ok(MetadataAllowlist { names: out })
    }

    /// Whether `namespace` is allowed.
    pub fn contains(&self, namespace: &str) -> bool {
        self.names.contains(namespace)
    }

    /// The allowed names, sorted.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(|n| &**n)
    }

    /// How many names are allowed.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether nothing is allowed.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

impl Serialize for MetadataAllowlist {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.names.iter())
    }
}

/// Decodes a JSON array of namespace names, validating each.
impl<'de> Deserialize<'de> for MetadataAllowlist {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let names = Vec::<String>::deserialize(d)?;
        MetadataAllowlist::new(&names).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::error::Error as _;

    /// `name` against the namespace rule `^[a-z][a-z0-9_]{0,31}$`.
    fn check(name: &str, expected: Result<(), NameProblem>) {
        assert_eq!(check_namespace(name), expected, "{name:?}");
    }

    #[test]
    fn namespace_names_follow_their_rule() {
        check("a", Ok(()));
        check("open_ai2", Ok(()));
        check("a_", Ok(()));
        check("a9", Ok(()));
        check(&"a".repeat(NAMESPACE_MAX_BYTES), Ok(()));
        check("", Err(NameProblem::Empty));
        check(
            &"a".repeat(NAMESPACE_MAX_BYTES + 1),
            Err(NameProblem::TooLong { len: 33, max: 32 }),
        );
        check("9a", Err(NameProblem::Character { offset: 0 }));
        check("_a", Err(NameProblem::Character { offset: 0 }));
        check("aB", Err(NameProblem::Character { offset: 1 }));
        check("a-b", Err(NameProblem::Character { offset: 1 }));
    }

    #[test]
    fn errors_name_path_and_rule_and_chain_to_the_kind() {
        let Err(err) = MetadataAllowlist::new(["ok", "9lives"]) else {
            panic!("9lives is not a namespace name");
        };
        assert_eq!(err.path(), "$[1]");
        assert_eq!(
            err.to_string(),
            "$[1]: namespace name has a disallowed character at byte 0 \
             (rule metadata.namespace_name: ^[a-z][a-z0-9_]{0,31}$)"
        );
        let source = err.source().map(ToString::to_string);
        assert_eq!(source, Some(err.kind().to_string()));
    }

    #[test]
    fn namespaces_iterate_sorted_and_debug_shows_the_canonical_form() {
        let Ok(meta) = ProviderMetadata::from_value(&json!({"zeta": {"b": 1}, "alpha": {}})) else {
            panic!("valid metadata");
        };
        let names: Vec<&str> = meta.namespaces().map(|(name, _)| name).collect();
        assert_eq!(names, ["alpha", "zeta"]);
        assert_eq!(
            format!("{meta:?}"),
            r#"ProviderMetadata({"alpha":{},"zeta":{"b":1}})"#
        );
    }

    #[test]
    fn allowlists_count_their_names() {
        let empty = MetadataAllowlist::empty();
        assert!(empty.is_empty());
        assert_eq!(empty.len(), 0);
        let Ok(two) = MetadataAllowlist::new(["openai", "anthropic", "openai"]) else {
            panic!("valid names");
        };
        assert!(!two.is_empty());
        assert_eq!(two.len(), 2);
        assert_eq!(two.iter().collect::<Vec<_>>(), ["anthropic", "openai"]);
    }
}
