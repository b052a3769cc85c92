//! Query strings (`application/x-www-form-urlencoded`: `+` is a space, `%XX` a byte).

/// The decoded `key=value` pairs of a query string, in order.
pub(crate) fn parse(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(key), decode(value))
        })
        .collect()
}

/// The first value of `key`.
pub(crate) fn get<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

pub(crate) fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match hex(bytes[i + 1]).zip(hex(bytes[i + 2])) {
                Some((hi, lo)) => {
                    out.push(hi << 4 | lo);
                    i += 2;
                }
                None => out.push(b'%'),
            },
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_pairs() {
        let pairs = parse("path=%2Fhome%2Fuser%2Fa+b.txt&username=user&flag&x=%zz%4");
        assert_eq!(get(&pairs, "path"), Some("/home/user/a b.txt"));
        assert_eq!(get(&pairs, "username"), Some("user"));
        assert_eq!(get(&pairs, "flag"), Some(""));
        assert_eq!(get(&pairs, "x"), Some("%zz%4"));
        assert_eq!(get(&pairs, "missing"), None);
    }
}
