// End-to-end test of rebuno-workers in a real Workers runtime (workerd through Miniflare's API)
// against the rebuno dev kernel, all on loopback. Run through ./run.sh, which builds everything.
//
//   REBUNO_DEV_BIN=path/to/rebuno-dev WORKER_BUILD_DIR=../../examples/workers/build node test.mjs
//
// The kernel delivers webhooks to a small Node proxy that forwards them to the Worker and times
// each acknowledgement; a stub OpenAI-style provider answers the durable LLM calls (made
// directly, or through rig's OpenAI-compatible client). A third Worker, built with the `otel`
// feature and given OTEL_EXPORTER_OTLP_ENDPOINT, exports its runs to a real OTLP receiver:
// rotel (an OpenTelemetry collector) forwarding to tests/integration/support/otlp/recorder.py, both from the venv
// whose python is OTLP_PYTHON (scripts/interop-venv.sh; run.sh sets it). The MCP test runs
// tests/integration/mcp/fixture_server.py from the venv whose python is MCP_PYTHON (tests/integration/mcp/setup.sh).
// A fourth, whose REBUNO_URL names a closed port, shows what an unreachable kernel logs. A
// fifth, which the kernel reaches with no proxy in between, is stopped and started again on
// its port mid-run, as a `wrangler dev` restart does.
// What each Worker logs to the console (workerd's structured logs) is kept per agent, printed
// for a failing test, and printed as it comes with WORKERS_LOGS=1. Prints one line per test and
// closes with "N passed, M failed".

import { spawn } from "node:child_process";
import { createHmac } from "node:crypto";
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { createServer, request as httpRequest } from "node:http";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import { Log, LogLevel, Miniflare } from "miniflare";

const AGENT = "workers-example";
// The same Worker with a REBUNO_RUNS Durable Object binding: Durable Object mode.
const AGENT_DO = "workers-durable-object";
// Durable Object mode again, in a runtime of its own: the long run past the idle limit.
const AGENT_IDLE = "workers-do-idle";
// How long that run works: workerd drops an object 70–140 s after its last request or alarm
// (a sweep every 70 s), so a run this long never survives without the heartbeat alarm.
const IDLE_RUN_MS = 150_000;
const IDLE_TEST =
  "Durable Object mode: a 150 s run outlives the idle eviction (70–140 s after the object's last request) on its alarm heartbeat, in one delivery";
// The same Worker with a wrong REBUNO_URL (a closed port): the kernel reaches it, it never
// reaches the kernel.
const AGENT_LOST = "workers-lost-kernel";
// The same Worker in a runtime of its own that a test stops and starts again on the same port,
// as a `wrangler dev` restart does; the kernel delivers to it with no proxy in between, so it
// meets the refused port itself.
const AGENT_RESTART = "workers-restart";
// Its lease, the smallest the kernel takes (below 10 means the default, 120 s).
const RESTART_LEASE_S = 10;
// The outage budget of deploy/workers/README.md ("Outages and leases") with the kernel's
// default 5 attempts: after the lease expires, attempts 2–5 go out at once and 2, 4, 8 s
// apart (each delay plus up to 25 % jitter), so the last one leaves 14 s or more after it.
const RESTART_RETRY_S = 14;
// How long the runtime stays down after the kill. The lease ran from its last renewal,
// between lease/3 before the kill (the SDK heartbeats every third of the lease) and the kill:
// it expires 6.7–10 s after the kill, the last attempt goes out 20.7–24 s after it, and the
// runtime is back (16 s plus its start, about 1 s) at least ~3.5 s before that, after two or
// three attempts have met the refused port. The test states the margin it had, from the
// kernel's reclaim time.
const RESTART_OUTAGE_MS = 16_000;
// The Worker's limits as `wrangler dev` runs it (the SDK's defaults), not the short ones of
// the other Workers: the whole run fits one delivery, and only the outage uses attempts.
const RESTART_VARS = { REBUNO_WAIT_UNTIL_SECONDS: "30", REBUNO_DEADLINE_MARGIN_SECONDS: "10" };
// The same Worker with OTEL_EXPORTER_OTLP_ENDPOINT: it exports its runs over OTLP.
const AGENT_OTEL = "workers-otel";
const OTEL_SERVICE = "workers-e2e";
const OTLP_PYTHON = process.env.OTLP_PYTHON;
// The python of the venv with PyPI's `mcp` (tests/integration/mcp/setup.sh), for the MCP fixture server.
const MCP_PYTHON = process.env.MCP_PYTHON;
// The example agent's policy: every tool allowed but the MCP fixture's `weather`.
const MCP_POLICY = `default_action: allow
rules:
  - id: no-weather
    when: { target: fx_weather }
    then: { decision: deny, reason: "no forecasts at the edge" }`;
const REPO = fileURLToPath(new URL("../..", import.meta.url));
const SECRET = "workers-e2e-secret";
const BUILD = resolve(process.env.WORKER_BUILD_DIR ?? "../../examples/workers/build");
const DEV_BIN = process.env.REBUNO_DEV_BIN;
// The local E2B stand-in (tools/e2b-standin; run.sh sets it) and the key it accepts, given to
// the Worker as the secret E2B_API_KEY.
const E2B_STANDIN_BIN = process.env.E2B_STANDIN_BIN;
const E2B_KEY = "e2b_workers_test_key";
// Short limits so a deadline is reachable in a test: a 6 s budget, no new step in the last 3 s.
const LIMITS = { REBUNO_WAIT_UNTIL_SECONDS: "6", REBUNO_DEADLINE_MARGIN_SECONDS: "3" };

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * A loopback port that was free a moment ago and that nothing else will be handed meanwhile.
 *
 * Workers bind their ports seconds after they are chosen (after the kernel and fixtures start).
 * A port from bind(0) comes from the kernel's ephemeral range, which every outgoing connection
 * on the machine draws from too: in CI, with the fresh projects building and running beside
 * these tests, one was taken in that window (Miniflare's ERR_ADDRESS_IN_USE). So the ports come
 * from the 6,000 that start 12,000 below that range (scripts/fresh-projects.sh takes the 6,000
 * right below it, the Rust tests' tests/integration/support/ports.rs the 6,000 below these), and
 * none is handed out twice.
 */
async function freePort() {
  const low = ephemeralLow() - 12000;
  if (low < 1024) return boundByKernel(); // an unusual range: fall back to bind(0)
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = low + Math.floor(Math.random() * 6000);
    if (!handedOut.has(port) && (await canBind(port))) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error(`no free loopback port in ${low}-${low + 5999}`);
}

const handedOut = new Set();

/** The first port of Linux's ephemeral range (32768 when it cannot be read). */
function ephemeralLow() {
  try {
    return Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]) || 32768;
  } catch {
    return 32768;
  }
}

function canBind(port) {
  return new Promise((ok) => {
    const server = createServer();
    server.once("error", () => ok(false));
    server.listen(port, "127.0.0.1", () => server.close(() => ok(true)));
  });
}

function boundByKernel() {
  return new Promise((ok, fail) => {
    const server = createServer();
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => ok(port));
    });
  });
}

/**
 * Starts rebuno-dev with the agents `{ id: webhookUrl }`, policy bundles `{ id: yaml }` and
 * lease timeouts `{ id: seconds }` (10 s unless given).
 */
async function startKernel(webhooks, policies = {}, leases = {}) {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "rebuno-workers-"));
  const manifest = join(dir, "manifest.yaml");
  const policy = (id) => (policies[id] ? `    policy: |\n${policies[id].replace(/^/gm, "      ")}\n` : "");
  const agents = Object.entries(webhooks).map(
    ([id, url]) =>
      `  - id: ${id}\n    webhook_url: ${url}\n    secret: ${SECRET}\n    lease_timeout_seconds: ${leases[id] ?? 10}\n${policy(id)}`,
  );
  writeFileSync(manifest, `agents:\n${agents.join("")}`);
  const child = spawn(DEV_BIN, ["--config", manifest, "--addr", `127.0.0.1:${port}`], {
    stdio: ["ignore", "ignore", "pipe"],
    env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? "warn" },
  });
  child.stderr.on("data", (chunk) => process.stderr.write(`[kernel] ${chunk}`));
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 200; i++) {
    try {
      if ((await fetch(`${url}/v0/health`)).ok) return { url, child };
    } catch {}
    await sleep(50);
  }
  child.kill();
  throw new Error("dev kernel did not start");
}

const ANSWER = "Hello from the edge";
const PIECES = ["Hello", " from", " the", " edge"];

/**
 * A tiny OpenAI-style provider on loopback: `POST /v1/chat/completions` answers JSON, or with
 * `"stream": true` server-sent events, one `data:` chunk per 150 ms (the last one with the
 * finish reason) and `data: [DONE]`. Counts every request it gets in `hits` and keeps their
 * bodies in `requests`.
 */
async function startStub() {
  const stub = { hits: 0, requests: [] };
  const json = JSON.stringify({
    id: "chatcmpl-test",
    object: "chat.completion",
    model: "gpt-test",
    choices: [{ index: 0, message: { role: "assistant", content: ANSWER }, finish_reason: "stop" }],
  });
  const events = [
    ...PIECES.map(
      (content, i) =>
        `data: ${JSON.stringify({ id: "chatcmpl-test", object: "chat.completion.chunk", model: "gpt-test", choices: [{ index: 0, delta: i === 0 ? { role: "assistant", content } : { content } }] })}\n\n`,
    ),
    // The last chunk carries the finish reason, as OpenAI's do (rig's stream needs it).
    `data: ${JSON.stringify({ id: "chatcmpl-test", object: "chat.completion.chunk", model: "gpt-test", choices: [{ index: 0, delta: {}, finish_reason: "stop" }] })}\n\n`,
    "data: [DONE]\n\n",
  ];
  stub.json = json;
  stub.sse = events.join("");
  const server = createServer(async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    stub.hits++;
    let body = {};
    try {
      body = JSON.parse(Buffer.concat(chunks).toString());
    } catch {}
    stub.requests.push(body);
    const url = new URL(req.url, "http://stub");
    if (req.method !== "POST" || url.pathname !== "/v1/chat/completions") {
      res.writeHead(404, { "content-type": "application/json" });
      res.end('{"error":{"message":"not found"}}');
      return;
    }
    if (body.stream !== true) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(json);
      return;
    }
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    // `?stall=MS`: one event, then silence for MS before the rest. `?every=MS`: the pace.
    const stall = Number(url.searchParams.get("stall") ?? 0);
    const every = Number(url.searchParams.get("every") ?? 150);
    for (const [i, event] of events.entries()) {
      if (res.destroyed) return;
      res.write(event);
      await sleep(i === 0 && stall ? stall : every);
    }
    res.end();
  });
  const port = await freePort();
  await new Promise((ok) => server.listen(port, "127.0.0.1", ok));
  stub.base = `http://127.0.0.1:${port}/v1`;
  stub.url = `${stub.base}/chat/completions`;
  stub.server = server;
  return stub;
}

