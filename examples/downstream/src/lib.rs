//! A downstream crate's own tool: converts Celsius to Fahrenheit. Its
//! tests (tests/) drive it through the Keel engine with keel-testkit.

use keel_engine::{Tool, ToolFuture, ToolInvocation, ToolOutput};
use keel_message::{ToolDefinition, ToolSpec};

/// The tool's definition, checked at compile time.
pub const CONVERT: ToolSpec = ToolSpec::new(
    "celsius_to_fahrenheit",
    "Converts a temperature in degrees Celsius to degrees Fahrenheit",
    r#"{"type":"object","properties":{"celsius":{"type":"number"}},"required":["celsius"]}"#,
);

#[derive(serde::Deserialize)]
struct Args {
    celsius: f64,
}

/// The converter.
pub struct Converter {
    definition: ToolDefinition,
}

impl Converter {
    /// A converter under [`CONVERT`].
    pub fn new() -> Converter {
        Converter {
            definition: CONVERT.definition(),
        }
    }
}

impl Default for Converter {
    fn default() -> Self {
        Converter::new()
    }
}

impl Tool for Converter {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn call(&self, invocation: ToolInvocation) -> ToolFuture {
        let args = invocation.parse_arguments::<Args>();
        Box::pin(async move {
            let args = args?;
            let fahrenheit = args.celsius * 9.0 / 5.0 + 32.0;
            Ok(ToolOutput::new(format!("{fahrenheit} °F")))
        })
    }
}
