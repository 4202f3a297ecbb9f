// An ACP agent on the official TypeScript SDK's AcpServer (@agentclientprotocol/sdk, experimental/server),
// served over Streamable HTTP for acp-client's interop tests.
//
//   node ts_http_agent.mjs <sdk-dir> h1 [options]                node:http + the SDK's createNodeHttpHandler
//   node ts_http_agent.mjs <sdk-dir> h2c [max-streams] [options]  node:http2 cleartext + an adapter to handleRequest
//
// Options: --port N (listen there, for a restart on the same port), --store FILE (sessions and their
// history survive a restart there), --log FILE (one JSON line per POST the server received: the JSON-RPC
// method, or the id of an answer, its Acp-Session-Id header, a v2 resume's replayFrom type and the HTTP
// status it got), --status
// (advertise and serve session/status, list, close and delete), --v2 (also serve the SDK's draft ACP v2 API,
// dist/v2/acp.js, behind its AgentProtocolRouter: an offer of 2 gets v2, an offer of 1 still gets v1).
//
// Listens on 127.0.0.1 (any free port unless --port), prints "READY <port>", exits when stdin closes.
// Sessions live in this process (they survive a dropped HTTP connection; with --store, a restart too,
// as "inactive"). Prompts: "echo: <text>" answers <text> as one chunk; "sleep <s>" says "sleeping " then
// waits (cancellable); "stream <n>" sends n chunks; "ask" asks the client session/request_permission and
// answers the chosen option id.
import fs from "node:fs";
import http from "node:http";
import http2 from "node:http2";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [sdkDir, mode, ...rest] = process.argv.slice(2);
const option = (name) => {
  const at = rest.indexOf(name);
  return at >= 0 ? rest[at + 1] : undefined;
};
const maxStreams = rest[0] && /^[0-9]+$/.test(rest[0]) ? rest[0] : undefined;
const storePath = option("--store");
const logPath = option("--log");
const withStatus = rest.includes("--status");
const withV2 = rest.includes("--v2");
const load = (sub) => import(pathToFileURL(path.join(sdkDir, "node_modules/@agentclientprotocol/sdk/dist", sub)).href);
const acp = await load("v1/stable/acp.js");
const acp2 = await load("v2/acp.js");
const { AcpServer } = await load("transports/server.js");
const { createNodeHttpHandler } = await load("transports/node-adapter.js");

const sessions = new Map(); // sessionId -> { cwd, history: SessionNotification[], turn: AbortController | null, stopReason }
const loaded = new Set(); // sessions in memory since this process started ("active"); the others are "inactive"
let counter = 0;
if (storePath && fs.existsSync(storePath)) {
  const saved = JSON.parse(fs.readFileSync(storePath, "utf8"));
  counter = saved.counter;
  for (const [sessionId, { cwd, history }] of Object.entries(saved.sessions)) {
    sessions.set(sessionId, { cwd, history, turn: null });
  }
}

function save() {
  if (!storePath) return;
  const out = {};
  for (const [sessionId, { cwd, history }] of sessions) out[sessionId] = { cwd, history };
  fs.writeFileSync(storePath, JSON.stringify({ counter, sessions: out }));
}

function chunk(sessionId, text) {
  return { sessionId, update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text } } };
}

async function say(ctx, session, sessionId, text) {
  const update = chunk(sessionId, text);
  session.history.push(update);
  save();
  await ctx.client.notify(acp.methods.client.session.update, update);
}

