//! Rebuno tools as rig [`DynamicTool`]s.

use std::sync::Arc;

use rig_core::completion::message::ToolName;
use rig_core::tool::{DynamicTool, ToolErrorKind, ToolExecutionError, ToolOutput};
use serde_json::{Value, json};

use crate::error::{Error, ErrorKind, Result};
use crate::tool::DynTool;

/// The tool as a rig [`DynamicTool`].
///
/// # Errors
///
/// [`ErrorKind::Config`] when the tool's name is empty.
pub fn dynamic_tool(tool: Arc<dyn DynTool>) -> Result<DynamicTool> {
    let spec = tool.spec();
    let name = ToolName::new(spec.name.clone())
        .map_err(|e| Error::new(ErrorKind::Config, e.to_string()))?;
    let schema = spec
        .input_schema
        .clone()
        .unwrap_or_else(|| json!({ "type": "object" }));
    let description = spec.description.clone();
    Ok(DynamicTool::new(
        name,
        description,
        schema,
        move |args: Value| {
            let tool = Arc::clone(&tool);
            Box::pin(async move {
                tool.call_json(args)
                    .await
                    .map(ToolOutput::json)
                    .map_err(to_rig)
            })
        },
    ))
}

/// A Rebuno error as rig reports a tool failure to the model.
fn to_rig(error: Error) -> ToolExecutionError {
    let kind = match error.kind() {
        ErrorKind::Serde => ToolErrorKind::InvalidArgs,
        ErrorKind::RateLimited => ToolErrorKind::RateLimited,
        ErrorKind::Policy => ToolErrorKind::PermissionDenied,
        ErrorKind::Network => ToolErrorKind::Network,
        ErrorKind::Blocked
        | ErrorKind::Terminated
        | ErrorKind::LeaseSuperseded
        | ErrorKind::DeadlineReached => ToolErrorKind::Cancelled,
        _ => ToolErrorKind::Other,
    };
    ToolExecutionError::new(kind, error.to_string())
}
