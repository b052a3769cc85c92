//! JSON Schemas: derived from Rust types (feature `schemars`), and checking an execution's input
//! against the input schema an agent publishes.
//!
//! The check covers what derived schemas (schemars) and hand-written ones mostly use: `type`,
//! `enum`, `const`, `properties`, `required`, `additionalProperties`, `items`, `prefixItems`,
//! `minItems`/`maxItems`, `minLength`/`maxLength`, `minimum`/`maximum` (and their exclusive
//! forms), `allOf`/`anyOf`/`oneOf` and local `$ref`s (`#/$defs/...`, `#/definitions/...`).
//! Other keywords (`pattern`, `format`, `if`, `not`, ...) are not checked: the input still has
//! to deserialize into the handler's type afterwards, so nothing passes that serde refuses.
//! Problems name the place in the input and the expected shape, never an input value (the
//! failure reason is stored by the kernel and shown to whoever reads the execution).

use std::cmp::Ordering;
use std::fmt::Write as _;

use serde_json::{Map, Value};

/// At most this many problems are listed for one input.
pub(crate) const MAX_PROBLEMS: usize = 10;

/// Nested schemas (through `$ref` and combinators) are followed this deep, no further.
const MAX_DEPTH: usize = 64;

/// The JSON Schema of `T` as a JSON value.
#[cfg(feature = "schemars")]
pub(crate) fn of<T: schemars::JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null)
}

/// Why `input` does not match `schema`: `2 errors: input.count: missing; input.name: expected
/// a string, got a number`, listing at most [`MAX_PROBLEMS`]. `None` when it matches.
pub(crate) fn check(schema: &Value, input: &Value) -> Option<String> {
    let mut checker = Checker {
        root: schema,
        problems: Vec::new(),
    };
    checker.value(schema, input, "input", 0);
    let problems = checker.problems;
    if problems.is_empty() {
        return None;
    }
    let count = if problems.len() >= MAX_PROBLEMS {
        format!("{MAX_PROBLEMS} errors or more, the first {MAX_PROBLEMS}")
    } else if problems.len() == 1 {
        "1 error".to_owned()
    } else {
        format!("{} errors", problems.len())
    };
    Some(format!("{count}: {}", problems.join("; ")))
}

/// One walk of an input against a schema.
struct Checker<'s> {
    root: &'s Value,
    problems: Vec<String>,
}

impl<'s> Checker<'s> {
    fn full(&self) -> bool {
        self.problems.len() >= MAX_PROBLEMS
    }

    fn report(&mut self, path: &str, problem: impl std::fmt::Display) {
        if !self.full() {
            self.problems.push(format!("{path}: {problem}"));
        }
    }

    /// Checks `value` (at `path`) against `schema`.
    fn value(&mut self, schema: &'s Value, value: &Value, path: &str, depth: usize) {
        if self.full() || depth > MAX_DEPTH {
            return;
        }
        let rules = match schema {
            Value::Bool(false) => {
                self.report(path, "not allowed here");
                return;
            }
            Value::Object(rules) => rules,
            _ => return,
        };
        if let Some(target) = rules.get("$ref").and_then(Value::as_str)
            && let Some(resolved) = resolve(self.root, target)
        {
            self.value(resolved, value, path, depth + 1);
        }
        if !self.shape(rules, value, path) {
            return;
        }
        for sub in list(rules, "allOf") {
            self.value(sub, value, path, depth + 1);
        }
        for key in ["anyOf", "oneOf"] {
            let branches = list(rules, key);
            if !branches.is_empty() {
                self.any_of(branches, value, path, depth + 1);
            }
        }
        match value {
            Value::Object(fields) => self.object(rules, fields, path, depth),
            Value::Array(items) => self.array(rules, items, path, depth),
            Value::String(text) => self.length(rules, text.chars().count(), path),
            Value::Number(number) => bounds(self, rules, number.as_f64(), path),
            _ => {}
        }
    }

