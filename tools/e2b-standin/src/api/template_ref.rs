//! Template references (`namespace/alias:tag`, `alias:tag`, `id`), parsed and normalized as
//! the API does (lowercase, trimmed; `:default` is the default tag).

/// The tag a reference without one means.
pub(crate) const DEFAULT_TAG: &str = "default";

/// A parsed reference: the identifier (`namespace/alias` or `alias`) and the tag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TemplateRef {
    pub(crate) identifier: String,
    pub(crate) tag: String,
}

impl TemplateRef {
    /// Parses a reference, with the API's error text for a malformed one.
    pub(crate) fn parse(input: &str) -> Result<Self, String> {
        let input = input.trim();
        let (identifier, tag) = match input.split_once(':') {
            Some((identifier, tag)) => (identifier, Some(tag)),
            None => (input, None),
        };
        let tag = match tag {
            Some(tag) => clean(tag, "tag", |c| is_id_char(c) || c == '.')?,
            None => DEFAULT_TAG.to_owned(),
        };
        let identifier = match identifier.split_once('/') {
            Some((namespace, alias)) => {
                let namespace = clean(namespace, "namespace", is_id_char)?;
                format!("{namespace}/{}", clean(alias, "template ID", is_id_char)?)
            }
            None => clean(identifier, "template ID", is_id_char)?,
        };
        Ok(Self { identifier, tag })
    }

    /// The alias part of the identifier.
    pub(crate) fn alias(&self) -> &str {
        self.identifier
            .rsplit('/')
            .next()
            .unwrap_or(&self.identifier)
    }

    /// The namespace, when the reference names one.
    pub(crate) fn namespace(&self) -> Option<&str> {
        self.identifier
            .split_once('/')
            .map(|(namespace, _)| namespace)
    }
}

fn is_id_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_'
}

fn clean(value: &str, what: &str, allowed: impl Fn(char) -> bool) -> Result<String, String> {
    let cleaned = value.trim().to_ascii_lowercase();
    if cleaned.is_empty() || !cleaned.chars().all(allowed) {
        return Err(format!("invalid {what}: {value}"));
    }
    Ok(cleaned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_the_api() {
        let r = TemplateRef::parse("abc123:default").unwrap();
        assert_eq!(
            (r.identifier.as_str(), r.tag.as_str()),
            ("abc123", "default")
        );
        let r = TemplateRef::parse(" Team/My-Snap:V2 ").unwrap();
        assert_eq!(
            (r.identifier.as_str(), r.tag.as_str(), r.alias()),
            ("team/my-snap", "v2", "my-snap")
        );
        assert_eq!(r.namespace(), Some("team"));
        assert_eq!(TemplateRef::parse("base").unwrap().tag, "default");
        assert_eq!(
            TemplateRef::parse("a b").unwrap_err(),
            "invalid template ID: a b"
        );
        assert!(TemplateRef::parse("x:").is_err());
    }
}