/**
 * A proxy in front of the Worker that records every delivery: status, ack time and when it
 * arrived (`at`, like `arrivals`, in `performance.now()` ms). A delivery is recorded once the
 * Worker's answer is read, which can be after its run (a quick replay) ended the execution:
 * `settled()` waits for the deliveries under way.
 */
async function startProxy(target) {
  const deliveries = [];
  const arrivals = [];
  let inFlight = 0;
  const server = createServer(async (req, res) => {
    arrivals.push(performance.now());
    inFlight++;
    try {
      await forward(req, res);
    } finally {
      inFlight--;
    }
  });
  const forward = async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const body = Buffer.concat(chunks);
    const started = performance.now();
    const headers = Object.fromEntries(
      Object.entries(req.headers).filter(([k]) => !["host", "connection", "content-length"].includes(k)),
    );
    const response = await fetch(new URL(req.url, target), { method: req.method, headers, body });
    const text = await response.text();
    const ms = performance.now() - started;
    const object = response.headers.get("rebuno-durable-object");
    deliveries.push({ status: response.status, ms, at: started, body: body.toString(), headers, object });
    res.writeHead(response.status, { "content-type": response.headers.get("content-type") ?? "text/plain" });
    res.end(text);
  };
  const settled = async () => {
    for (let i = 0; i < 200 && inFlight > 0; i++) await sleep(25);
  };
  const port = await freePort();
  await new Promise((ok) => server.listen(port, "127.0.0.1", ok));
  return { url: `http://127.0.0.1:${port}/webhook`, deliveries, arrivals, settled, server };
}

/**
 * The MCP fixture (tests/integration/mcp/fixture_server.py on PyPI's `mcp`) over streamable HTTP on
 * loopback, behind a proxy that streams both ways (the server's ping must reach the Worker
 * while the call's event stream is open) and keeps every JSON-RPC message the Worker posts.
 * `record` appends to `effects`.
 */
async function startMcpFixture(python) {
  const dir = mkdtempSync(join(tmpdir(), "rebuno-workers-mcp-"));
  const effects = join(dir, "effects.log");
  const log = join(dir, "server.log");
  const port = await freePort();
  const out = openSync(log, "a");
  // Resumable: its streams carry event ids, and `interrupted` closes its own before answering.
  const child = spawn(python, [join(REPO, "tests/integration/mcp/fixture_server.py"), "streamable-http", String(port), "resumable"], {
    stdio: ["ignore", out, out],
    env: { ...process.env, EFFECT_LOG: effects },
  });
  closeSync(out);
  await listening(port, child, "the MCP fixture", log);
  const posted = [];
  const resumed = [];
  const server = createServer((req, res) => {
    const chunks = [];
    req.on("data", (chunk) => chunks.push(chunk));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      if (req.method === "GET") resumed.push(req.headers);
      if (req.method === "POST") {
        try {
          posted.push(JSON.parse(body.toString()));
        } catch {
          posted.push({ unreadable: body.toString() });
        }
      }
      const upstream = httpRequest(
        { host: "127.0.0.1", port, path: req.url, method: req.method, headers: req.headers },
        (answer) => {
          res.writeHead(answer.statusCode, answer.headers);
          answer.pipe(res);
        },
      );
      upstream.on("error", () => res.destroy());
      upstream.end(body);
    });
  });
  const proxyPort = await freePort();
  await new Promise((ok) => server.listen(proxyPort, "127.0.0.1", ok));
  const stop = () => {
    server.close();
    child.kill();
  };
  return { url: `http://127.0.0.1:${proxyPort}/mcp`, posted, resumed, effects, stop };
}

/**
 * The E2B stand-in (tools/e2b-standin) as a process on loopback: the sandbox REST API and each
 * sandbox's envd on one URL, sandboxes as directories under `root`, every request captured.
 */