    /// `type`, `enum` and `const`; false when the value's type is wrong (nothing else is
    /// checked then, so one mistake is one problem).
    fn shape(&mut self, rules: &Map<String, Value>, value: &Value, path: &str) -> bool {
        if let Some(expected) = rules.get("type") {
            let names: Vec<&str> = match expected {
                Value::String(name) => vec![name.as_str()],
                Value::Array(names) => names.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            if !names.is_empty() && !names.iter().any(|name| is_type(value, name)) {
                let expected: Vec<String> = names.iter().map(|name| article(name)).collect();
                let got = article(type_of(value));
                self.report(
                    path,
                    format!("expected {}, got {got}", expected.join(" or ")),
                );
                return false;
            }
        }
        if let Some(allowed) = rules.get("enum").and_then(Value::as_array)
            && !allowed.contains(value)
        {
            self.report(path, format!("expected one of {}", listing(allowed)));
        }
        if let Some(constant) = rules.get("const")
            && constant != value
        {
            let expected = listing(std::slice::from_ref(constant));
            self.report(path, format!("expected {expected}"));
        }
        true
    }

    /// `anyOf`/`oneOf`: fine when a branch matches; otherwise the problems of the one branch
    /// the value's type fits, or what the branches expect.
    fn any_of(&mut self, branches: &'s [Value], value: &Value, path: &str, depth: usize) {
        let mut fitting = Vec::new();
        for branch in branches {
            let mut trial = Checker {
                root: self.root,
                problems: Vec::new(),
            };
            trial.value(branch, value, path, depth);
            if trial.problems.is_empty() {
                return;
            }
            let wrong_type = trial.problems.iter().all(|p| is_type_mismatch(p, path));
            if !wrong_type {
                fitting.push(trial.problems);
            }
        }
        match fitting.len() {
            1 => {
                for problem in fitting.into_iter().flatten() {
                    if !self.full() {
                        self.problems.push(problem);
                    }
                }
            }
            0 => self.report(
                path,
                format!("expected {}", branch_types(self.root, branches)),
            ),
            n => self.report(
                path,
                format!("matches none of the {n} forms the schema allows"),
            ),
        }
    }

    fn object(
        &mut self,
        rules: &'s Map<String, Value>,
        fields: &Map<String, Value>,
        path: &str,
        depth: usize,
    ) {
        let properties = rules.get("properties").and_then(Value::as_object);
        for name in list(rules, "required").iter().filter_map(Value::as_str) {
            if !fields.contains_key(name) {
                let at = child(path, name);
                self.report(&at, "missing");
            }
        }
        let extra = rules.get("additionalProperties");
        let open = rules.contains_key("patternProperties");
        for (name, field) in fields {
            let at = child(path, name);
            match properties.and_then(|p| p.get(name)) {
                Some(schema) => self.value(schema, field, &at, depth + 1),
                None if open => {}
                None => match extra {
                    Some(Value::Bool(false)) => {
                        self.report(&at, "unknown field (the schema allows no other fields)");
                    }
                    Some(schema @ Value::Object(_)) => self.value(schema, field, &at, depth + 1),
                    _ => {}
                },
            }
        }
    }

    fn array(&mut self, rules: &'s Map<String, Value>, items: &[Value], path: &str, depth: usize) {
        let count = |key: &str| rules.get(key).and_then(Value::as_u64);
        let len = items.len() as u64;
        if let Some(min) = count("minItems").filter(|min| len < *min) {
            self.report(path, format!("expected at least {min} items, got {len}"));
        }
        if let Some(max) = count("maxItems").filter(|max| len > *max) {
            self.report(path, format!("expected at most {max} items, got {len}"));
        }
        // 2020-12 `prefixItems` + `items`, or draft 7's `items: [...]` (a tuple).
        let (prefix, rest) = match (rules.get("prefixItems"), rules.get("items")) {
            (Some(Value::Array(prefix)), rest) => (prefix.as_slice(), rest),
            (None, Some(Value::Array(prefix))) => (prefix.as_slice(), rules.get("additionalItems")),
            (_, rest) => (&[][..], rest),
        };
        for (index, item) in items.iter().enumerate() {
            let schema = prefix.get(index).or(rest);
            if let Some(schema) = schema {
                let at = format!("{path}[{index}]");
                self.value(schema, item, &at, depth + 1);
            }
        }
    }

    fn length(&mut self, rules: &Map<String, Value>, chars: usize, path: &str) {
        let count = |key: &str| rules.get(key).and_then(Value::as_u64);
        let chars = chars as u64;
        if let Some(min) = count("minLength").filter(|min| chars < *min) {
            self.report(
                path,
                format!("expected at least {min} characters, got {chars}"),
            );
        }
        if let Some(max) = count("maxLength").filter(|max| chars > *max) {
            self.report(
                path,
                format!("expected at most {max} characters, got {chars}"),
            );
        }
    }
}

/// `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum` (the numeric forms).
fn bounds(checker: &mut Checker<'_>, rules: &Map<String, Value>, number: Option<f64>, path: &str) {
    let Some(number) = number else { return };
    let limit = |key: &str| rules.get(key).and_then(Value::as_f64);
    // Each keyword, whether the number may equal its bound, which side it must be on.
    let checks = [
        ("minimum", true, Ordering::Greater, "at least"),
        ("maximum", true, Ordering::Less, "at most"),
        ("exclusiveMinimum", false, Ordering::Greater, "more than"),
        ("exclusiveMaximum", false, Ordering::Less, "less than"),
    ];
    for (key, inclusive, side, words) in checks {
        let holds = |bound: f64| match number.partial_cmp(&bound) {
            Some(Ordering::Equal) => inclusive,
            order => order == Some(side),
        };
        if let Some(bound) = limit(key).filter(|bound| !holds(*bound)) {
            checker.report(path, format!("expected a number {words} {bound}"));
        }
    }
}

/// The schema a local `$ref` points at: `#`, or a JSON Pointer below `#/`.
fn resolve<'s>(root: &'s Value, target: &str) -> Option<&'s Value> {
    let pointer = target.strip_prefix('#')?;
    if pointer.is_empty() {
        return Some(root);
    }
    let mut at = root;
    for token in pointer.strip_prefix('/')?.split('/') {
        let token = token.replace("~1", "/").replace("~0", "~");
        at = match at {
            Value::Object(map) => map.get(&token)?,
            Value::Array(items) => items.get(token.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(at)
}

/// The array under `key`, empty when there is none.
fn list<'s>(rules: &'s Map<String, Value>, key: &str) -> &'s [Value] {
    rules
        .get(key)
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
}

