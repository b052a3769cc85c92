//! A small argument scanner: positionals, `--flag value`, `--flag=value` and switches.

use super::CliError;

/// Scanned arguments of one (sub)command.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Scanned {
    /// Positional arguments in order.
    pub(crate) positional: Vec<String>,
    /// `(flag, value)` pairs in order; switches have an empty value.
    pub(crate) flags: Vec<(String, String)>,
}

impl Scanned {
    /// Splits `args`; flags in `valued` take a value, flags in `switches` take none, any
    /// other `-`-prefixed word is an error. `--` ends flag parsing.
    pub(crate) fn scan(
        args: &[String],
        valued: &[&str],
        switches: &[&str],
    ) -> Result<Self, CliError> {
        let mut scanned = Self::default();
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            if arg == "--" {
                scanned.positional.extend(rest.by_ref().cloned());
                break;
            }
            if !arg.starts_with('-') || arg == "-" {
                scanned.positional.push(arg.clone());
                continue;
            }
            let (flag, inline) = match arg.split_once('=') {
                Some((flag, value)) => (flag, Some(value.to_owned())),
                None => (arg.as_str(), None),
            };
            if switches.contains(&flag) && inline.is_none() {
                scanned.flags.push((flag.to_owned(), String::new()));
            } else if valued.contains(&flag) {
                let value = match inline {
                    Some(value) => value,
                    None => rest
                        .next()
                        .cloned()
                        .ok_or_else(|| CliError::Usage(format!("{flag} needs a value")))?,
                };
                scanned.flags.push((flag.to_owned(), value));
            } else {
                return Err(CliError::Usage(format!("unknown option {arg:?}")));
            }
        }
        Ok(scanned)
    }

    /// The last value of any of `names`.
    pub(crate) fn value(&self, names: &[&str]) -> Option<String> {
        self.flags
            .iter()
            .rev()
            .find(|(flag, _)| names.contains(&flag.as_str()))
            .map(|(_, value)| value.clone())
    }

    /// Whether any of `names` was given.
    pub(crate) fn has(&self, names: &[&str]) -> bool {
        self.flags
            .iter()
            .any(|(flag, _)| names.contains(&flag.as_str()))
    }

    /// Between `min` and `max` positionals, else a usage error naming `what`.
    pub(crate) fn arity(&self, min: usize, max: usize, what: &str) -> Result<(), CliError> {
        let n = self.positional.len();
        if n < min || n > max {
            return Err(CliError::Usage(format!("expected {what}")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(args: &[&str]) -> Result<Scanned, CliError> {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        Scanned::scan(&args, &["--session", "-s"], &["--watch"])
    }

    #[test]
    fn flags_and_positionals() {
        let s = scan(&["a", "--session", "s1", "{}", "--watch"]).unwrap();
        assert_eq!(s.positional, ["a", "{}"]);
        assert_eq!(s.value(&["--session", "-s"]).as_deref(), Some("s1"));
        assert!(s.has(&["--watch"]));
        let s = scan(&["-s=x", "--", "--watch"]).unwrap();
        assert_eq!(s.value(&["--session", "-s"]).as_deref(), Some("x"));
        assert_eq!(s.positional, ["--watch"]);
        assert!(!s.has(&["--watch"]));
    }

    #[test]
    fn errors() {
        assert!(scan(&["--session"]).is_err());
        assert!(scan(&["--bogus"]).is_err());
        assert!(scan(&["--watch=yes"]).is_err());
        assert!(scan(&["a"]).unwrap().arity(2, 2, "two").is_err());
    }
}
