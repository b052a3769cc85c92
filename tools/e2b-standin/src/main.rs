//! `e2b-standin`: the E2B stand-in as a process.
//!
//! ```text
//! e2b-standin --listen 127.0.0.1:0 --root DIR --api-key KEY [--capture FILE]
//! ```
//!
//! Prints its URL (`http://127.0.0.1:<port>`, for `E2B_API_URL` and `E2B_SANDBOX_URL`) as the
//! first line of stdout, then serves until it gets SIGINT or SIGTERM.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;

use rebuno_e2b_standin::{E2bStandin, StandinConfig};

const USAGE: &str = "usage: e2b-standin --listen ADDR --root DIR --api-key KEY [--capture FILE]";

fn parse_args(args: impl Iterator<Item = String>) -> Result<StandinConfig, String> {
    let (mut listen, mut root, mut key, mut capture) = (None, None, None, None);
    let mut args = args;
    while let Some(flag) = args.next() {
        let slot = match flag.as_str() {
            "--listen" => &mut listen,
            "--root" => &mut root,
            "--api-key" => &mut key,
            "--capture" => &mut capture,
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        };
        *slot = Some(
            args.next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?,
        );
    }
    let root = root.ok_or_else(|| format!("--root is required\n{USAGE}"))?;
    let key = key.ok_or_else(|| format!("--api-key is required\n{USAGE}"))?;
    let mut config = StandinConfig::new(root, key);
    if let Some(listen) = listen {
        let addr: SocketAddr = listen
            .parse()
            .map_err(|e| format!("--listen {listen:?}: {e}"))?;
        config = config.listen(addr);
    }
    if let Some(capture) = capture {
        config = config.capture(capture);
    }
    Ok(config)
}

#[tokio::main]
async fn main() -> ExitCode {
    let config = match parse_args(std::env::args().skip(1)) {
        Ok(config) => config,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let standin = match E2bStandin::start(config) {
        Ok(standin) => standin,
        Err(e) => {
            eprintln!("e2b-standin: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout();
    if writeln!(stdout, "{}", standin.url())
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return ExitCode::FAILURE;
    }
    wait_for_signal().await;
    standin.shutdown().await;
    ExitCode::SUCCESS
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> impl Iterator<Item = String> {
        list.iter()
            .map(|s| (*s).to_owned())
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn parses_the_flags() {
        assert!(
            parse_args(args(&[
                "--root",
                "/tmp/x",
                "--api-key",
                "k",
                "--listen",
                "127.0.0.1:0"
            ]))
            .is_ok()
        );
        assert!(
            parse_args(args(&["--root", "/tmp/x"]))
                .unwrap_err()
                .contains("--api-key")
        );
        assert!(parse_args(args(&["--bogus"])).is_err());
        assert!(
            parse_args(args(&[
                "--root",
                "/r",
                "--api-key",
                "k",
                "--listen",
                "nope"
            ]))
            .is_err()
        );
    }
}
