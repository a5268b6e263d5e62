//! Filters on indexed fields.

use serde::{Deserialize, Serialize};

use crate::line::IndexValue;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FilterOp {
    /// Equal (JSON equality; absent equals null).
    Eq,
    /// Not equal (absent fields match unless the value is null).
    Ne,
    /// Less than: integers with integers, strings with strings (byte order), bools.
    Lt,
    Le,
    Gt,
    Ge,
    /// A string field containing the text, or a list field containing the element.
    Contains,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Filter {
    pub field: String,
    pub op: FilterOp,
    pub value: serde_json::Value,
}

impl Filter {
    pub fn new(field: &str, op: FilterOp, value: impl Into<serde_json::Value>) -> Filter {
        Filter {
            field: field.to_string(),
            op,
            value: value.into(),
        }
    }
    pub fn eq(field: &str, value: impl Into<serde_json::Value>) -> Filter {
        Filter::new(field, FilterOp::Eq, value)
    }
    pub fn ne(field: &str, value: impl Into<serde_json::Value>) -> Filter {
        Filter::new(field, FilterOp::Ne, value)
    }
    pub fn lt(field: &str, value: impl Into<serde_json::Value>) -> Filter {
        Filter::new(field, FilterOp::Lt, value)
    }
    pub fn gt(field: &str, value: impl Into<serde_json::Value>) -> Filter {
        Filter::new(field, FilterOp::Gt, value)
    }
    pub fn contains(field: &str, value: impl Into<serde_json::Value>) -> Filter {
        Filter::new(field, FilterOp::Contains, value)
    }
}

/// Whether a record's value of the field passes `op target`.
pub fn matches(value: &IndexValue, op: FilterOp, target: &IndexValue) -> bool {
    use std::cmp::Ordering::*;
    let cmp = || value.comparable(target).then(|| value.cmp(target));
    match op {
        FilterOp::Eq => value == target,
        FilterOp::Ne => value != target,
        FilterOp::Lt => cmp() == Some(Less),
        FilterOp::Le => matches!(cmp(), Some(Less | Equal)),
        FilterOp::Gt => cmp() == Some(Greater),
        FilterOp::Ge => matches!(cmp(), Some(Greater | Equal)),
        FilterOp::Contains => match (value, target) {
            (IndexValue::Str(s), IndexValue::Str(t)) => s.contains(&**t),
            (IndexValue::List(items), t) => items.contains(t),
            _ => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn v(j: serde_json::Value) -> IndexValue {
        IndexValue::from_json(&j)
    }

    #[test]
    fn semantics() {
        assert!(matches(&v(json!("a")), FilterOp::Eq, &v(json!("a"))));
        assert!(matches(&v(json!(null)), FilterOp::Ne, &v(json!("a"))));
        assert!(matches(&v(json!(3)), FilterOp::Lt, &v(json!(4))));
        assert!(!matches(&v(json!("3")), FilterOp::Lt, &v(json!(4))));
        assert!(!matches(&v(json!(null)), FilterOp::Gt, &v(json!(4))));
        assert!(matches(&v(json!(4)), FilterOp::Ge, &v(json!(4))));
        assert!(matches(
            &v(json!("hello")),
            FilterOp::Contains,
            &v(json!("ell"))
        ));
        assert!(matches(
            &v(json!(["a", "b"])),
            FilterOp::Contains,
            &v(json!("b"))
        ));
        assert!(!matches(
            &v(json!(["a", "b"])),
            FilterOp::Contains,
            &v(json!("x"))
        ));
    }
}
