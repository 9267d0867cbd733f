//! [`ToolSet`]: tools by name, with their definitions in the order the
//! model is shown them. The builder fills the engine's, composition adds a
//! request's, and the run loop adds each turn's tool-source tools.

use crate::tool::Tool;
use keel_message::{ToolDefinition, ToolName};
use std::collections::HashMap;
use std::sync::Arc;

/// Tools by name, and their definitions in registration order (the order
/// the model is shown them).
#[derive(Default, Clone)]
pub(crate) struct ToolSet {
    by_name: HashMap<ToolName, Arc<dyn Tool>>,
    definitions: Vec<ToolDefinition>,
}

impl ToolSet {
    /// Adds `tool`; false (and nothing added) when its name is taken.
    pub(crate) fn insert(&mut self, tool: Arc<dyn Tool>) -> bool {
        let definition = tool.definition().clone();
        self.insert_as(tool, definition)
    }
    /// Adds `tool` under `definition` (what its `definition()` returned,
    /// read once); false (and nothing added) when the name is taken.
    pub(crate) fn insert_as(&mut self, tool: Arc<dyn Tool>, definition: ToolDefinition) -> bool {
        if self.by_name.contains_key(definition.name()) {
            return false;
        }
        self.by_name.insert(definition.name().clone(), tool);
        self.definitions.push(definition);
        true
    }
    pub(crate) fn get(&self, name: &ToolName) -> Option<&Arc<dyn Tool>> {
        self.by_name.get(name)
    }
    pub(crate) fn tools(&self) -> impl Iterator<Item = &Arc<dyn Tool>> {
        self.by_name.values()
    }
    pub(crate) fn definitions(&self) -> Arc<[ToolDefinition]> {
        self.definitions.clone().into()
    }
    pub(crate) fn names(&self) -> Vec<&ToolName> {
        self.definitions.iter().map(|d| d.name()).collect()
    }
}