/// `path.name`, or `path["odd name"]` for a name that is no plain identifier.
fn child(path: &str, name: &str) -> String {
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-');
    if plain {
        format!("{path}.{name}")
    } else {
        format!("{path}[{}]", Value::String(name.to_owned()))
    }
}

fn is_type(value: &Value, name: &str) -> bool {
    match name {
        "integer" => value
            .as_f64()
            .is_some_and(|n| n.fract() == 0.0 && n.is_finite()),
        "number" => value.is_number(),
        other => type_of(value) == other,
    }
}

fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `a string`, `an integer`, `null`.
fn article(name: &str) -> String {
    match name {
        "null" => "null".to_owned(),
        "integer" | "array" | "object" => format!("an {name}"),
        _ => format!("a {name}"),
    }
}

/// Whether `problem` is a type mismatch of the value at `path` itself.
fn is_type_mismatch(problem: &str, path: &str) -> bool {
    problem
        .strip_prefix(path)
        .and_then(|rest| rest.strip_prefix(": expected "))
        .is_some_and(|rest| rest.contains(", got "))
}

/// `an object or null`: the types the branches of a combinator expect.
fn branch_types(root: &Value, branches: &[Value]) -> String {
    let mut names: Vec<String> = Vec::new();
    for branch in branches {
        let branch = match branch.get("$ref").and_then(Value::as_str) {
            Some(target) => resolve(root, target).unwrap_or(branch),
            None => branch,
        };
        let types: Vec<&str> = match branch.get("type") {
            Some(Value::String(name)) => vec![name.as_str()],
            Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
            _ => match branch.get("const").or_else(|| branch.get("enum")) {
                Some(_) => vec!["value listed by the schema"],
                None => Vec::new(),
            },
        };
        for name in types.into_iter().map(article) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    if names.is_empty() {
        "one of the forms the schema allows".to_owned()
    } else {
        names.join(" or ")
    }
}

/// Allowed values as JSON, the first five: `"fast", "slow"`.
fn listing(values: &[Value]) -> String {
    let mut text = String::new();
    for (index, value) in values.iter().take(5).enumerate() {
        if index > 0 {
            text.push_str(", ");
        }
        let _ = write!(text, "{value}");
    }
    if values.len() > 5 {
        let _ = write!(text, " (and {} more)", values.len() - 5);
    }
    text
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn person() -> Value {
        json!({
            "type": "object",
            "properties": {
                "name": { "type": "string", "minLength": 1 },
                "age": { "type": "integer", "minimum": 0 },
                "mode": { "enum": ["fast", "slow"] },
                "tags": { "type": "array", "items": { "type": "string" }, "maxItems": 2 },
                "home": { "anyOf": [{ "$ref": "#/$defs/Address" }, { "type": "null" }] }
            },
            "required": ["name", "age"],
            "additionalProperties": false,
            "$defs": {
                "Address": {
                    "type": "object",
                    "properties": { "city": { "type": "string" } },
                    "required": ["city"]
                }
            }
        })
    }

    #[test]
    fn a_fitting_input_has_no_problems() {
        let input = json!({"name": "Ada", "age": 36, "mode": "fast", "tags": ["x"],
                           "home": {"city": "London"}});
        assert_eq!(check(&person(), &input), None);
        assert_eq!(
            check(&person(), &json!({"name": "Ada", "age": 1, "home": null})),
            None
        );
        assert_eq!(check(&json!(true), &json!(1)), None);
    }

    #[test]
    fn every_problem_is_listed_with_its_place() {
        let input = json!({"age": "old", "mode": "medium", "tags": ["a", 2, "c"],
                           "home": {}, "extra": 1});
        let text = check(&person(), &input).unwrap();
        let (count, listed) = text.split_once(": ").unwrap();
        assert_eq!(count, "7 errors");
        let mut problems: Vec<&str> = listed.split("; ").collect();
        problems.sort_unstable();
        assert_eq!(
            problems,
            [
                "input.age: expected an integer, got a string",
                "input.extra: unknown field (the schema allows no other fields)",
                "input.home.city: missing",
                "input.mode: expected one of \"fast\", \"slow\"",
                "input.name: missing",
                "input.tags: expected at most 2 items, got 3",
                "input.tags[1]: expected a string, got a number",
            ]
        );
    }

    #[test]
    fn values_are_never_shown_and_the_list_is_bounded() {
        let schema = json!({"type": "object", "additionalProperties": {"type": "integer"}});
        let fields: Map<String, Value> = (0..20)
            .map(|i| (format!("f{i:02}"), json!("secret-value")))
            .collect();
        let text = check(&schema, &Value::Object(fields)).unwrap();
        assert!(
            text.starts_with("10 errors or more, the first 10: "),
            "{text}"
        );
        assert_eq!(text.matches("expected an integer").count(), MAX_PROBLEMS);
        assert!(!text.contains("secret-value"), "{text}");
    }

    #[test]
    fn bounds_are_inclusive_or_exclusive() {
        let schema = json!({"type": "number", "minimum": 1, "exclusiveMaximum": 3});
        for fits in [1.0, 2.5] {
            assert_eq!(check(&schema, &json!(fits)), None, "{fits}");
        }
        assert_eq!(
            check(&schema, &json!(3)).unwrap(),
            "1 error: input: expected a number less than 3"
        );
        assert_eq!(
            check(&schema, &json!(0.5)).unwrap(),
            "1 error: input: expected a number at least 1"
        );
    }

    #[test]
    fn combinators_report_the_branch_the_value_fits() {
        let schema = person();
        let wrong = check(&schema, &json!({"name": "A", "age": 1, "home": 3})).unwrap();
        assert_eq!(wrong, "1 error: input.home: expected an object or null");
        let tuple =
            json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]});
        assert_eq!(
            check(&tuple, &json!(["a", "b"])).unwrap(),
            "1 error: input[1]: expected an integer, got a string"
        );
        let odd = json!({"type": "object", "required": ["a b"]});
        assert_eq!(
            check(&odd, &json!({})).unwrap(),
            "1 error: input[\"a b\"]: missing"
        );
        let looping = json!({"$ref": "#"});
        assert_eq!(check(&looping, &json!(1)), None);
    }
}
