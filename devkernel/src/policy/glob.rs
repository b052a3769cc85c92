//! Go `path.Match` globs: `*` (no `/`), `?`, `[a-z]`, `[^x]`, `\` escapes.

/// Whether `name` matches the whole `pattern` (a malformed pattern matches nothing).
///
/// Like Go's `path.Match`, the pattern is read as star-separated chunks of fixed length, and
/// each chunk takes its leftmost match: polynomial time, where trying every split at every
/// star took exponential time (`*a*a*a*a*a*a*a*a*b` against 45 `a`s: 28 s).
pub(crate) fn glob_match(pattern: &str, name: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let name: Vec<char> = name.chars().collect();
    matches(&pattern, &name)
}

fn matches(mut pattern: &[char], mut name: &[char]) -> bool {
    'chunks: while !pattern.is_empty() {
        let (star, chunk, rest) = scan_chunk(pattern);
        pattern = rest;
        if star && chunk.is_empty() {
            // A trailing star takes the rest of the name, within one path segment.
            return !name.contains(&'/');
        }
        // Without a star the chunk must match here; with one, at the leftmost place it can
        // that leaves a valid remainder (the last chunk must end the name).
        let fits = |left: &[char]| left.is_empty() || !pattern.is_empty();
        if let Some(left) = match_chunk(chunk, name).filter(|left| fits(left)) {
            name = left;
            continue;
        }
        if star {
            for skip in 0..name.len() {
                if name[skip] == '/' {
                    break;
                }
                if let Some(left) = match_chunk(chunk, &name[skip + 1..]).filter(|l| fits(l)) {
                    name = left;
                    continue 'chunks;
                }
            }
        }
        return false;
    }
    name.is_empty()
}

/// Splits off the next chunk: whether stars lead it, the chunk up to the next star outside a
/// class, and the pattern after it.
fn scan_chunk(pattern: &[char]) -> (bool, &[char], &[char]) {
    let stars = pattern.iter().take_while(|&&c| c == '*').count();
    let pattern = &pattern[stars..];
    let mut in_class = false;
    let mut i = 0;
    while i < pattern.len() {
        match pattern[i] {
            '\\' => i += 1,
            '[' => in_class = true,
            ']' => in_class = false,
            '*' if !in_class => break,
            _ => {}
        }
        i += 1;
    }
    let end = i.min(pattern.len());
    (stars > 0, &pattern[..end], &pattern[end..])
}

/// Matches a star-free `chunk` against the start of `name`; the rest of `name` if it does.
fn match_chunk<'n>(mut chunk: &[char], mut name: &'n [char]) -> Option<&'n [char]> {
    while !chunk.is_empty() {
        let (&ch, tail) = name.split_first()?;
        let (true, used) = single(chunk, ch)? else {
            return None;
        };
        chunk = &chunk[used..];
        name = tail;
    }
    Some(name)
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

    #[test]
    fn stars_take_the_leftmost_fit_and_the_last_chunk_ends_the_name() {
        assert!(glob_match("*a*b", "xaxab"));
        assert!(glob_match("a*b*c", "abbbc"));
        assert!(!glob_match("a*b*c", "abbbcd"));
        assert!(glob_match("*.txt", "notes.old.txt"));
        assert!(!glob_match("*.txt", "dir/notes.txt"));
        assert!(glob_match("*/*", "dir/notes"));
        assert!(glob_match("[*]x*", "*xy"));
        assert!(glob_match("a\\**", "a*bc"));
        assert!(glob_match("**", "abc"));
        assert!(!glob_match("[a-", "a"));
    }

    #[test]
    fn many_stars_against_a_long_name_stay_fast() {
        let name = "a".repeat(5_000);
        assert!(!glob_match("*a*a*a*a*a*a*a*a*b", &name));
        assert!(glob_match("*a*a*a*a*a*a*a*a*a", &name));
    }
}
