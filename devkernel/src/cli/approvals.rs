//! `rebuno-dev approvals ...`: list, grant, deny.

use std::io::Write;

use serde_json::{Value, json};

use super::args::Scanned;
use super::client::Client;
use super::{CliError, Outcome};

/// Usage of the `approvals` group.
pub(crate) const USAGE: &str = concat!(
    "\
usage: rebuno-dev [client options] approvals <command> [options]

commands:
  list [--status pending|granted|denied|expired]
                        list approvals (default: pending), oldest first
  grant <id> [--by NAME] [--reason TEXT]
                        let the step run
  deny <id> [--by NAME] [--reason TEXT]
                        refuse the step",
    client_options_help!(),
    exit_status_help!()
);

/// An `approvals` subcommand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalsCommand {
    /// `approvals list`.
    List {
        /// Status filter.
        status: Option<String>,
    },
    /// `approvals grant` / `approvals deny`.
    Decide {
        /// Approval id.
        id: String,
        /// `true` to grant, `false` to deny.
        grant: bool,
        /// `decided_by`.
        by: Option<String>,
        /// `rationale`.
        reason: Option<String>,
    },
}

/// Parses `approvals <command> ...` (without the leading `approvals`).
pub(crate) fn parse(args: &[String]) -> Result<ApprovalsCommand, CliError> {
    let Some((command, rest)) = args.split_first() else {
        return Err(CliError::Usage("approvals needs a command".to_owned()));
    };
    match command.as_str() {
        "list" | "ls" => {
            let scanned = Scanned::scan(rest, &["--status"], &[])?;
            scanned.arity(0, 0, "no arguments")?;
            Ok(ApprovalsCommand::List {
                status: scanned.value(&["--status"]),
            })
        }
        "grant" | "deny" => {
            let scanned = Scanned::scan(rest, &["--by", "--reason"], &[])?;
            scanned.arity(1, 1, "<id>")?;
            Ok(ApprovalsCommand::Decide {
                id: scanned.positional[0].clone(),
                grant: command == "grant",
                by: scanned.value(&["--by"]),
                reason: scanned.value(&["--reason"]),
            })
        }
        other => Err(CliError::Usage(format!(
            "unknown approvals command {other:?}"
        ))),
    }
}

fn text(value: &Value, field: &str) -> String {
    value
        .get(field)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

/// Runs an `approvals` subcommand.
pub(crate) async fn run(
    client: &Client,
    command: ApprovalsCommand,
    out: &mut (dyn Write + Send),
) -> Result<Outcome, CliError> {
    match command {
        ApprovalsCommand::List { status } => {
            let status = status.unwrap_or_else(|| "pending".to_owned());
            let list = client
                .get(&format!("/v0/approvals?status={status}"))
                .await?;
            for approval in list.as_array().into_iter().flatten() {
                writeln!(
                    out,
                    "{}  {:<8} execution {}  step {}  {}",
                    text(approval, "id"),
                    text(approval, "status"),
                    text(approval, "execution_id"),
                    text(approval, "step_id").get(..12).unwrap_or(""),
                    text(approval, "message"),
                )?;
            }
            Ok(Outcome::Success)
        }
        ApprovalsCommand::Decide {
            id,
            grant,
            by,
            reason,
        } => {
            let mut body = json!({"rationale": reason.unwrap_or_default()});
            if let Some(by) = by {
                body["decided_by"] = json!(by);
            }
            let verb = if grant { "grant" } else { "deny" };
            client
                .post(&format!("/v0/approvals/{id}/{verb}"), Some(&body))
                .await?;
            writeln!(out, "{id} {}", if grant { "granted" } else { "denied" })?;
            Ok(Outcome::Success)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_words(words: &[&str]) -> Result<ApprovalsCommand, CliError> {
        let args: Vec<String> = words.iter().map(|s| (*s).to_owned()).collect();
        parse(&args)
    }

    #[test]
    fn parses() {
        assert_eq!(
            parse_words(&["list"]).unwrap(),
            ApprovalsCommand::List { status: None }
        );
        assert_eq!(
            parse_words(&["deny", "a1", "--by", "alice", "--reason=too risky"]).unwrap(),
            ApprovalsCommand::Decide {
                id: "a1".into(),
                grant: false,
                by: Some("alice".into()),
                reason: Some("too risky".into()),
            }
        );
        assert!(matches!(
            parse_words(&["grant", "a1"]).unwrap(),
            ApprovalsCommand::Decide { grant: true, .. }
        ));
        assert!(parse_words(&["grant"]).is_err());
        assert!(parse_words(&["approve", "a1"]).is_err());
    }
}
