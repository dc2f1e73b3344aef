//! Argument checks the schema cannot enforce, with the seed's texts where it has them.

use serde_json::{Map, Value};

use crate::failure::ToolError;

pub fn object<'a>(args: &'a Value, allowed: &[&str]) -> Result<&'a Map<String, Value>, ToolError> {
    let map = args.as_object().ok_or_else(|| ToolError::invalid_args("arguments must be a JSON object"))?;
    if let Some(unknown) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(ToolError::invalid_args(format!("unknown argument \"{unknown}\"")));
    }
    Ok(map)
}

/// A required non-empty string: `<name> must be a non-empty string`.
pub fn non_empty(map: &Map<String, Value>, name: &str) -> Result<String, ToolError> {
    match map.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        _ => Err(ToolError::invalid_args(format!("{name} must be a non-empty string"))),
    }
}

/// A required string, empty allowed.
pub fn string(map: &Map<String, Value>, name: &str) -> Result<String, ToolError> {
    match map.get(name) {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(ToolError::invalid_args(format!("{name} must be a string"))),
    }
}

/// An optional positive integer (null counts as absent).
pub fn positive(map: &Map<String, Value>, name: &str) -> Result<Option<u64>, ToolError> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => Ok(Some(n)),
            _ => Err(ToolError::invalid_args(format!("{name} must be a positive integer"))),
        },
    }
}

/// An optional boolean (null counts as absent).
pub fn boolean(map: &Map<String, Value>, name: &str) -> Result<Option<bool>, ToolError> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ToolError::invalid_args(format!("{name} must be a boolean"))),
    }
}

/// An optional string (null counts as absent).
pub fn optional_string(map: &Map<String, Value>, name: &str) -> Result<Option<String>, ToolError> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ToolError::invalid_args(format!("{name} must be a string"))),
    }
}

/// A required point in the change record: a checkpoint's id, 0 and up.
pub fn point(map: &Map<String, Value>, name: &str) -> Result<u64, ToolError> {
    map.get(name).and_then(Value::as_u64).ok_or_else(|| {
        ToolError::invalid_args(format!("{name} must be a checkpoint's id (a non-negative integer)"))
    })
}