// What the v1 and the v2 API do alike: make a session, look one up (each version's own -32002), list, close
// and delete, and run a prompt's script.
function newSession(ctx) {
  counter += 1;
  const sessionId = `ts-sess-${counter}`;
  sessions.set(sessionId, { cwd: ctx.params.cwd, history: [], turn: null });
  loaded.add(sessionId);
  save();
  return { sessionId };
}
const lookup = (RequestError) => (sessionId) => {
  const session = sessions.get(sessionId);
  if (!session) throw RequestError.sessionNotFound(sessionId);
  return session;
};
const known = lookup(acp.RequestError);
const known2 = lookup(acp2.RequestError);
const listSessions = async () => ({ sessions: [...sessions].map(([sessionId, { cwd }]) => ({ sessionId, cwd })) });
const closeWith = (find) => async (ctx) => {
  find(ctx.params.sessionId);
  loaded.delete(ctx.params.sessionId);
  return {};
};
const deleteWith = (find) => async (ctx) => {
  find(ctx.params.sessionId);
  loaded.delete(ctx.params.sessionId);
  sessions.delete(ctx.params.sessionId);
  save();
  return {};
};
// A prompt's script: say(text) sends one chunk, ask() the permission request. True when a sleep was cancelled.
async function runScript(text, turn, say, ask) {
  if (text.startsWith("echo: ")) {
    await say(text.slice(6));
  } else if (text.startsWith("stream ")) {
    const n = Number.parseInt(text.slice(7), 10);
    for (let i = 1; i <= n; i += 1) await say(`chunk ${i} `);
  } else if (text === "ask") {
    const answer = await ask();
    await say(`chose ${answer.outcome?.optionId ?? answer.outcome?.outcome}`);
  } else if (text.startsWith("sleep ")) {
    await say("sleeping ");
    const ms = Number.parseFloat(text.slice(6)) * 1000;
    return await new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), ms);
      turn.signal.addEventListener("abort", () => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }
  return false;
}

const sessionCapabilities = withStatus ? { resume: {}, status: {}, list: {}, close: {}, delete: {} } : { resume: {} };
const byId = (params) => {
  if (typeof params?.sessionId !== "string") throw acp.RequestError.invalidParams(params, "sessionId is required");
  return params;
};

let agent = acp
  .agent({ name: "acp-client-interop-ts" })
  .onRequest(acp.methods.agent.initialize, async () => ({
    protocolVersion: 1,
    agentCapabilities: { loadSession: true, sessionCapabilities },
    agentInfo: { name: "acp-client-interop-ts", version: "2.4.0" },
  }))
  .onRequest(acp.methods.agent.session.new, async (ctx) => newSession(ctx))
  .onRequest(acp.methods.agent.session.load, async (ctx) => {
    const session = known(ctx.params.sessionId);
    loaded.add(ctx.params.sessionId);
    for (const update of session.history) {
      await ctx.client.notify(acp.methods.client.session.update, update);
    }
    return {};
  })
  .onRequest(acp.methods.agent.session.resume, async (ctx) => {
    known(ctx.params.sessionId);
    loaded.add(ctx.params.sessionId);
    return {};
  })
  .onRequest(acp.methods.agent.session.prompt, async (ctx) => {
    const sessionId = ctx.params.sessionId;
    const session = known(sessionId);
    const text = ctx.params.prompt.map((block) => block.text ?? "").join("");
    const turn = new AbortController();
    session.turn = turn;
    try {
      const ask = () =>
        ctx.client.request(acp.methods.client.session.requestPermission, {
          sessionId,
          toolCall: { toolCallId: "ask-1", title: "may I?" },
          options: [{ optionId: "yes", name: "Yes", kind: "allow_once" }],
        });
      const cancelled = await runScript(text, turn, (words) => say(ctx, session, sessionId, words), ask);
      return { stopReason: cancelled ? "cancelled" : "end_turn" };
    } finally {
      session.turn = null;
    }
  })
  .onNotification(acp.methods.agent.session.cancel, async (ctx) => {
    sessions.get(ctx.params.sessionId)?.turn?.abort();
  });
if (withStatus) {
  agent = agent
    .onRequest("session/status", byId, async (ctx) => {
      known(ctx.params.sessionId);
      return { status: loaded.has(ctx.params.sessionId) ? "active" : "inactive" };
    })
    .onRequest(acp.methods.agent.session.list, listSessions)
    .onRequest(acp.methods.agent.session.close, closeWith(known))
    .onRequest(acp.methods.agent.session.delete, deleteWith(known));
}

