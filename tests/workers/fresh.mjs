// Runs one execution through a Worker built from the README's quick start (see
// scripts/fresh-projects.sh), in workerd (Miniflare) against rebuno-dev, all on loopback.
//
//   REBUNO_DEV_BIN=path/to/rebuno-dev node fresh.mjs path/to/hello-worker/build
//
// Exits 0 when the execution completes with "hello, Ada" and the Worker logged its run to the
// console (the quick start's `init_logging`).

import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Log, LogLevel, Miniflare } from "miniflare";

const BUILD = resolve(process.argv[2] ?? "build");
const DEV_BIN = process.env.REBUNO_DEV_BIN;
const SECRET = "fresh-worker-secret";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function freePort() {
  return new Promise((ok, fail) => {
    const server = createServer();
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => ok(port));
    });
  });
}

async function startKernel(webhookUrl) {
  const port = await freePort();
  const manifest = join(mkdtempSync(join(tmpdir(), "rebuno-fresh-")), "manifest.yaml");
  writeFileSync(
    manifest,
    `agents:\n  - id: hello\n    webhook_url: ${webhookUrl}\n    secret: ${SECRET}\n    lease_timeout_seconds: 10\n`,
  );
  const child = spawn(DEV_BIN, ["--config", manifest, "--addr", `127.0.0.1:${port}`], {
    stdio: ["ignore", "ignore", "inherit"],
    env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? "warn" },
  });
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

async function main() {
  const workerPort = await freePort();
  // What the Worker logs to the console (workerd's structured logs), printed at the end.
  const lines = [];
  const kernel = await startKernel(`http://127.0.0.1:${workerPort}/webhook`);
  // The kernel is stopped whatever happens next, a Miniflare option it refuses included.
  let mf;
  try {
    mf = new Miniflare({
      host: "127.0.0.1",
      port: workerPort,
      modules: true,
      modulesRoot: BUILD,
      scriptPath: join(BUILD, "index.js"),
      modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
      compatibilityDate: "2026-04-01",
      cf: false,
      bindings: { REBUNO_URL: kernel.url, REBUNO_AGENT_SECRET: SECRET },
      log: new Log(LogLevel.WARN),
      handleStructuredLogs: ({ level, message }) => {
        lines.push(`${level}: ${message}`);
      },
    });
    await mf.ready;
    const created = await fetch(`${kernel.url}/v0/executions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ agent_id: "hello", input: "Ada" }),
    }).then((r) => r.json());
    for (let i = 0; i < 300; i++) {
      const execution = await fetch(`${kernel.url}/v0/executions/${created.id}`).then((r) => r.json());
      if (["completed", "failed", "cancelled"].includes(execution.status)) {
        console.log(`worker: ${execution.status} ${JSON.stringify(execution.output ?? execution.failure_reason ?? null)}`);
        return execution.status === "completed" && execution.output === "hello, Ada" && (await logged(lines, created.id));
      }
      await sleep(100);
    }
    console.log("worker: the execution did not end in 30 s");
    return false;
  } finally {
    await mf?.dispose();
    kernel.child.kill();
  }
}

/** Whether the Worker's console got the run's `run started` line (waits up to 5 s); prints it all. */
async function logged(lines, id) {
  const started = () => lines.some((l) => l.includes("run started") && l.includes(`execution_id=${id}`));
  for (let i = 0; i < 100 && !started(); i++) await sleep(50);
  console.log(`worker: the console got ${lines.length} line(s):\n  ${lines.join("\n  ")}`);
  if (!started()) console.log("worker: no `run started` line: does the quick start call init_logging?");
  return started();
}

main().then(
  (ok) => process.exit(ok ? 0 : 1),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
