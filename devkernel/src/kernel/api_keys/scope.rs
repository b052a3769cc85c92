//! Bearer scopes (PROTOCOL.md §2.2): write does not imply read.

use std::fmt;

/// One permission an API key can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Scope {
    /// Read executions, events, steps, fork points, streams.
    ExecutionsRead,
    /// Create, cancel and fork executions.
    ExecutionsWrite,
    /// Read approvals.
    ApprovalsRead,
    /// Grant and deny approvals.
    ApprovalsWrite,
    /// Read agents.
    AgentsRead,
    /// Register and delete agents.
    AgentsWrite,
    /// Store, test and override policy bundles.
    PoliciesWrite,
    /// Manage API keys.
    ApiKeysManage,
}

/// Every scope with its wire name.
const ALL: [(Scope, &str); 8] = [
    (Scope::ExecutionsRead, "executions:read"),
    (Scope::ExecutionsWrite, "executions:write"),
    (Scope::ApprovalsRead, "approvals:read"),
    (Scope::ApprovalsWrite, "approvals:write"),
    (Scope::AgentsRead, "agents:read"),
    (Scope::AgentsWrite, "agents:write"),
    (Scope::PoliciesWrite, "policies:write"),
    (Scope::ApiKeysManage, "api_keys:manage"),
];

impl Scope {
    /// The wire name, e.g. `executions:read`.
    pub(crate) fn as_str(self) -> &'static str {
        ALL.iter()
            .find(|(scope, _)| *scope == self)
            .map_or("", |(_, name)| name)
    }

    /// Parses a wire name.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        ALL.iter()
            .find(|(_, name)| *name == text)
            .map(|(scope, _)| *scope)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for (scope, name) in ALL {
            assert_eq!(Scope::parse(name), Some(scope));
            assert_eq!(scope.to_string(), name);
        }
        assert_eq!(Scope::parse("executions:admin"), None);
    }
}
