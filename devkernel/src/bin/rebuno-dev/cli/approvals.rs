//! `rebuno-dev approvals ...`: list, grant, deny.

use std::io::Write;

use rebuno::wire::{Approval, ApprovalStatus};

use super::args::Scanned;
use super::client::Remote;
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
pub(crate) enum ApprovalsCommand {
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
        "list" | "ls" => parse_list(rest),
        "grant" | "deny" => parse_decide(rest, command == "grant"),
        other => Err(CliError::Usage(format!(
            "unknown approvals command {other:?}"
        ))),
    }
}

/// `approvals list [--status S]`.
fn parse_list(rest: &[String]) -> Result<ApprovalsCommand, CliError> {
    let scanned = Scanned::scan(rest, &["--status"], &[])?;
    scanned.arity(0, 0, "no arguments")?;
    let status = scanned.value(&["--status"]);
    if let Some(name) = &status {
        approval_status(name)?;
    }
    Ok(ApprovalsCommand::List { status })
}

/// `approvals grant|deny <id> [--by NAME] [--reason TEXT]`.
fn parse_decide(rest: &[String], grant: bool) -> Result<ApprovalsCommand, CliError> {
    let scanned = Scanned::scan(rest, &["--by", "--reason"], &[])?;
    scanned.arity(1, 1, "<id>")?;
    Ok(ApprovalsCommand::Decide {
        id: scanned.positional[0].clone(),
        grant,
        by: scanned.value(&["--by"]),
        reason: scanned.value(&["--reason"]),
    })
}

/// The approval status `name` spells; a usage error for any other word.
fn approval_status(name: &str) -> Result<ApprovalStatus, CliError> {
    match serde_json::from_value(serde_json::Value::String(name.to_owned())) {
        Ok(status) if status != ApprovalStatus::Unknown => Ok(status),
        _ => Err(CliError::Usage(format!(
            "bad --status {name:?}: pending, granted, denied or expired"
        ))),
    }
}

/// Runs an `approvals` subcommand.
pub(crate) async fn run(
    remote: &Remote,
    command: ApprovalsCommand,
    out: &mut (dyn Write + Send),
) -> Result<Outcome, CliError> {
    match command {
        ApprovalsCommand::List { status } => {
            let status = match status {
                Some(name) => approval_status(&name)?,
                None => ApprovalStatus::Pending,
            };
            list(remote, status, out).await
        }
        ApprovalsCommand::Decide {
            id,
            grant,
            by,
            reason,
        } => decide(remote, &id, grant, by, reason, out).await,
    }
}

/// `approvals list`: one line per approval with `status`, oldest first.
async fn list(
    remote: &Remote,
    status: ApprovalStatus,
    out: &mut (dyn Write + Send),
) -> Result<Outcome, CliError> {
    let request = remote.client().approvals().status(status).send();
    for approval in remote.call(request).await? {
        writeln!(out, "{}", approval_line(&approval))?;
    }
    Ok(Outcome::Success)
}

/// One approval as a terminal line: `id status execution step-prefix message`.
fn approval_line(approval: &Approval) -> String {
    format!(
        "{}  {:<8} execution {}  step {}  {}",
        approval.id,
        approval.status.as_str(),
        approval.execution_id,
        approval.step_id.get(..12).unwrap_or(""),
        approval.message.as_deref().unwrap_or(""),
    )
}

/// `approvals grant|deny`: decides `id`, by `by` when given, with `reason` as the rationale.
async fn decide(
    remote: &Remote,
    id: &str,
    grant: bool,
    by: Option<String>,
    reason: Option<String>,
    out: &mut (dyn Write + Send),
) -> Result<Outcome, CliError> {
    let client = remote.client();
    let mut decision = if grant {
        client.grant(id)
    } else {
        client.deny(id)
    };
    if let Some(by) = by {
        decision = decision.by(by);
    }
    let decision = decision.rationale(reason.unwrap_or_default());
    remote.call(decision.send()).await?;
    writeln!(out, "{id} {}", if grant { "granted" } else { "denied" })?;
    Ok(Outcome::Success)
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
        assert_eq!(
            parse_words(&["list", "--status", "expired"]).unwrap(),
            ApprovalsCommand::List {
                status: Some("expired".into())
            }
        );
        let error = parse_words(&["list", "--status", "all"]).unwrap_err();
        assert_eq!(error.exit_code(), 2, "{error}");
    }
}
