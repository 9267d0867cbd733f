//! TEMPORARY placeholder, replaced by the real RFC 8785 module.
use crate::limits::{Bound, LimitExceeded, Limits};
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

/// Canonical JSON.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CanonicalJson(Arc<str>);

/// JSON error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JsonError {
    /// syntax
    #[error("invalid JSON at line {line} column {column}")]
    Syntax {
        /// line
        line: usize,
        /// col
        column: usize,
    },
    /// limit
    #[error("{0}")]
    Limit(LimitExceeded),
}

impl JsonError {
    /// rule
    pub fn rule(&self) -> &'static str {
        match self {
            JsonError::Syntax { .. } => "json.syntax",
            JsonError::Limit(l) => l.bound.rule(),
        }
    }
}
impl CanonicalJson {
    /// parse
    pub fn parse(text: &str) -> Result<Self, JsonError> {
        Self::parse_with(text, Limits::default_ref())
    }
    /// parse
    pub fn parse_with(text: &str, limits: &Limits) -> Result<Self, JsonError> {
        let v: Value = serde_json::from_str(text).map_err(|e| JsonError::Syntax {
            line: e.line(),
            column: e.column(),
        })?;
        Self::from_value_with(&v, limits)
    }
    /// from
    pub fn from_value(value: &Value) -> Result<Self, JsonError> {
        Self::from_value_with(value, Limits::default_ref())
    }
    /// from
    pub fn from_value_with(value: &Value, limits: &Limits) -> Result<Self, JsonError> {
        let s = value.to_string();
        Bound::JsonBytes
            .check(limits, s.len())
            .map_err(JsonError::Limit)?;
        Ok(CanonicalJson(s.into()))
    }
    /// str
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// len
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// empty
    pub fn is_empty(&self) -> bool {
        false
    }
    /// value
    pub fn to_value(&self) -> Value {
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }
    /// obj
    pub fn is_object(&self) -> bool {
        self.0.starts_with('{')
    }
}
impl fmt::Debug for CanonicalJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl fmt::Display for CanonicalJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl serde::Serialize for CanonicalJson {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(s)
    }
}
impl<'de> serde::Deserialize<'de> for CanonicalJson {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Self::from_value(&v).map_err(serde::de::Error::custom)
    }
}
/// write
pub fn to_canonical_string(value: &Value) -> Result<String, JsonError> {
    Ok(value.to_string())
}