async function startE2bStandin(bin) {
  const root = mkdtempSync(join(tmpdir(), "rebuno-workers-e2b-"));
  const capture = join(root, "capture.jsonl");
  const child = spawn(bin, ["--listen", "127.0.0.1:0", "--root", join(root, "data"), "--api-key", E2B_KEY, "--capture", capture], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const url = await new Promise((ok, fail) => {
    let out = "";
    child.stdout.on("data", (chunk) => {
      out += chunk;
      if (out.includes("\n")) ok(out.split("\n")[0].trim());
    });
    child.once("exit", (code) => fail(new Error(`e2b-standin exited (${code}) before printing its URL`)));
  });
  const captured = () =>
    readFileSync(capture, "utf8")
      .split("\n")
      .filter((line) => line)
      .map((line) => JSON.parse(line));
  const sandboxFile = (id, path) => readFileSync(join(root, "data", "sandboxes", id, "fs", "home/user", path), "utf8");
  return { url, captured, sandboxFile, stop: () => child.kill() };
}

/** Resolves once something listens on the loopback `port`; fails if `child` exits first. */
async function listening(port, child, what, log) {
  for (let i = 0; i < 400; i++) {
    if (child.exitCode !== null || child.signalCode !== null) break;
    const up = await new Promise((ok) => {
      const socket = connect(port, "127.0.0.1", () => {
        socket.end();
        ok(true);
      });
      socket.once("error", () => ok(false));
    });
    if (up) return;
    await sleep(50);
  }
  const output = existsSync(log) ? readFileSync(log, "utf8") : "";
  throw new Error(`${what} is not listening on ${port} (exit ${child.exitCode ?? child.signalCode}):\n${output}`);
}

/**
 * A real OTLP/HTTP receiver on loopback, as tests/integration/support/otlp.rs starts it: rotel
 * takes the Worker's OTLP/JSON and forwards it, batched and re-encoded as protobuf, to
 * tests/integration/support/otlp/recorder.py, which decodes it with opentelemetry-proto and appends one JSON line
 * per request. What the test reads is what a collector understood. A 20 ms poll of that file
 * stamps each request with when it arrived (`performance.now()` ms).
 */
async function startReceiver(python) {
  const dir = mkdtempSync(join(tmpdir(), "rebuno-workers-otlp-"));
  const file = join(dir, "received.jsonl");
  const recorderLog = join(dir, "recorder.log");
  const rotelLog = join(dir, "rotel.log");
  const children = [];
  const spawnLogged = (command, args, log) => {
    const fd = openSync(log, "w");
    const child = spawn(command, args, { stdio: ["ignore", fd, fd] });
    closeSync(fd);
    children.push(child);
    return child;
  };
  const stop = () => children.forEach((child) => child.kill());
  try {
    const recorderPort = await freePort();
    const recorder = spawnLogged(python, [join(REPO, "tests/integration/support/otlp/recorder.py"), `${recorderPort}`, file], recorderLog);
    await listening(recorderPort, recorder, "the recorder", recorderLog);
    const rotelPath = await new Promise((ok, fail) => {
      const find = spawn(python, ["-c", "import os, rotel; print(os.path.join(os.path.dirname(rotel.__file__), 'rotel-agent'))"]);
      let out = "";
      find.stdout.on("data", (chunk) => (out += chunk));
      find.once("error", fail);
      find.once("close", (code) => (code === 0 ? ok(out.trim()) : fail(new Error(`${python} cannot import rotel`))));
    });
    const [http, grpc] = [await freePort(), await freePort()];
    // prettier-ignore
    const rotel = spawnLogged(rotelPath, [
      "start",
      "--otlp-http-endpoint", `127.0.0.1:${http}`,
      "--otlp-grpc-endpoint", `127.0.0.1:${grpc}`,
      "--exporter", "otlp",
      "--otlp-exporter-protocol", "http",
      "--otlp-exporter-endpoint", `http://127.0.0.1:${recorderPort}`,
      "--batch-timeout", "50ms",
    ], rotelLog);
    await listening(http, rotel, "rotel", rotelLog);
    const receiver = { endpoint: `http://127.0.0.1:${http}`, entries: [], log: rotelLog, stop };
    let read = 0;
    const poll = () => {
      const text = existsSync(file) ? readFileSync(file, "utf8") : "";
      const lines = text.split("\n");
      lines.pop(); // the part after the last newline: nothing, or a line still being written
      const now = performance.now();
      for (const line of lines.slice(read)) receiver.entries.push({ ...JSON.parse(line), seenAt: now });
      read = Math.max(read, lines.length);
    };
    const timer = setInterval(poll, 20);
    receiver.poll = poll;
    receiver.stop = () => {
      clearInterval(timer);
      stop();
    };
    return receiver;
  } catch (error) {
    stop();
    throw error;
  }
}

/**
 * Every item received of one signal (`resourceSpans`/`scopeSpans`/`spans`, or the metrics'),
 * each with its resource's `service.name` as `service` and its request's `seenAt`. Throws on a
 * request the recorder could not decode.
 */
function received(receiver, signal) {
  const [resources, scopes, items] =
    signal === "traces" ? ["resourceSpans", "scopeSpans", "spans"] : ["resourceMetrics", "scopeMetrics", "metrics"];
  receiver.poll();
  const out = [];
  for (const entry of receiver.entries) {
    if (entry.error) throw new Error(`the recorder could not decode an export: ${JSON.stringify(entry)}`);
    if (entry.signal !== signal) continue;
    for (const resource of entry.body[resources] ?? []) {
      const service = attribute(resource.resource ?? {}, "service.name");
      for (const scope of resource[scopes] ?? []) {
        for (const item of scope[items] ?? []) out.push({ ...item, service, seenAt: entry.seenAt });
      }
    }
  }
  return out;
}

/** An OTLP attribute's value as written (`stringValue`, `boolValue`, `intValue` as a string…). */
function attribute(item, key) {
  const found = (item.attributes ?? []).find((a) => a.key === key);
  return found ? Object.values(found.value ?? {})[0] : undefined;
}

/** Waits until `done(spans)` holds for the spans received; throws with them after `ms`. */
async function waitForSpans(receiver, ms, done) {
  const until = performance.now() + ms;
  for (;;) {
    const spans = received(receiver, "traces");
    if (done(spans)) return spans;
    if (performance.now() > until) {
      const log = readFileSync(receiver.log, "utf8");
      throw new Error(`spans never arrived as expected; got ${JSON.stringify(spans)}\nrotel:\n${log}`);
    }
    await sleep(20);
  }
}

/**
 * The cumulative `rebuno.steps` of `service` as last exported, as `{ "<outcome>": N,
 * replayed: N }` (live steps by outcome, replayed ones in all).
 */
function stepCounts(receiver, service) {
  const last = received(receiver, "metrics")
    .filter((m) => m.name === "rebuno.steps" && m.service === service)
    .at(-1);
  const counts = { replayed: 0 };
  for (const point of last?.sum?.dataPoints ?? []) {
    const key = attribute(point, "rebuno.replayed") === "true" ? "replayed" : attribute(point, "rebuno.outcome");
    counts[key] = (counts[key] ?? 0) + Number(point.asInt);
  }
  return counts;
}

async function kernelJson(kernel, path, init) {
  const response = await fetch(`${kernel.url}${path}`, {
    ...init,
    headers: { "content-type": "application/json" },
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${path}: ${response.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

const createExecution = (kernel, input, agentId = AGENT) =>
  kernelJson(kernel, "/v0/executions", { method: "POST", body: JSON.stringify({ agent_id: agentId, input }) });
const execution = (kernel, id) => kernelJson(kernel, `/v0/executions/${id}`);
async function events(kernel, id) {
  const body = await kernelJson(kernel, `/v0/executions/${id}/events`);
  return Array.isArray(body) ? body : (body.events ?? body.items ?? []);
}

async function steps(kernel, id) {
  const body = await kernelJson(kernel, `/v0/executions/${id}/steps`);
  return Array.isArray(body) ? body : (body.steps ?? body.items ?? []);
}

async function waitTerminal(kernel, id, timeoutMs) {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    const exec = await execution(kernel, id);
    if (["completed", "failed", "cancelled"].includes(exec.status)) return exec;
    await sleep(100);
  }
  throw new Error(`execution ${id} did not finish in ${timeoutMs} ms`);
}

function assert(condition, message) {
  if (!condition) throw new Error(message);
}

/**
 * What the Workers logged to the console, in order, as `{ agent, level, message, at }`
 * (workerd's structured logs: `level` is the console method, `log` for `console.log`; `at`
 * when it came, in `performance.now()` ms).
 */
const consoleLines = [];

/** A console log handler for the Worker of `agent`: keeps each line, prints it with WORKERS_LOGS=1. */
const keepConsole =
  (agent) =>
  ({ level, message }) => {
    consoleLines.push({ agent, level, message, at: performance.now() });
    if (process.env.WORKERS_LOGS) console.error(`[workerd ${agent}] ${level}: ${message}`);
  };

/** Waits (up to `ms`) for a console line of `agent`'s Worker for which `match` holds. */
async function logged(agent, ms, match) {
  const until = performance.now() + ms;
  for (;;) {
    const line = consoleLines.find((l) => l.agent === agent && match(l));
    if (line) return line;
    if (performance.now() > until) {
      const mine = consoleLines.filter((l) => l.agent === agent).map((l) => `${l.level}: ${l.message}`);
      throw new Error(`no such console line of ${agent}; it logged:\n${mine.join("\n")}`);
    }
    await sleep(20);
  }
}

/** How many times each step started live (not replayed), by step name or tool id. */
function liveSteps(log) {
  const counts = {};
  for (const event of log.filter((e) => (e.type ?? e.kind) === "step.executing")) {
    const p = event.payload ?? {};
    const name = p.target ?? p.name ?? p.tool_id ?? p.step_name ?? JSON.stringify(p);
    counts[name] = (counts[name] ?? 0) + 1;
  }
  return counts;
}

/**
 * Checks the `dispatch.acked` events against the dev kernel's rule for the attempts of one
 * execution: every attempt but the last is acked exactly once (each ran for seconds before the
 * next); the last is acked once if its webhook returned before the execution ended, and not at
 * all if the run (a quick replay) ended first, since nothing is logged after the terminal event.
 * Returns which case the run met.
 */
function ackedAttempts(log, attempts) {
  const type = (e) => e.type ?? e.kind;
  const acked = log.filter((e) => type(e) === "dispatch.acked").map((e) => e.payload?.attempt);
  const terminal = log.findIndex((e) => ["execution.completed", "execution.failed", "execution.cancelled"].includes(type(e)));
  assert(terminal === log.length - 1, `events after the terminal one: ${JSON.stringify(log.slice(terminal + 1))}`);
  const last = attempts.at(-1);
  for (const attempt of attempts) {
    const n = acked.filter((a) => a === attempt).length;
    const allowed = attempt === last ? [0, 1] : [1];
    assert(allowed.includes(n), `attempt ${attempt} acked ${n} times: ${JSON.stringify(acked)}`);
  }
  assert(acked.every((a) => attempts.includes(a)), `acks of unknown attempts: ${JSON.stringify(acked)}`);
  return acked.includes(last) ? "every ack logged" : `attempt ${last} ended before its ack returned`;
}

/**
 * The execution and dispatch events of `log`, one line each with its attempt, its error or
 * reason, and when it came in seconds from `from` (ms since the epoch), joined by "; ".
 */
function deliveryStory(log, from) {
  const type = (e) => e.type ?? e.kind;
  return log
    .filter((e) => type(e).startsWith("dispatch.") || type(e).startsWith("execution."))
    .map((e) => {
      const p = e.payload ?? {};
      const what = [p.attempt != null ? `attempt ${p.attempt}` : "", p.error ?? p.http_status ?? p.reason ?? ""];
      const detail = what.filter(Boolean).join(", ");
      const ms = Date.parse(e.occurred_at) - from;
      return `${type(e)}${detail ? ` (${detail})` : ""} ${ms >= 0 ? "+" : ""}${(ms / 1000).toFixed(1)} s`;
    })
    .join("; ");
}

/** What connecting to the loopback `port` meets: "open", or the error's code (ECONNREFUSED…). */
function connectOutcome(port) {
  return new Promise((ok) => {
    const socket = connect(port, "127.0.0.1", () => {
      socket.end();
      ok("open");
    });
    socket.once("error", (error) => ok(error.code));
  });
}

/**
 * Runs `input` (plus a slow `work` step that makes the run yield at its deadline) and checks
 * the durable LLM call it makes: one `llm_call` step for `gpt-test`, recorded by the first
 * delivery with the stub's exact answer and only its content type; the re-delivery replays it,
 * so the stub is asked once for two deliveries, and no step runs live twice. `liveCount` is the
 * number of distinct live steps the handler makes. Returns the output and the record.
 */
async function recordedOnceAndReplayed({ kernel, proxy, stub }, input, stream, liveCount) {
  const before = stub.hits;
  const created = await createExecution(kernel, { ...input, stream, work_ms: 3500 });
  await sleep(5000);
  const midway = await execution(kernel, created.id);
  assert(midway.status === "running", `midway status ${midway.status}`);
  const asked = stub.hits - before;
  assert(asked === 1, `${asked} provider requests before the re-delivery`);
  const done = await waitTerminal(kernel, created.id, 40_000);
  assert(done.status === "completed", `status ${done.status}: ${JSON.stringify(done)}`);
  await proxy.settled();
  const mine = proxy.deliveries.filter((d) => d.body.includes(created.id));
  if (!(mine.length === 2 && mine.every((d) => d.status === 200))) {
    // What the kernel logged, to tell a run that never yielded from a delivery not recorded.
    const log = (await events(kernel, created.id)).map((e) => [e.type ?? e.kind, e.payload?.attempt ?? e.payload?.target]);
    const seen = mine.map(({ status, ms, at, body }) => ({ status, ms, at, attempt: JSON.parse(body).dispatch_attempt }));
    throw new Error(`deliveries ${JSON.stringify(seen)}; kernel events ${JSON.stringify(log)}`);
  }
  assert(stub.hits - before === 1, `${stub.hits - before} provider requests after the re-delivery`);
  const sent = stub.requests.at(-1);
  assert(sent.model === "gpt-test" && (sent.stream === true) === stream, `request ${JSON.stringify(sent)}`);

  const expected = stream ? stub.sse : stub.json;
  const contentType = stream ? "text/event-stream" : "application/json";
  const calls = (await steps(kernel, created.id)).filter((s) => s.kind === "llm_call");
  assert(calls.length === 1, `${calls.length} llm_call steps: ${JSON.stringify(calls)}`);
  const [call] = calls;
  assert(call.target === "gpt-test", `target ${call.target}`);
  assert(call.status === "succeeded", `step status ${call.status}`);
  const result = call.result ?? {};
  assert(result.status === 200, `recorded status ${result.status}`);
  assert(
    JSON.stringify(Object.keys(result.headers ?? {})) === '["content-type"]' &&
      result.headers["content-type"] === contentType,
    `recorded headers ${JSON.stringify(result.headers)}`,
  );
  assert(result.body === expected, `recorded body ${JSON.stringify(result.body)}`);

  const live = liveSteps(await events(kernel, created.id));
  const counts = Object.values(live);
  assert(counts.length === liveCount && counts.every((n) => n === 1), `live steps ${JSON.stringify(live)}`);
  const recorded = `recorded ${result.body.length} B of ${contentType}`;
  return { out: done.output ?? {}, expected, recorded };
}

/**
 * One durable LLM call through the Worker's FetchTransport; the live steps are the call,
 * `llm_chunks`, `work` and `checked_at`.
 */
async function llmCall(context, stream) {
  const { stub } = context;
  const { out, expected, recorded } = await recordedOnceAndReplayed(context, { llm_url: stub.url }, stream, 4);
  assert(out.status === 200 && out.body === expected && out.content === ANSWER, `output ${JSON.stringify(out)}`);
  // Recorded by the first delivery: how many chunks the live read got.
  const minChunks = stream ? 3 : 1;
  assert(out.chunks >= minChunks, `${out.chunks} chunks read live, expected ≥ ${minChunks}`);
  return `1 provider request for 2 deliveries, ${out.chunks} chunk(s) read live, ${recorded}`;
}

/**
 * The same through rig: rig's OpenAI-compatible client (chat-completions wire) on the stub's
 * base URL, sending through `rebuno::rig::Durable` over rig's reqwest client (the JS fetch).
 */
async function rigCall(context, stream) {
  const { stub } = context;
  const { out, recorded } = await recordedOnceAndReplayed(context, { rig_url: stub.base }, stream, 3);
  const pieces = stream ? PIECES.length : 1;
  assert(out.text === ANSWER && out.pieces === pieces, `output ${JSON.stringify(out)}`);
  return `1 provider request for 2 deliveries, rig read ${out.pieces} text piece(s), ${recorded}`;
}

/** Bad webhooks posted to `url`: a wrong and a missing signature, and a signed non-JSON body. */
async function refusals(url) {
  const body = JSON.stringify({
    execution_id: "0192f1a0-0000-7000-8000-000000000000",
    dispatch_id: "01920000-0000-7000-8000-000000000001",
    dispatch_attempt: 1,
    lease_timeout_seconds: 10,
  });
  const sign = (secret, text) => `sha256=${createHmac("sha256", secret).update(text).digest("hex")}`;
  const bad = await fetch(url, { method: "POST", body, headers: { "Rebuno-Signature": sign("not-the-secret", body) } });
  const missing = await fetch(url, { method: "POST", body });
  const malformed = await fetch(url, { method: "POST", body: "not json", headers: { "Rebuno-Signature": sign(SECRET, "not json") } });
  assert(bad.status === 401 && missing.status === 401, `signatures: ${bad.status}, ${missing.status}`);
  assert(malformed.status === 400, `malformed payload: ${malformed.status}`);
  return "401 for a wrong and a missing signature, 400 for a malformed payload";
}

/**
 * Runs `input` on the telemetry Worker to completion and waits, with no further request to the
 * Worker, for what its runs export: the `dispatch` span of each delivery and a span for each
 * step the kernel recorded. Checks what both telemetry tests share: one trace, named by the
 * execution id; each delivery's spans arrived within its waitUntil budget
 * (REBUNO_WAIT_UNTIL_SECONDS after it reached the Worker) and before anything else reached the
 * Worker; each step span named `<kind> <target>`, with the first 16 hex of its step id as span
 * id, under the delivery that ran it, and exported once (replays are left out); span kinds and
 * the `rebuno.*` attributes of the span contract (src/telemetry/mod.rs). Returns what the
 * caller asserts on further.
 */
async function traced({ kernel, otelProxy, receiver }, input, deliveriesExpected) {
  assert(receiver, "no OTLP receiver: set OTLP_PYTHON to the python of scripts/interop-venv.sh (run.sh does)");
  const counted = stepCounts(receiver, OTEL_SERVICE);
  const arrivalsBefore = otelProxy.arrivals.length;
  const created = await createExecution(kernel, input, AGENT_OTEL);
  const trace = created.id.replaceAll("-", "");
  const done = await waitTerminal(kernel, created.id, 40_000);
  assert(done.status === "completed", `status ${done.status}: ${JSON.stringify(done)}`);
  const recorded = await steps(kernel, created.id);
  assert(recorded.length > 0 && recorded.every((s) => s.status === "succeeded"), `steps ${JSON.stringify(recorded)}`);
  const spans = await waitForSpans(receiver, 15_000, (spans) => {
    const mine = spans.filter((s) => s.traceId === trace);
    const dispatches = mine.filter((s) => attribute(s, "rebuno.span") === "rebuno.dispatch");
    const stepsIn = recorded.every((r) => mine.some((s) => s.spanId === r.step_id.slice(0, 16)));
    return dispatches.length >= deliveriesExpected && stepsIn;
  });
  const lastSeen = Math.max(...spans.filter((s) => s.traceId === trace).map((s) => s.seenAt));
  await otelProxy.settled();
  const deliveries = otelProxy.deliveries.filter((d) => d.body.includes(created.id));
  assert(
    deliveries.length === deliveriesExpected && deliveries.every((d) => d.status === 200),
    `deliveries ${JSON.stringify(deliveries.map(({ status, ms }) => ({ status, ms })))}`,
  );
  const requests = otelProxy.arrivals.slice(arrivalsBefore).filter((at) => at <= lastSeen).length;
  assert(requests === deliveriesExpected, `${requests} requests reached the Worker before its spans were all in`);

  // Every span about this execution is in its trace, named by the execution id.
  const about = spans.filter((s) => s.traceId === trace || attribute(s, "rebuno.execution_id") === created.id);
  assert(about.every((s) => s.traceId === trace), `spans outside trace ${trace}: ${JSON.stringify(about)}`);
  assert(about.every((s) => s.service === OTEL_SERVICE), `service.name ${JSON.stringify(about.map((s) => s.service))}`);
  const ids = new Set(about.map((s) => s.spanId));
  assert(ids.size === about.length, `span ids repeat: ${JSON.stringify(about.map((s) => [s.name, s.spanId]))}`);

  const attempts = new Map();
  for (const dispatch of about.filter((s) => attribute(s, "rebuno.span") === "rebuno.dispatch")) {
    assert(dispatch.name === `dispatch ${AGENT_OTEL}`, `dispatch span name ${dispatch.name}`);
    assert(dispatch.kind === "SPAN_KIND_SERVER", `dispatch kind ${dispatch.kind}`);
    assert(!dispatch.parentSpanId, `a dispatch span has a parent: ${JSON.stringify(dispatch)}`);
    assert(attribute(dispatch, "rebuno.execution_id") === created.id, `dispatch ${JSON.stringify(dispatch)}`);
    assert(attribute(dispatch, "rebuno.agent_id") === AGENT_OTEL, `dispatch ${JSON.stringify(dispatch)}`);
    attempts.set(Number(attribute(dispatch, "rebuno.attempt")), dispatch);
  }
  const expected = Array.from({ length: deliveriesExpected }, (_, i) => i + 1);
  assert(
    attempts.size === deliveriesExpected && expected.every((n) => attempts.has(n)),
    `dispatch spans of attempts ${JSON.stringify([...attempts.keys()])}`,
  );
  const last = attempts.get(deliveriesExpected);
  assert(attribute(last, "rebuno.outcome") === "completed" && !last.status?.code, `last dispatch ${JSON.stringify(last)}`);
  // Each delivery's spans came within its own waitUntil budget, before the next delivery.
  const budgetMs = Number(LIMITS.REBUNO_WAIT_UNTIL_SECONDS) * 1000;
  for (const [attempt, dispatch] of attempts) {
    const delivery = deliveries[attempt - 1];
    const under = about.filter((s) => s === dispatch || s.parentSpanId === dispatch.spanId);
    const late = under.filter((s) => s.seenAt > delivery.at + budgetMs);
    assert(late.length === 0, `attempt ${attempt}: ${late.map((s) => s.name)} arrived after its ${budgetMs} ms budget`);
    const next = deliveries[attempt];
    const after = next ? under.filter((s) => s.seenAt >= next.at) : [];
    assert(after.length === 0, `attempt ${attempt}: ${after.map((s) => s.name)} arrived after the next delivery`);
  }

  // A step that ran (or failed) has a result; one stopped before it ran is decided again by
  // the next delivery, so its span has an id of its delivery's, not its step id's.
  const allSteps = about.filter((s) => attribute(s, "rebuno.span") === "rebuno.step");
  const stepSpans = allSteps.filter((s) => attribute(s, "rebuno.outcome") === "succeeded");
  const names = stepSpans.map((s) => s.name);
  assert(stepSpans.length === recorded.length, `${names.length} step spans for ${recorded.length} steps: ${names}`);
  const parents = new Map([...attempts].map(([attempt, d]) => [d.spanId, attempt]));
  const placed = {};
  for (const step of recorded) {
    const span = stepSpans.find((s) => s.spanId === step.step_id.slice(0, 16));
    const name = `${step.kind} ${step.target}`;
    assert(span?.name === name, `no span ${step.step_id.slice(0, 16)} named ${name}: ${JSON.stringify(stepSpans)}`);
    const kind = step.kind === "llm_call" ? "SPAN_KIND_CLIENT" : "SPAN_KIND_INTERNAL";
    assert(span.kind === kind, `${name}: kind ${span.kind}`);
    assert(parents.has(span.parentSpanId), `${name}: parent ${span.parentSpanId} is no dispatch of this execution`);
    const live = attribute(span, "rebuno.replayed") === false && attribute(span, "rebuno.step_id") === step.step_id;
    assert(live && !span.status?.code, `${name}: ${JSON.stringify(span)}`);
    placed[name] = parents.get(span.parentSpanId);
  }
  const others = allSteps
    .filter((s) => !stepSpans.includes(s))
    .map((s) => {
      assert(parents.has(s.parentSpanId), `${s.name}: parent ${s.parentSpanId} is no dispatch of this execution`);
      assert(recorded.every((r) => r.step_id.slice(0, 16) !== s.spanId), `${s.name} took a recorded step's span id`);
      return `${s.name} ${attribute(s, "rebuno.outcome")} under attempt ${parents.get(s.parentSpanId)}`;
    });

  // The metrics of the same flushes: cumulative per isolate, so compared with before the run.
  let metrics;
  for (let i = 0; i < 100; i++) {
    const now = stepCounts(receiver, OTEL_SERVICE);
    const added = Object.entries(now).map(([key, n]) => [key, n - (counted[key] ?? 0)]);
    metrics = Object.fromEntries(added.filter(([, n]) => n));
    if ((metrics.succeeded ?? 0) >= recorded.length) break;
    await sleep(50);
  }
  const seconds = ((lastSeen - deliveries[0].at) / 1000).toFixed(1);
  const note = `${about.length} spans in trace ${trace.slice(0, 8)}…, the last ${seconds} s after the first delivery; rebuno.steps +${JSON.stringify(metrics)}`;
  return { attempts, placed, others, metrics, note };
}

const tests = [
  [
    "a signed dispatch gets 200 at once and the execution completes",
    async ({ kernel, proxy }) => {
      const created = await createExecution(kernel, { text: "durable agents on cloudflare workers", work_ms: 1000 });
      const done = await waitTerminal(kernel, created.id, 20_000);
      assert(done.status === "completed", `status ${done.status}: ${JSON.stringify(done)}`);
      assert(done.output?.words === 5 && done.output?.longest === "cloudflare", `output ${JSON.stringify(done.output)}`);
      await proxy.settled();
      const mine = proxy.deliveries.filter((d) => d.body.includes(created.id));
      assert(mine.length === 1, `${mine.length} deliveries`);
      assert(mine[0].status === 200, `ack status ${mine[0].status}`);
      assert(mine[0].ms < 1000, `ack took ${mine[0].ms} ms, the run takes over 1000 ms`);
      return `ack ${mine[0].ms.toFixed(1)} ms (run ≥ 1000 ms)`;
    },
  ],
  ["a bad signature gets 401, a malformed payload 400", ({ proxy }) => refusals(proxy.url)],
  [
    "the SDK's logs reach the Workers console: info by default, RUST_LOG read from the Worker's vars",
    async ({ kernel, proxy }) => {
      const created = await createExecution(kernel, { text: "logs from the edge" });
      const done = await waitTerminal(kernel, created.id, 20_000);
      assert(done.status === "completed", `status ${done.status}: ${JSON.stringify(done)}`);
      const started = await logged(
        AGENT,
        5_000,
        (l) => l.level === "log" && l.message.includes("run started") && l.message.includes(`execution_id=${created.id}`),
      );
      await logged(AGENT, 5_000, (l) => l.message.includes("execution completed") && l.message.includes(created.id));
      // A wrong secret's refusal is logged at warn with what to check (at once, then once a
      // minute: the test above may have drawn it already).
      await refusals(proxy.url);
      const refused = await logged(
        AGENT,
        5_000,
        (l) => l.level === "warn" && l.message.includes("webhook refused (401)") && l.message.includes("REBUNO_AGENT_SECRET"),
      );
      // The telemetry Worker has RUST_LOG=warn: the same run logs no info line there (the
      // line that ends a run comes a moment after the kernel records its end).
      const quiet = await createExecution(kernel, { text: "quiet at warn" }, AGENT_OTEL);
      const quietDone = await waitTerminal(kernel, quiet.id, 20_000);
      assert(quietDone.status === "completed", `status ${quietDone.status}: ${JSON.stringify(quietDone)}`);
      await sleep(500);
      const info = consoleLines.filter((l) => l.agent === AGENT_OTEL && l.message.startsWith("INFO "));
      assert(info.length === 0, `RUST_LOG=warn, yet: ${JSON.stringify(info)}`);
      return `"${started.message.slice(0, 60)}…", "${refused.message.slice(0, 40)}…"; none at RUST_LOG=warn`;
    },
  ],
  [
    "logs: an unreachable kernel (a wrong REBUNO_URL) is named with its URL at the first failure, and again when the run gives up",
    async ({ kernel, lostProxy, lostUrl }) => {
      const created = await createExecution(kernel, { text: "is anybody there" }, AGENT_LOST);
      let delivery;
      for (let i = 0; i < 400 && !delivery; i++) {
        delivery = lostProxy.deliveries.find((d) => d.body.includes(created.id));
        if (!delivery) await sleep(25);
      }
      assert(delivery?.status === 200, `delivery ${JSON.stringify(delivery)}`);
      const mine = (level) => (l) => l.level === level && l.message.includes(created.id) && l.message.includes(lostUrl);
      // At the first failed request, not after its retries (about 8 s).
      const first = await logged(AGENT_LOST, 5_000, mine("warn"));
      const after = first.at - delivery.at;
      assert(after < 2_000, `the first warn came ${after.toFixed(0)} ms after the delivery: ${first.message}`);
      assert(first.message.includes("REBUNO_URL"), `no REBUNO_URL in: ${first.message}`);
      // When the run gives up (its two kernel requests retried, about 16 s): the fix again,
      // and what happens next.
      const last = await logged(AGENT_LOST, 25_000, mine("error"));
      assert(
        last.message.includes("could not fetch the execution") && last.message.includes("REBUNO_URL") && last.message.includes("re-deliver"),
        `the last line: ${last.message}`,
      );
      await fetch(`${kernel.url}/v0/executions/${created.id}/cancel`, { method: "POST" });
      const gaveUp = ((last.at - delivery.at) / 1000).toFixed(1);
      return `warn ${after.toFixed(0)} ms after the delivery: "${first.message}"; error ${gaveUp} s after it: "${last.message}"`;
    },
  ],
  [
    "logs: a deadline yield is logged as a yield (info: it resumes on the next delivery), and each run's outcome: completed, or failed with its reason",
    async ({ kernel }) => {
      // As in the yield test below: `checked_at` would start past the 6 s budget's 3 s margin.
      const slow = await createExecution(kernel, { text: "slow and steady", work_ms: 3500 });
      const wrong = await createExecution(kernel, { nothing: "to analyze" });
      const [slowDone, wrongDone] = await Promise.all([waitTerminal(kernel, slow.id, 40_000), waitTerminal(kernel, wrong.id, 20_000)]);
      assert(slowDone.status === "completed", `status ${slowDone.status}: ${JSON.stringify(slowDone)}`);
      assert(wrongDone.status === "failed", `status ${wrongDone.status}: ${JSON.stringify(wrongDone)}`);
      const about = (id, text) => (l) => l.message.includes(id) && l.message.includes(text);
      const yielded = await logged(AGENT, 5_000, about(slow.id, "yielded"));
      assert(
        yielded.level === "log" &&
          yielded.message.startsWith("INFO ") &&
          yielded.message.includes("time limit") &&
          yielded.message.includes("next delivery") &&
          yielded.message.includes("lease_timeout_seconds: 10"),
        `the yield: ${yielded.level}: ${yielded.message}`,
      );
      const completed = await logged(AGENT, 5_000, about(slow.id, "execution completed"));
      assert(completed.level === "log" && completed.message.includes("attempt=2"), `${completed.level}: ${completed.message}`);
      const loud = consoleLines.filter((l) => l.agent === AGENT && l.message.includes(slow.id) && l.level !== "log");
      assert(loud.length === 0, `a yield is no failure, yet: ${JSON.stringify(loud)}`);
      const failed = await logged(AGENT, 5_000, about(wrong.id, "execution failed"));
      assert(
        failed.level === "warn" && failed.message.startsWith("WARN ") && failed.message.includes("input_invalid"),
        `the failure: ${failed.level}: ${failed.message}`,
      );
      return `"${yielded.message}"; "${completed.message}"; "${failed.message}"`;
    },
  ],
  [
    "a run past its deadline margin yields and resumes on re-delivery, nothing run twice",
    async ({ kernel, proxy }) => {
      // tool at ~0 s, `work` runs 0.1–3.6 s; `checked_at` would start at 3.6 s > 6 s − 3 s margin.
      const created = await createExecution(kernel, { text: "slow and steady", work_ms: 3500 });
      await sleep(5000);
      const midway = await execution(kernel, created.id);
      assert(midway.status === "running", `midway status ${midway.status}`);
      const done = await waitTerminal(kernel, created.id, 40_000);
      assert(done.status === "completed", `status ${done.status}: ${JSON.stringify(done)}`);
      assert(done.output?.worked_ms === 3500, `output ${JSON.stringify(done.output)}`);
      await proxy.settled();
      const mine = proxy.deliveries.filter((d) => d.body.includes(created.id));
      assert(mine.length === 2 && mine.every((d) => d.status === 200), `deliveries ${JSON.stringify(mine)}`);
      const log = await events(kernel, created.id);
      const logged = ackedAttempts(log, [1, 2]);
      const live = liveSteps(log);
      const counts = Object.values(live);
      assert(counts.length === 3 && counts.every((n) => n === 1), `live steps ${JSON.stringify(live)}`);
      const acks = mine.map((d) => `${d.ms.toFixed(1)} ms`).join(", ");
      return `2 deliveries (acks ${acks}; ${logged}), each step ran live once: ${JSON.stringify(live)}`;
    },
  ],
  [
    "a durable LLM call (JSON) is recorded once and replayed on re-delivery",
    (context) => llmCall(context, false),
  ],
  [
    "a streamed durable LLM call (SSE) streams, is recorded once and replayed on re-delivery",
    (context) => llmCall(context, true),
  ],
  [
    "a rig completion (rig::Durable over rig-reqwest) is recorded once and replayed on re-delivery",
    (context) => rigCall(context, false),
  ],
  [
    "a streamed rig completion is read event by event, recorded once and replayed on re-delivery",
    (context) => rigCall(context, true),
  ],
  [
    "a stream that stalls past the call's timeout fails the step instead of recording it cut short",
    async ({ kernel, stub }) => {
      const before = stub.hits;
      const created = await createExecution(kernel, {
        llm_url: `${stub.url}?stall=4000`,
        stream: true,
        timeout_ms: 1000,
      });
      const done = await waitTerminal(kernel, created.id, 20_000);
      assert(done.status === "failed", `status ${done.status}: ${JSON.stringify(done)}`);
      assert(stub.hits - before === 1, `${stub.hits - before} provider requests`);
      const calls = (await steps(kernel, created.id)).filter((s) => s.kind === "llm_call");
      assert(calls.length === 1 && calls[0].status === "failed", `llm_call steps ${JSON.stringify(calls)}`);
      const message = JSON.stringify(calls[0].error ?? {});
      assert(/timed out/.test(message) && calls[0].result == null, `step ${JSON.stringify(calls[0])}`);
      return `llm_call failed with ${message}`;
    },
  ],
  [
    "an E2B sandbox from wasm32 (E2bSandbox over the Workers fetch, against the stand-in): files and a command by declared tools, snapshots every 2 steps, reopened by the re-delivery",
    async ({ kernel, proxy, e2b }) => {
      assert(e2b, "no E2B stand-in: set E2B_STANDIN_BIN to tools/e2b-standin's binary (run.sh does)");
      const before = e2b.captured().length;
      // The writes and the command, then a `work` step long enough that `checked_at` falls past
      // the deadline margin: the first delivery yields, the second reopens the sandbox and
      // replays the recorded calls.
      const files = [
        ["src/lib.rs", "pub fn edge() -> u32 { 1 }\n"],
        ["README.md", "# from a Worker\n"],
      ];
      const command = "wc -l < src/lib.rs && cat README.md";
      const created = await createExecution(kernel, { e2b_url: e2b.url, files, command, work_ms: 3500 });
      const done = await waitTerminal(kernel, created.id, 40_000);
      assert(done.status === "completed", `status ${done.status}: ${JSON.stringify(done)}`);
      const { sandbox, exit_code, stdout } = done.output ?? {};
      assert(exit_code === 0 && stdout === "1\n# from a Worker\n", `output ${JSON.stringify(done.output)}`);
      assert(e2b.sandboxFile(sandbox, "src/lib.rs") === files[0][1], "the file is in the sandbox's directory");
      await proxy.settled();
      const mine = proxy.deliveries.filter((d) => d.body.includes(created.id));
      assert(mine.length === 2 && mine.every((d) => d.status === 200), `deliveries ${JSON.stringify(mine)}`);
      const calls = e2b.captured().slice(before).map((r) => `${r.method} ${r.path}`);
      const count = (call) => calls.filter((c) => c === call).length;
      assert(count("POST /sandboxes") === 1, `one sandbox created: ${JSON.stringify(calls)}`);
      // A yield at the deadline does not pause (the next delivery comes within the lease);
      // a blocked run does (tests/integration/e2b.rs).
      assert(count(`POST /sandboxes/${sandbox}/pause`) === 0, `no pause at a yield: ${JSON.stringify(calls)}`);
      assert(count(`POST /sandboxes/${sandbox}/connect`) >= 2, `reopened (and reconnected after snapshots): ${JSON.stringify(calls)}`);
      assert(!calls.some((c) => c.startsWith("POST /v2/")), `only the published spec's endpoints: ${JSON.stringify(calls)}`);
      const log = await events(kernel, created.id);
      const snapshots = log.filter((e) => (e.type ?? e.kind) === "resource.checkpointed").length;
      assert(count(`POST /sandboxes/${sandbox}/snapshots`) === snapshots && snapshots >= 2, `${snapshots} checkpoints: ${JSON.stringify(calls)}`);
      const live = liveSteps(log);
      const once = { write_file: files.length, run: 1, work: 1, checked_at: 1 };
      assert(JSON.stringify(live) === JSON.stringify(once), `live steps ${JSON.stringify(live)}`);
      return `2 deliveries, sandbox ${sandbox}: ${files.length} files written and 1 command run, each once (the re-delivery reopened the sandbox and replayed them), ${snapshots} snapshots; ${calls.length} E2B requests, none outside the published spec's paths`;
    },
  ],
  [
    "MCP tools over streamable HTTP (StreamableHttp over the Workers fetch): recorded once, replayed on re-delivery, nulls stripped, at_most_once once, a denial never reaching the server, a closed stream resumed",
    async ({ kernel, proxy, mcp }) => {
      assert(mcp, "no MCP fixture: set MCP_PYTHON to the python of tests/integration/mcp/setup.sh's venv");
      const before = mcp.posted.length;
      const resumedBefore = mcp.resumed.length;
      // The calls, then a `work` step long enough that `checked_at` falls past the deadline
      // margin: the first delivery yields, the second replays the calls.
      const calls = [
        ["fx_add", { a: 2, b: 3 }],
        ["fx_greet", { name: "ann", title: null }],
        ["fx_record", { note: "first" }],
        ["fx_chatty", { note: "over the stream" }],
        ["fx_interrupted", { note: "after the break" }],
        ["fx_boom", { msg: "kaput" }],
        ["fx_weather", { city: "Oslo" }],
      ];
      const created = await createExecution(kernel, { mcp_url: mcp.url, calls, work_ms: 3500 });
      const done = await waitTerminal(kernel, created.id, 40_000);
      assert(done.status === "completed", `status ${done.status}: ${JSON.stringify(done)}`);
      const want = [
        { result: 5 },
        { result: "hello friend ann" },
        { result: "1" },
        { result: "over the stream" },
        { result: "after the break" },
        "Error executing tool boom",
        "fx_weather not allowed. reason: no forecasts at the edge",
      ];
      assert(JSON.stringify(done.output?.results) === JSON.stringify(want), `results ${JSON.stringify(done.output)}`);
      await proxy.settled();
      const mine = proxy.deliveries.filter((d) => d.body.includes(created.id));
      assert(mine.length === 2 && mine.every((d) => d.status === 200), `deliveries ${JSON.stringify(mine)}`);
      const posted = mcp.posted.slice(before);
      const methods = posted.map((m) => m.method ?? "(answer)");
      const called = posted.filter((m) => m.method === "tools/call").map((m) => m.params.name);
      assert(
        JSON.stringify(called) === JSON.stringify(["add", "greet", "record", "chatty", "interrupted", "boom"]),
        `tools/call reached the server for ${JSON.stringify(called)}`,
      );
      const greet = posted.find((m) => m.params?.name === "greet");
      assert(!("title" in greet.params.arguments), `greet got ${JSON.stringify(greet.params)}`);
      const initialized = methods.filter((m) => m === "initialize").length;
      assert(initialized === 2, `${initialized} initialize requests: ${JSON.stringify(methods)}`);
      const pings = posted.filter((m) => m.result && Object.keys(m.result).length === 0).length;
      assert(pings === 1, `${pings} ping answers: ${JSON.stringify(methods)}`);
      // `interrupted` closed its stream before answering: resumed once with Last-Event-ID.
      const resumed = mcp.resumed.slice(resumedBefore);
      assert(
        resumed.length === 1 && resumed[0]["last-event-id"] && resumed[0]["mcp-session-id"],
        `resumptions ${JSON.stringify(resumed)}`,
      );
      const effects = readFileSync(mcp.effects, "utf8");
      assert(effects === "first\n", `record's effects ${JSON.stringify(effects)}`);
      const recorded = await steps(kernel, created.id);
      const step = (target) => recorded.find((s) => s.target === target) ?? {};
      assert(step("fx_record").idempotency === "at_most_once", `record step ${JSON.stringify(step("fx_record"))}`);
      assert(step("fx_weather").status === "denied", `weather step ${JSON.stringify(step("fx_weather"))}`);
      assert(JSON.stringify(step("fx_greet").args) === '{"name":"ann"}', `greet step ${JSON.stringify(step("fx_greet"))}`);
      const live = liveSteps(await events(kernel, created.id));
      const counts = Object.values(live);
      assert(counts.every((n) => n === 1), `live steps ${JSON.stringify(live)}`);
      return `2 deliveries; ${called.length} tools/call on the server (none on the replay, the denied one never), ${initialized} sessions, 1 ping answered mid-call, 1 stream resumed with Last-Event-ID, record's effect once; live steps ${JSON.stringify(live)}`;
    },
  ],
  [
    "Durable Object mode: a model stream longer than the wait-until budget is read to its end in one delivery",
    async ({ kernel, doProxy, doWorker, mfDo, stub }) => {
      // A 9 s stream (six events 1.5 s apart), then the `work` and `checked_at` steps: the 6 s
      // budget with its 3 s margin would end this dispatch after the stream and re-deliver
      // (the yield test above); in the execution's own Durable Object there is no deadline.
      const before = stub.hits;
      const started = performance.now();
      const created = await createExecution(kernel, { llm_url: `${stub.url}?every=1500`, stream: true, work_ms: 500 }, AGENT_DO);
      // Mid-stream, the same delivery again (as a kernel retry would send it), straight to the
      // Worker: it must reach the same object, which is already running it, and not run twice.
      let first;
      for (let i = 0; i < 100 && !first; i++) {
        first = doProxy.deliveries.find((d) => d.body.includes(created.id));
        if (!first) await sleep(50);
      }
      assert(first, "no delivery reached the Worker");
      await sleep(1500);
      const again = await fetch(new URL("/webhook", doWorker), { method: "POST", headers: first.headers, body: first.body });
      assert(again.status === 200, `the repeated delivery got ${again.status}`);
      // Both reached the object named after the execution, as it reports itself. (All objects
      // share the isolate here, so only their own ids tell them apart.)
      const named = (await mfDo.getDurableObjectNamespace("REBUNO_RUNS")).idFromName(created.id).toString();
      const objects = [first.object, again.headers.get("rebuno-durable-object")];
      assert(objects.every((o) => o === named), `objects ${JSON.stringify(objects)}, expected ${named}`);
      const done = await waitTerminal(kernel, created.id, 40_000);
      assert(done.status === "completed", `status ${done.status}: ${JSON.stringify(done)}`);
      assert(done.output?.content === ANSWER && done.output?.worked_ms === 500, `output ${JSON.stringify(done.output)}`);
      assert(done.output?.chunks >= 5, `${done.output?.chunks} chunks read live: the stream was not read as it came`);
      await doProxy.settled();
      const mine = doProxy.deliveries.filter((d) => d.body.includes(created.id));
      assert(mine.length === 1 && mine[0].status === 200, `deliveries ${JSON.stringify(mine)}`);
      assert(mine[0].ms < 1000, `ack took ${mine[0].ms} ms, the run takes over 9000 ms`);
      assert(stub.hits - before === 1, `${stub.hits - before} provider requests`);
      const log = await events(kernel, created.id);
      const acked = log.filter((e) => (e.type ?? e.kind) === "dispatch.acked").length;
      assert(acked === 1, `${acked} dispatch.acked events`);
      const live = liveSteps(log);
      const counts = Object.values(live);
      assert(counts.length === 4 && counts.every((n) => n === 1), `live steps ${JSON.stringify(live)}`);
      const calls = (await steps(kernel, created.id)).filter((s) => s.kind === "llm_call");
      assert(calls.length === 1 && calls[0].status === "succeeded", `llm_call steps ${JSON.stringify(calls)}`);
      const seconds = ((performance.now() - started) / 1000).toFixed(1);
      return `1 delivery (ack ${mine[0].ms.toFixed(1)} ms) for a ${seconds} s run past the 6 s budget, ${done.output.chunks} chunk(s) read live, 1 provider request; the same delivery repeated mid-stream reached the same object (${named.slice(0, 12)}…) and was not run again`;
    },
  ],
  [
    "Durable Object mode: a run whose runtime stops mid-run is re-delivered to the restarted object and completes, no step run twice",
    async (context) => {
      const { kernel, doProxy } = context;
      const started = performance.now();
      // The tool and `work` are recorded, then an 8 s pause outside any step: the runtime
      // stops during it, with nothing in flight.
      const input = { text: "finished after a restart", work_ms: 500, pause_ms: 8000 };
      const created = await createExecution(kernel, input, AGENT_DO);
      const workDone = (recorded) => recorded.some((s) => s.target === "work" && s.status === "succeeded");
      let recorded = [];
      for (let i = 0; i < 200 && !workDone(recorded); i++) {
        await sleep(50);
        recorded = await steps(kernel, created.id);
      }
      assert(workDone(recorded), `steps ${JSON.stringify(recorded)}`);
      await sleep(500);
      const stopped = performance.now();
      await context.restartDo();
      const restartMs = performance.now() - stopped;
      const done = await waitTerminal(kernel, created.id, 60_000);
      const seconds = (performance.now() - started) / 1000;
      assert(done.status === "completed", `status ${done.status}: ${JSON.stringify(done)}`);
      assert(done.output?.words === 4 && done.output?.worked_ms === 500, `output ${JSON.stringify(done.output)}`);
      await doProxy.settled();
      const mine = doProxy.deliveries.filter((d) => d.body.includes(created.id));
      assert(mine.length === 2 && mine.every((d) => d.status === 200), `deliveries ${JSON.stringify(mine)}`);
      const named = (await context.mfDo.getDurableObjectNamespace("REBUNO_RUNS")).idFromName(created.id).toString();
      assert(mine.every((d) => d.object === named), `objects ${JSON.stringify(mine.map((d) => d.object))}, expected ${named}`);
      const log = await events(kernel, created.id);
      const live = liveSteps(log);
      const counts = Object.values(live);
      const compact = log.map((e) => [e.type ?? e.kind, e.payload?.target ?? e.payload?.attempt ?? ""].join(" "));
      assert(counts.length === 3 && counts.every((n) => n === 1), `live steps ${JSON.stringify(live)}: ${JSON.stringify(compact)}`);
      return `runtime restarted in ${restartMs.toFixed(0)} ms mid-run; re-delivered when the lease expired to the same object (${named.slice(0, 12)}…), completed ${seconds.toFixed(1)} s after creation, each step live once: ${JSON.stringify(live)}`;
    },
  ],
  [
    "a `wrangler dev` restart mid-run (runtime stopped, port refusing) within the outage budget loses nothing: lease reclaimed, the attempts meeting the refused port failed, a later one acked, the run completed, no step run twice",
    async ({ kernel, restartWorker }) => {
      const type = (e) => e.type ?? e.kind;
      const at = (e) => Date.parse(e.occurred_at);
      // The tool and `work` (1 s) are recorded, then a 3 s pause outside any step: the runtime
      // is stopped during it, with the run in flight and nothing recorded lost.
      const input = { text: "through a wrangler dev restart", work_ms: 1000, pause_ms: 3000 };
      const created = await createExecution(kernel, input, AGENT_RESTART);
      const workDone = (recorded) => recorded.some((s) => s.target === "work" && s.status === "succeeded");
      let recorded = [];
      for (let i = 0; i < 200 && !workDone(recorded); i++) {
        await sleep(50);
        recorded = await steps(kernel, created.id);
      }
      assert(workDone(recorded), `steps ${JSON.stringify(recorded)}`);
      await sleep(300);
      const killedAt = Date.now();
      await restartWorker.stop();
      const probe = await connectOutcome(restartWorker.port);
      assert(probe === "ECONNREFUSED", `the stopped Worker's port: ${probe}`);
      await sleep(killedAt + RESTART_OUTAGE_MS - Date.now());
      const startingAt = Date.now();
      await restartWorker.start();
      const backAt = Date.now();
      const done = await waitTerminal(kernel, created.id, 30_000);
      const log = await events(kernel, created.id);
      const rel = (ms) => `${ms >= 0 ? "+" : ""}${(ms / 1000).toFixed(1)} s`;
      const excerpt = deliveryStory(log, killedAt);
      const story = `events, from the kill: ${excerpt}; down ${rel(startingAt - killedAt)}, back ${rel(backAt - killedAt)}`;
      assert(done.status === "completed", `status ${done.status} ${done.failure_reason ?? ""}; ${story}`);
      assert(done.output?.words === 5 && done.output?.worked_ms === 1000, `output ${JSON.stringify(done.output)}`);
      // `checked_at` ran in the restarted runtime, after the replay of the tool and `work`.
      assert(done.output?.checked_at >= startingAt, `checked_at ${rel(done.output?.checked_at - killedAt)}; ${story}`);
      // The lease ran out with the runtime down: reclaimed once, as a lease expiry.
      const reclaims = log.filter((e) => type(e) === "dispatch.reclaimed");
      assert(
        reclaims.length === 1 && reclaims[0].payload?.error === "lease_expired" && reclaims[0].payload?.attempt === 1,
        `reclaims ${JSON.stringify(reclaims)}; ${story}`,
      );
      const reclaimedAt = at(reclaims[0]);
      assert(reclaimedAt > killedAt && reclaimedAt < startingAt, `reclaimed ${rel(reclaimedAt - killedAt)}; ${story}`);
      // Every attempt from the reclaim until the runtime was back met the refused port.
      const failed = log.filter((e) => type(e) === "dispatch.failed");
      const attempts = failed.map((e) => e.payload?.attempt);
      const expected = failed.map((_, i) => i + 2);
      assert(
        failed.length >= 1 && JSON.stringify(attempts) === JSON.stringify(expected),
        `failed attempts ${JSON.stringify(attempts)}; ${story}`,
      );
      assert(failed.every((e) => at(e) >= reclaimedAt && at(e) <= backAt), `failed attempts outside the outage; ${story}`);
      // The next attempt reached the restarted runtime and was acked; the first one was too.
      const last = failed.length + 2;
      assert(last <= 5, `attempt ${last} is past the kernel's default 5; ${story}`);
      const acks = log.filter((e) => type(e) === "dispatch.acked");
      const lastAck = acks.find((e) => e.payload?.attempt === last);
      assert(lastAck && at(lastAck) >= startingAt, `no ack of attempt ${last} after the restart; ${story}`);
      ackedAttempts(log, [1, last]);
      // Each step ran live once: the tool and `work` before the kill, `checked_at` after.
      const live = liveSteps(log);
      const counts = Object.values(live);
      assert(counts.length === 3 && counts.every((n) => n === 1), `live steps ${JSON.stringify(live)}; ${story}`);
      const kept = (await steps(kernel, created.id)).map((s) => `${s.target} ${s.idempotency} ${s.status}`);
      // The outage as the kernel saw it: from the lease's last renewal (at most the reclaim's
      // time less the lease: the sweep runs every 0.5 s) until the runtime answered again,
      // against lease + 14 s; the margin is how long before the earliest possible last attempt
      // (14 s after the reclaim, before jitter) the runtime was back.
      const renewedAt = reclaimedAt - RESTART_LEASE_S * 1000;
      const margin = reclaimedAt + RESTART_RETRY_S * 1000 - backAt;
      const secs = (ms) => (ms / 1000).toFixed(1);
      const budget = `${RESTART_LEASE_S} + ${RESTART_RETRY_S} s`;
      const outage = `down ${secs(backAt - killedAt)} s after the kill, ~${secs(backAt - renewedAt)} s after the lease's last renewal (budget ${budget}: margin ${secs(margin)} s)`;
      const acked = `${failed.length} attempt(s) refused, attempt ${last} acked ${rel(at(lastAck) - killedAt)}`;
      return `${outage}; ${acked}, completed; steps ${JSON.stringify(kept)}, live ${JSON.stringify(live)}; ${story}`;
    },
  ],
  [
    "with OTEL_EXPORTER_OTLP_ENDPOINT, a run exports its dispatch and step spans over OTLP within its waitUntil",
    async (context) => {
      const { attempts, placed, others, metrics, note } = await traced(context, { text: "traced at the edge", work_ms: 200 }, 1);
      const names = Object.keys(placed).sort();
      const want = ["local checked_at", "local work", "tool_call analyze_text"];
      assert(JSON.stringify(names) === JSON.stringify(want), `step spans ${JSON.stringify(names)}`);
      assert(others.length === 0, `other step spans: ${JSON.stringify(others)}`);
      assert(attribute(attempts.get(1), "rebuno.attempt") === "1", `attempt ${JSON.stringify(attempts.get(1))}`);
      assert(JSON.stringify(metrics) === '{"succeeded":3}', `rebuno.steps counted ${JSON.stringify(metrics)}`);
      return note;
    },
  ],
  [
    "with OTEL_EXPORTER_OTLP_ENDPOINT, a run that yields and resumes exports each live step once, under its delivery",
    async (context) => {
      // As in the yield test: `checked_at` is left to the re-delivery, which replays the rest.
      const { attempts, placed, others, metrics, note } = await traced(context, { text: "slow and steady", work_ms: 3500 }, 2);
      const first = attempts.get(1);
      assert(
        attribute(first, "rebuno.outcome") === "stopped" && attribute(first, "rebuno.stop") === "deadline",
        `first dispatch ${JSON.stringify(first)}`,
      );
      const want = { "local checked_at": 2, "local work": 1, "tool_call analyze_text": 1 };
      assert(JSON.stringify(placed, Object.keys(want)) === JSON.stringify(want), `step spans under attempts ${JSON.stringify(placed)}`);
      // The first delivery stopped before `checked_at`: a span of its own, with no step id.
      const stopped = ["local checked_at stopped under attempt 1"];
      assert(JSON.stringify(others) === JSON.stringify(stopped), `other step spans: ${JSON.stringify(others)}`);
      // The replays are not exported, but counted.
      const counted = JSON.stringify(metrics, ["succeeded", "stopped", "replayed"]);
      assert(counted === '{"succeeded":3,"stopped":1,"replayed":2}', `rebuno.steps counted ${JSON.stringify(metrics)}`);
      return note;
    },
  ],
  [
    "Durable Object mode: a bad signature gets 401, a malformed payload 400, at the front",
    async ({ doProxy }) => {
      const note = await refusals(doProxy.url);
      // Objects name themselves on every answer; these were answered by the Worker alone.
      const answered = doProxy.deliveries.slice(-3);
      assert(answered.every((d) => d.object === null), `answers from objects: ${JSON.stringify(answered)}`);
      return `${note}, no object woken`;
    },
  ],
  [
    IDLE_TEST,
    async ({ kernel, idleProxy, idleRun }) => {
      assert(idleRun, "the long run was not started");
      const created = await idleRun.created;
      const done = await waitTerminal(kernel, created.id, IDLE_RUN_MS + 60_000);
      assert(done.status === "completed", `status ${done.status}: ${JSON.stringify(done)}`);
      assert(done.output?.worked_ms === IDLE_RUN_MS, `output ${JSON.stringify(done.output)}`);
      await idleProxy.settled();
      const mine = idleProxy.deliveries.filter((d) => d.body.includes(created.id));
      const log = await events(kernel, created.id);
      const reclaimed = log.filter((e) => (e.type ?? e.kind) === "dispatch.reclaimed").length;
      // When the kernel recorded the end, not when this test (after the others) looked.
      const at = (kind) => Date.parse(log.find((e) => (e.type ?? e.kind) === kind)?.occurred_at);
      const seconds = (at("execution.completed") - at("execution.created")) / 1000;
      // An evicted run stops heartbeating its lease: the kernel reclaims and re-delivers it, and
      // `work` starts over (under the same step id, so no second step.executing event).
      assert(mine.length === 1 && reclaimed === 0, `${mine.length} deliveries, ${reclaimed} reclaims: the object was evicted mid-run`);
      assert(seconds < IDLE_RUN_MS / 1000 + 15, `${seconds.toFixed(1)} s: the work started over`);
      return `completed ${seconds.toFixed(1)} s after creation, 1 delivery, no reclaim (run alongside the tests above)`;
    },
  ],
];

function sizes() {
  const wasm = readFileSync(join(BUILD, "index_bg.wasm"));
  const gzip = gzipSync(wasm, { level: 9 }).length;
  const js = statSync(join(BUILD, "index.js")).size;
  return { raw: wasm.length, gzip, js };
}

async function main() {
  if (!DEV_BIN) throw new Error("set REBUNO_DEV_BIN to the rebuno-dev binary");
  const { raw, gzip, js } = sizes();
  console.log(`wasm size: ${raw} bytes raw, ${gzip} bytes gzipped (-9); JS glue ${js} bytes`);
  const cleanup = [];
  try {
    const workerPort = await freePort();
    const proxy = await startProxy(`http://127.0.0.1:${workerPort}`);
    cleanup.push(() => proxy.server.close());
    const stub = await startStub();
    cleanup.push(() => stub.server.close());
    const doPort = await freePort();
    const doProxy = await startProxy(`http://127.0.0.1:${doPort}`);
    cleanup.push(() => doProxy.server.close());
    const idlePort = await freePort();
    const idleProxy = await startProxy(`http://127.0.0.1:${idlePort}`);
    cleanup.push(() => idleProxy.server.close());
    const otelPort = await freePort();
    const otelProxy = await startProxy(`http://127.0.0.1:${otelPort}`);
    cleanup.push(() => otelProxy.server.close());
    const lostPort = await freePort();
    const lostProxy = await startProxy(`http://127.0.0.1:${lostPort}`);
    cleanup.push(() => lostProxy.server.close());
    // Where the lost Worker looks for the kernel: a port free a moment ago, closed.
    const lostUrl = `http://127.0.0.1:${await freePort()}`;
    // The restarted Worker's port, which the kernel delivers to directly.
    const restartPort = await freePort();
    const receiver = OTLP_PYTHON ? await startReceiver(OTLP_PYTHON) : null;
    if (receiver) cleanup.push(() => receiver.stop());
    const mcp = MCP_PYTHON ? await startMcpFixture(MCP_PYTHON) : null;
    if (mcp) cleanup.push(() => mcp.stop());
    const e2b = E2B_STANDIN_BIN ? await startE2bStandin(E2B_STANDIN_BIN) : null;
    if (e2b) cleanup.push(() => e2b.stop());
    const kernel = await startKernel(
      {
        [AGENT]: proxy.url,
        [AGENT_DO]: doProxy.url,
        [AGENT_OTEL]: otelProxy.url,
        [AGENT_IDLE]: idleProxy.url,
        [AGENT_LOST]: lostProxy.url,
        [AGENT_RESTART]: `http://127.0.0.1:${restartPort}/webhook`,
      },
      { [AGENT]: MCP_POLICY },
      // A reclaim of an evicted run comes 30 s after its last lease heartbeat. The lost
      // Worker's run gives up after its retries (about 16 s), before its lease runs out.
      { [AGENT_IDLE]: 30, [AGENT_LOST]: 30, [AGENT_RESTART]: RESTART_LEASE_S },
    );
    cleanup.push(() => kernel.child.kill());
    const worker = (port, agentId, extra, vars = {}) =>
      new Miniflare({
        host: "127.0.0.1",
        port,
        modules: true,
        modulesRoot: BUILD,
        scriptPath: join(BUILD, "index.js"),
        modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
        compatibilityDate: "2026-04-01",
        cf: false, // no fetch of the Request.cf object from workers.cloudflare.com
        bindings: { REBUNO_URL: kernel.url, REBUNO_AGENT_SECRET: SECRET, REBUNO_AGENT_ID: agentId, E2B_API_KEY: E2B_KEY, ...LIMITS, ...vars },
        log: new Log(process.env.MINIFLARE_DEBUG ? LogLevel.DEBUG : LogLevel.WARN),
        handleStructuredLogs: keepConsole(agentId),
        ...extra,
      });
    const mf = worker(workerPort, AGENT, {});
    cleanup.push(() => mf.dispose());
    // Durable Object mode: the same module with the RebunoRun class bound as REBUNO_RUNS.
    // Its objects' storage and alarms persist in a directory, so they outlive a restart of
    // the runtime (`restartDo`), as they outlive one on Cloudflare.
    const doOptions = {
      durableObjects: { REBUNO_RUNS: "RebunoRun" },
      durableObjectsPersist: mkdtempSync(join(tmpdir(), "rebuno-workers-do-")),
    };
    let mfDo = worker(doPort, AGENT_DO, doOptions);
    cleanup.push(() => mfDo.dispose());
    // The long run's runtime: nothing else reaches its objects, so only the alarm keeps its
    // object from idle eviction.
    const mfIdle = worker(idlePort, AGENT_IDLE, { durableObjects: { REBUNO_RUNS: "RebunoRun" } });
    cleanup.push(() => mfIdle.dispose());
    // Telemetry: the same module exporting to the OTLP receiver (when there is one).
    const otelVars = receiver ? { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint, OTEL_SERVICE_NAME: OTEL_SERVICE } : {};
    // Its console logs at RUST_LOG=warn (a var, as in wrangler.toml's [vars]), the exporter
    // still seeing every span: the logging test checks that no info line comes.
    const mfOtel = worker(otelPort, AGENT_OTEL, {}, { ...otelVars, RUST_LOG: "warn" });
    cleanup.push(() => mfOtel.dispose());
    // The lost Worker: REBUNO_URL names a port nobody listens on.
    const mfLost = worker(lostPort, AGENT_LOST, {}, { REBUNO_URL: lostUrl });
    cleanup.push(() => mfLost.dispose());
    // The Worker a test restarts as `wrangler dev` does; null while it is down.
    let mfRestart = worker(restartPort, AGENT_RESTART, {}, RESTART_VARS);
    cleanup.push(() => mfRestart?.dispose());
    const started = performance.now();
    const ready = await mf.ready;
    await mfDo.ready;
    await mfOtel.ready;
    await mfIdle.ready;
    await mfLost.ready;
    await mfRestart.ready;
    console.log(`workerd ready at ${ready} in ${(performance.now() - started).toFixed(0)} ms`);
    const doWorker = `http://127.0.0.1:${doPort}`;
    const context = { kernel, proxy, doProxy, doWorker, mf, mfDo, stub, otelProxy, receiver, mcp, e2b, idleProxy, lostProxy, lostUrl };
    // The long run goes on while the other tests run; its test, the last, waits for it.
    if (selected(IDLE_TEST)) {
      const input = { text: "a long quiet run", work_ms: IDLE_RUN_MS };
      context.idleRun = { created: createExecution(kernel, input, AGENT_IDLE) };
    }
    // Stops the Durable Object mode's runtime (its objects with it) and starts a new one on the
    // same port and storage.
    context.restartDo = async () => {
      await mfDo.dispose();
      mfDo = worker(doPort, AGENT_DO, doOptions);
      await mfDo.ready;
      context.mfDo = mfDo;
    };
    // Stops the restart test's runtime (its port then refuses connections, its run dies) and
    // starts a new one on the same port with the same options.
    context.restartWorker = {
      port: restartPort,
      stop: async () => {
        const stopping = mfRestart;
        mfRestart = null;
        await stopping.dispose();
      },
      start: async () => {
        mfRestart = worker(restartPort, AGENT_RESTART, {}, RESTART_VARS);
        await mfRestart.ready;
      },
    };
    const { passed, failed } = await runAll(context);
    console.log(`wasm ${raw} B raw, ${gzip} B gzip (limit 1000000 B gzip)`);
    console.log(`${passed} passed, ${failed} failed`);
    return failed === 0 && gzip < 1_000_000;
  } finally {
    for (const step of cleanup.reverse()) await step();
  }
}

/** WORKERS_TESTS=regex runs only the tests whose name matches. */
function selected(name) {
  return !process.env.WORKERS_TESTS || new RegExp(process.env.WORKERS_TESTS).test(name);
}

async function runAll(context) {
  let passed = 0;
  let failed = 0;
  for (const [name, run] of tests) {
    if (!selected(name)) continue;
    const started = performance.now();
    const logsBefore = consoleLines.length;
    try {
      const note = await run(context);
      passed++;
      console.log(`ok - ${name}: ${note} (${((performance.now() - started) / 1000).toFixed(1)} s)`);
    } catch (error) {
      failed++;
      console.log(`FAIL - ${name}: ${error.message}`);
      for (const { agent, level, message } of consoleLines.slice(logsBefore).slice(-40)) {
        console.log(`  [workerd ${agent}] ${level}: ${message}`);
      }
    }
  }
  return { passed, failed };
}

main().then(
  (ok) => process.exit(ok ? 0 : 1),
  (error) => {
    console.error(error);
    console.log("0 passed, 1 failed");
    process.exit(1);
  },
);