// The draft v2 API (dist/v2/acp.js): a prompt is answered at once with the user message's id, the turn runs
// after it and ends with an idle state_update; session/resume replays from the start when asked
// (replayFrom: {type: "start"}), then sends the state snapshot, then answers; there is no session/load.
// session/status answers the SDK's own v2 words, "open" (in memory) and "saved" (dist/v2/unstable/schema/
// zod.gen.js, zSessionStatus), with the foreground state of a session in memory.
let messages = 0;
const nextMessageId = () => {
  messages += 1;
  return `msg-${process.pid}-${messages}`;
};
function stateOf(session) {
  return session.turn ? { state: "running" } : { state: "idle", ...(session.stopReason ? { stopReason: session.stopReason } : {}) };
}
async function update2(ctx, sessionId, update) {
  await ctx.client.notify(acp2.methods.client.session.update, { sessionId, update });
}
async function say2(ctx, session, sessionId, messageId, text) {
  const update = { sessionUpdate: "agent_message_chunk", messageId, content: { type: "text", text } };
  session.history.push({ sessionId, update });
  save();
  await update2(ctx, sessionId, update);
}
async function turn2(ctx, session, sessionId, text, turn, userMessageId, prompt) {
  let stopReason = "end_turn";
  try {
    // the echo of the inserted prompt carries the receipt's id (after the answer: the spec allows either order)
    const echo = { sessionUpdate: "user_message", messageId: userMessageId, content: prompt };
    session.history.push({ sessionId, update: echo });
    save();
    await update2(ctx, sessionId, echo);
    await update2(ctx, sessionId, { sessionUpdate: "state_update", state: "running" });
    const messageId = nextMessageId();
    const ask = () =>
      ctx.client.request(acp2.methods.client.session.requestPermission, {
        sessionId,
        title: "may I?",
        options: [{ optionId: "yes", name: "Yes", kind: "allow_once" }],
      });
    if (await runScript(text, turn, (words) => say2(ctx, session, sessionId, messageId, words), ask)) {
      stopReason = "cancelled";
    }
  } finally {
    session.turn = null;
    session.stopReason = stopReason;
  }
  await update2(ctx, sessionId, { sessionUpdate: "state_update", state: "idle", stopReason });
}
const agent2 = acp2
  .agent({ name: "acp-client-interop-ts-v2" })
  .onRequest(acp2.methods.agent.initialize, async () => ({
    protocolVersion: 2,
    info: { name: "acp-client-interop-ts", version: "2.4.0" },
    capabilities: { session: withStatus ? { status: {}, delete: {} } : {} },
  }))
  .onRequest(acp2.methods.agent.session.new, async (ctx) => newSession(ctx))
  .onRequest(acp2.methods.agent.session.resume, async (ctx) => {
    const sessionId = ctx.params.sessionId;
    const session = known2(sessionId);
    loaded.add(sessionId);
    if (ctx.params.replayFrom?.type === "start") {
      for (const { update } of session.history) await update2(ctx, sessionId, update);
    }
    await update2(ctx, sessionId, { sessionUpdate: "state_update", ...stateOf(session) });
    return {};
  })
  .onRequest(acp2.methods.agent.session.prompt, async (ctx) => {
    const sessionId = ctx.params.sessionId;
    const session = known2(sessionId);
    const text = ctx.params.prompt.map((block) => block.text ?? "").join("");
    const turn = new AbortController();
    session.turn = turn;
    const userMessageId = nextMessageId();
    // the answer (the insertion receipt) goes out first; the echo and the turn run after it
    setImmediate(() => {
      turn2(ctx, session, sessionId, text, turn, userMessageId, ctx.params.prompt).catch((error) =>
        process.stderr.write(`v2 turn: ${error}\n`),
      );
    });
    return { messageId: userMessageId };
  })
  .onNotification(acp2.methods.agent.session.cancel, async (ctx) => {
    sessions.get(ctx.params.sessionId)?.turn?.abort();
  })
  .onRequest(acp2.methods.agent.session.list, listSessions)
  .onRequest(acp2.methods.agent.session.close, closeWith(known2));
