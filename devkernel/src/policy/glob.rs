//! Go `path.Match` globs: `*` (no `/`), `?`, `[a-z]`, `[^x]`, `\` escapes.

/// Whether `name` matches the whole `pattern` (a malformed pattern matches nothing).
pub(crate) fn glob_match(pattern: &str, name: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let name: Vec<char> = name.chars().collect();
    matches(&pattern, &name)
}

fn matches(pattern: &[char], name: &[char]) -> bool {
    match pattern.first() {
        None => name.is_empty(),
        Some('*') => {
            let rest = &pattern[1..];
            (0..=name.len())
                .take_while(|&i| i == 0 || name[i - 1] != '/')
                .any(|i| matches(rest, &name[i..]))
        }
        Some(_) => {
            let Some((&ch, tail)) = name.split_first() else {
                return false;
            };
            match single(pattern, ch) {
                Some((true, used)) => matches(&pattern[used..], tail),
                _ => false,
            }
        }
    }
}

/// Matches one non-star pattern item against `ch`: (matched, pattern chars used).
fn single(pattern: &[char], ch: char) -> Option<(bool, usize)> {
    match pattern[0] {
        '?' => Some((ch != '/', 1)),
        '\\' => pattern.get(1).map(|&lit| (lit == ch, 2)),
        '[' => class(pattern, ch),
        lit => Some((lit == ch, 1)),
    }
}

fn class(pattern: &[char], ch: char) -> Option<(bool, usize)> {
    let mut i = 1;
    let negate = pattern.get(i) == Some(&'^');
    if negate {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    loop {
        let c = *pattern.get(i)?;
        if c == ']' && !first {
            i += 1;
            break;
        }
        first = false;
        let (lo, next) = class_char(pattern, i)?;
        i = next;
        let hi = if pattern.get(i) == Some(&'-') && pattern.get(i + 1) != Some(&']') {
            let (hi, next) = class_char(pattern, i + 1)?;
            i = next;
            hi
        } else {
            lo
        };
        if lo <= ch && ch <= hi {
            matched = true;
        }
    }
    Some((matched != negate && ch != '/', i))
}

fn class_char(pattern: &[char], i: usize) -> Option<(char, usize)> {
    match pattern.get(i)? {
        '\\' => pattern.get(i + 1).map(|&c| (c, i + 2)),
        &c => Some((c, i + 1)),
    }
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn go_path_match_semantics() {
        assert!(glob_match("search*", "search_web"));
        assert!(glob_match("*", "anything"));
        assert!(!glob_match("*", "a/b"));
        assert!(glob_match("fs.?ead", "fs.read"));
        assert!(glob_match("[a-c]x", "bx"));
        assert!(!glob_match("[^a-c]x", "bx"));
        assert!(glob_match("a\\*", "a*"));
        assert!(!glob_match("send_email", "send_emails"));
    }
}
