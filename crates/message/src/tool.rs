//! Tool definitions: what the model is told it may call.

use crate::canonical::CanonicalJson;
use crate::error::{MessageError, MessageErrorKind};
use crate::limits::{Bound, Limits};
use crate::names::ToolName;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

struct ToolInner {
    name: ToolName,
    description: Box<str>,
    parameters: CanonicalJson,
}

/// An immutable tool definition: canonical name, description, and a JSON
/// Schema for the arguments object.
///
/// ```
/// use keel_message::{CanonicalJson, ToolDefinition, ToolName};
/// let tool = ToolDefinition::new(
///     ToolName::parse("get_weather")?,
///     "Current weather for a city",
///     CanonicalJson::parse(r#"{"type":"object","properties":{"city":{"type":"string"}}}"#)?,
/// )?;
/// assert_eq!(tool.name().as_str(), "get_weather");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct ToolDefinition(Arc<ToolInner>);

impl ToolDefinition {
    /// Builds a definition under the default limits.
    pub fn new(
        name: ToolName,
        description: &str,
        parameters: CanonicalJson,
    ) -> Result<ToolDefinition, MessageError> {
        Self::new_with(name, description, parameters, Limits::default_ref())
    }

    /// Builds a definition. Rules: the description is at most
    /// `limits.tool_description_bytes`; the parameters are a JSON object
    /// whose `"type"`, if present, is `"object"` (every provider requires an
    /// object schema for function arguments).
    pub fn new_with(
        name: ToolName,
        description: &str,
        parameters: CanonicalJson,
        limits: &Limits,
    ) -> Result<ToolDefinition, MessageError> {
        Bound::ToolDescriptionBytes
            .check(limits, description.len())
            .map_err(|e| MessageError::new("$.description", e))?;
        Bound::JsonBytes
            .check(limits, parameters.len())
            .map_err(|e| MessageError::new("$.parameters", e))?;
        let object_schema = match parameters.to_value() {
            serde_json::Value::Object(map) => match map.get("type") {
                None => true,
                Some(t) => t == "object",
            },
            _ => false,
        };
        if !object_schema {
            return Err(MessageError::new(
                "$.parameters",
                MessageErrorKind::ParametersNotObjectSchema,
            ));
        }
        Ok(ToolDefinition(Arc::new(ToolInner {
            name,
            description: description.into(),
            parameters,
        })))
    }

    /// A definition from parts a `ToolSpec` has checked against every rule
    /// of [`new_with`](ToolDefinition::new_with) under the default limits.
    pub(crate) fn from_checked_parts(
        name: ToolName,
        description: &str,
        parameters: CanonicalJson,
    ) -> ToolDefinition {
        ToolDefinition(Arc::new(ToolInner {
            name,
            description: description.into(),
            parameters,
        }))
    }

    /// The canonical tool name.
    pub fn name(&self) -> &ToolName {
        &self.0.name
    }
    /// The description shown to the model.
    pub fn description(&self) -> &str {
        &self.0.description
    }
    /// The JSON Schema of the arguments object.
    pub fn parameters(&self) -> &CanonicalJson {
        &self.0.parameters
    }
}

impl PartialEq for ToolDefinition {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || (self.0.name == other.0.name
                && self.0.description == other.0.description
                && self.0.parameters == other.0.parameters)
    }
}
impl Eq for ToolDefinition {}

impl fmt::Debug for ToolDefinition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolDefinition")
            .field("name", &self.0.name)
            .field("description", &self.0.description)
            .field("parameters", &self.0.parameters)
            .finish()
    }
}

#[derive(Serialize)]
struct ToolOut<'a> {
    name: &'a ToolName,
    description: &'a str,
    parameters: &'a CanonicalJson,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolWire {
    name: ToolName,
    #[serde(default)]
    description: String,
    parameters: CanonicalJson,
}

impl ToolWire {
    pub(crate) fn build(self, limits: &Limits) -> Result<ToolDefinition, MessageError> {
        ToolDefinition::new_with(self.name, &self.description, self.parameters, limits)
    }
}

impl Serialize for ToolDefinition {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ToolOut {
            name: &self.0.name,
            description: &self.0.description,
            parameters: &self.0.parameters,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for ToolDefinition {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ToolWire::deserialize(d)?
            .build(Limits::default_ref())
            .map_err(serde::de::Error::custom)
    }
}
