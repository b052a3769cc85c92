//! Loopback ports for servers the tests start in other processes (Python agents and fixtures,
//! an OTLP collector): chosen here, bound there a moment later.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::Mutex;

/// A loopback port that was free a moment ago and that nothing else will be handed meanwhile.
///
/// A port from bind(0) comes from the kernel's ephemeral range, which every outgoing connection
/// on the machine also draws from, so it can be taken between this probe and the child's bind
/// (CI compiles the Workers tools beside the tests). These ports come from the 6,000 that start
/// 18,000 below that range (`tests/workers/test.mjs` and `scripts/fresh-projects.sh` take the
/// 12,000 above them), and none is handed out twice in one test process.
pub fn free_port() -> u16 {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let Some(low) = ephemeral_low()
        .checked_sub(18_000)
        .filter(|low| *low >= 1024)
    else {
        return bound_by_kernel(); // an unusual range: the window stays
    };
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    // Where to start looking: differs between processes, so two test binaries seldom collide.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let start = (std::process::id() ^ nanos) as u16;
    for step in 0..6_000u16 {
        let port = low + (start.wrapping_add(step.wrapping_mul(997)) % 6_000);
        if !handed_out.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.insert(port);
            return port;
        }
    }
    panic!("no free loopback port in {low}-{}", low + 5_999);
}

/// The first port of Linux's ephemeral range (32768 when it cannot be read).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

fn bound_by_kernel() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a probe port");
    listener.local_addr().expect("probe addr").port()
}
