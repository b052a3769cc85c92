//! Target globs: `*` (any run of characters), `?` (one character), `[a-z]` / `[^x]` classes and
//! `\` escapes. Unlike a file-path glob, `*` and `?` also match `/`, so `mcp/*delete` covers
//! `mcp/nested/fs_delete` (Go's `TestTargetGlobsMatchAcrossSlash`).
//!
//! The syntax is Go's `path.Match` syntax, checked when the bundle loads: an unclosed class, a
//! class item that is a bare `-` or a leading `]`, a range running backwards or a trailing `\`
//! refuse the bundle (`TestMalformedTargetGlobIsRejectedAtLoad`).
//!
//! A glob compiles to an anchored regular expression, so matching takes linear time whatever
//! the stars (`*a*a*a*a*a*a*a*a*b` against thousands of `a`s included).

use std::iter::Peekable;
use std::str::Chars;

use regex::Regex;

/// A compiled target glob.
#[derive(Debug, Clone)]
pub(crate) struct Glob(Regex);

impl Glob {
    /// Compiles `pattern`; the error says what is malformed.
    pub(crate) fn new(pattern: &str) -> Result<Self, String> {
        let mut expr = String::from("(?s)^(?:");
        let mut chars = pattern.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '*' => expr.push_str(".*"),
                '?' => expr.push('.'),
                '\\' => {
                    let lit = chars.next().ok_or("a trailing `\\` escapes nothing")?;
                    push_literal(&mut expr, lit);
                }
                '[' => push_class(&mut expr, &mut chars)?,
                lit => push_literal(&mut expr, lit),
            }
        }
        expr.push_str(")$");
        Regex::new(&expr).map(Self).map_err(|e| e.to_string())
    }

    /// Whether the whole of `name` matches.
    pub(crate) fn is_match(&self, name: &str) -> bool {
        self.0.is_match(name)
    }
}

/// Appends `c` as a regex literal.
fn push_literal(expr: &mut String, c: char) {
    expr.push_str(&regex::escape(c.encode_utf8(&mut [0; 4])));
}

/// Reads a class after its `[` and appends it as a regex class.
fn push_class(expr: &mut String, chars: &mut Peekable<Chars<'_>>) -> Result<(), String> {
    expr.push('[');
    if chars.next_if_eq(&'^').is_some() {
        expr.push('^');
    }
    let mut items = 0;
    loop {
        if items > 0 && chars.next_if_eq(&']').is_some() {
            break;
        }
        let lo = class_char(chars)?;
        let hi = if chars.next_if_eq(&'-').is_some() {
            class_char(chars)?
        } else {
            lo
        };
        if lo > hi {
            return Err(format!("the class range {lo}-{hi} runs backwards"));
        }
        expr.push_str(&format!(
            "\\x{{{:X}}}-\\x{{{:X}}}",
            u32::from(lo),
            u32::from(hi)
        ));
        items += 1;
    }
    expr.push(']');
    Ok(())
}

/// One character of a class item: `\` escapes the next; a bare `-` or `]` (where an item must
/// start) and the end of the pattern are errors.
fn class_char(chars: &mut Peekable<Chars<'_>>) -> Result<char, String> {
    match chars.next() {
        None => Err("a `[` class is not closed".into()),
        Some('-' | ']') => Err("a class item cannot be a bare `-` or `]`".into()),
        Some('\\') => chars
            .next()
            .ok_or_else(|| "a trailing `\\` escapes nothing".into()),
        Some(c) => Ok(c),
    }
}

#[cfg(test)]
mod tests {
    use super::Glob;

    fn glob_match(pattern: &str, name: &str) -> bool {
        Glob::new(pattern).unwrap().is_match(name)
    }

    #[test]
    fn stars_classes_and_escapes() {
        assert!(glob_match("search*", "search_web"));
        assert!(glob_match("*", "anything"));
        assert!(glob_match("fs.?ead", "fs.read"));
        assert!(!glob_match("fs.?ead", "fsxread_"));
        assert!(glob_match("[a-c]x", "bx"));
        assert!(!glob_match("[^a-c]x", "bx"));
        assert!(glob_match("a\\*", "a*"));
        assert!(!glob_match("a\\*", "ab"));
        assert!(!glob_match("send_email", "send_emails"));
        assert!(glob_match("x[a\\-z]", "x-"));
        assert!(!glob_match("x[a\\-z]", "xb"));
        assert!(glob_match("[*]x*", "*xy"));
        assert!(glob_match("**", "abc"));
        assert!(glob_match("a.b", "a.b"));
        assert!(!glob_match("a.b", "axb"));
        assert!(glob_match("", ""));
        assert!(!glob_match("", "a"));
    }

    #[test]
    fn stars_and_question_marks_cross_slashes() {
        assert!(glob_match("*", "a/b"));
        assert!(glob_match("mcp/*delete", "mcp/nested/fs_delete"));
        assert!(glob_match("*.txt", "dir/notes.txt"));
        assert!(glob_match("a?b", "a/b"));
        assert!(glob_match("a[^x]b", "a/b"));
        assert!(glob_match("*", "line\nbreak"));
        assert!(!glob_match("a*b*c", "abbbcd"));
    }

    #[test]
    fn malformed_patterns_are_errors() {
        for bad in [
            "fs_[", "fs_\\", "[a-", "[a-]", "[-a]", "[]", "[]a]", "[^]", "[z-a]", "[a-b-c]", "[\\",
        ] {
            assert!(Glob::new(bad).is_err(), "{bad:?}");
        }
        for good in ["[\\]]", "[\\-]", "a]", "[a-a]", "[^a]", "é[à-ü]?"] {
            assert!(Glob::new(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn many_stars_against_a_long_name_stay_fast() {
        let name = "a".repeat(5_000);
        assert!(!glob_match("*a*a*a*a*a*a*a*a*b", &name));
        assert!(glob_match("*a*a*a*a*a*a*a*a*a", &name));
    }
}