if (withStatus) {
  agent2
    .onRequest(acp2.methods.agent.session.status, async (ctx) => {
      const session = known2(ctx.params.sessionId);
      const open = loaded.has(ctx.params.sessionId);
      return open ? { status: "open", state: stateOf(session) } : { status: "saved" };
    })
    .onRequest(acp2.methods.agent.session.delete, deleteWith(known2));
}

const acpServer = new AcpServer({
  agent: withV2 ? acp2.agentProtocolRouter().withV1(agent).withV2(agent2) : agent,
});

// What the server received: every POST's JSON-RPC method (or the id of an answer), its Acp-Session-Id
// header and the status the server answered, one JSON line each in --log.
if (logPath) {
  const handle = acpServer.handleRequest.bind(acpServer);
  acpServer.handleRequest = async (req, options) => {
    if (req.method !== "POST") return await handle(req, options);
    let message;
    try {
      message = JSON.parse(await req.clone().text());
    } catch {
      message = undefined;
    }
    const response = await handle(req, options);
    const entry = {
      method: message?.method ?? null,
      id: message?.id ?? null,
      sessionId: message?.params?.sessionId ?? null,
      header: req.headers.get("acp-session-id"),
      replayFrom: message?.params?.replayFrom?.type ?? null,
      status: response.status,
    };
    fs.appendFileSync(logPath, `${JSON.stringify(entry)}\n`);
    return response;
  };
}

// node:http2 stream -> Fetch Request -> AcpServer.handleRequest -> Response -> http2 stream
async function serveHttp2(stream, headers) {
  const method = headers[":method"];
  const url = `http://${headers[":authority"] ?? "127.0.0.1"}${headers[":path"]}`;
  const plain = {};
  for (const [name, value] of Object.entries(headers)) {
    if (!name.startsWith(":")) plain[name] = Array.isArray(value) ? value.join(", ") : String(value);
  }
  const abort = new AbortController();
  stream.on("close", () => abort.abort());
  let body;
  if (method === "POST") {
    const parts = [];
    for await (const part of stream) parts.push(part);
    body = Buffer.concat(parts);
  }
  const response = await acpServer.handleRequest(new Request(url, { method, headers: plain, body, signal: abort.signal }));
  if (stream.destroyed) return;
  const out = { ":status": response.status };
  response.headers.forEach((value, name) => {
    if (!["connection", "keep-alive", "transfer-encoding"].includes(name)) out[name] = value;
  });
  stream.respond(out);
  if (!response.body) {
    stream.end();
    return;
  }
  const reader = response.body.getReader();
  stream.on("close", () => reader.cancel().catch(() => {}));
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done || stream.destroyed) break;
      if (!stream.write(value)) await new Promise((resolve) => stream.once("drain", resolve));
    }
  } catch {
    // the client went away
  }
  if (!stream.destroyed) stream.end();
}

let server;
if (mode === "h1") {
  const handler = createNodeHttpHandler(acpServer);
  server = http.createServer((req, res) => handler(req, res));
} else {
  const settings = maxStreams ? { maxConcurrentStreams: Number.parseInt(maxStreams, 10) } : {};
  server = http2.createServer({ settings });
  server.on("stream", (stream, headers) => {
    serveHttp2(stream, headers).catch((error) => {
      process.stderr.write(`h2 adapter: ${error}\n`);
      if (!stream.destroyed) stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
    });
  });
}
const sockets = new Set();
server.on("connection", (socket) => {
  sockets.add(socket);
  socket.on("close", () => sockets.delete(socket));
});
server.listen(Number.parseInt(option("--port") ?? "0", 10), "127.0.0.1", () => {
  process.stdout.write(`READY ${server.address().port}\n`);
});
process.stdin.on("end", async () => {
  await acpServer.close();
  for (const socket of sockets) socket.destroy();
  server.close(() => process.exit(0));
});
process.stdin.resume();
