// continuum's gate for Kilo Code (CLI 7.7.x): written by `continuum hooks install --client
// kilo` into .kilo/plugin/continuum.js. Do not edit: `continuum hooks install` rewrites it,
// `continuum hooks remove --client kilo` deletes it.
//
// Kilo (built on OpenCode) loads every .js file in .kilo/plugin/ at start, without a trust
// prompt (`kilo run --pure` skips plugins: then nothing is gated). Around every tool call
// (built-in tools, MCP tools, a subagent's calls) it awaits:
//   "tool.execute.before"(input {tool, sessionID, callID}, output {args})
//       throwing blocks the call, and the model reads the thrown text as the result;
//   "tool.execute.after"(input {tool, sessionID, callID, args}, output)
//       only for a call that returned (bash with a non-zero exit too: metadata.exit).
// and sends every bus event to `event` (a subagent's session.created names its parent;
// a tool part that ends in `error` is a call that threw).
//
// Each call goes to the same gate as on the other hosts, `continuum hook KIND --host kilo`,
// with the event as JSON on stdin:
//   before -> pre-tool: exit 0 lets the call run; exit 2 blocks it with continuum's reason;
//             anything else (no binary, another exit code, a signal, a timeout) blocks it
//             too: the gate FAILS CLOSED.
//   after  -> post-tool (post-tool-failure for bash with a non-zero exit, or a call that
//             passed the gate and ended in an error); never blocks.
// Every model request of a session carries continuum's briefing (session-start, asked for
// once per session; subagent-start for a subagent's session) in its system prompt.

import { spawn } from "node:child_process"

const SETTINGS = /*continuum-settings*/ {} /*end-continuum-settings*/

function runHook(kind, event) {
  // resolves {code, signal, stdout, stderr, error}; never rejects
  return new Promise((resolve) => {
    let child
    const argv = [...SETTINGS.command.slice(1), "hook", kind, "--host", "kilo", "--db", SETTINGS.db]
    argv.push("--run", SETTINGS.run, "--project", SETTINGS.project)
    try {
      // its own process group, so that a timeout kills whatever the gate started too
      child = spawn(SETTINGS.command[0], argv, {
        cwd: SETTINGS.project,
        stdio: ["pipe", "pipe", "pipe"],
        detached: true,
      })
    } catch (error) {
      resolve({ code: null, signal: null, stdout: "", stderr: "", error })
      return
    }
    let stdout = ""
    let stderr = ""
    let done = false
    const finish = (result) => {
      if (done) return
      done = true
      clearTimeout(timer)
      resolve({ stdout, stderr, ...result })
    }
    const timer = setTimeout(() => {
      try {
        process.kill(-child.pid, "SIGKILL")
      } catch {
        try {
          child.kill("SIGKILL")
        } catch {}
      }
      finish({ code: null, signal: "SIGKILL", error: new Error(`timed out after ${SETTINGS.timeoutMs} ms`) })
    }, SETTINGS.timeoutMs)
    child.stdout.on("data", (d) => (stdout += d))
    child.stderr.on("data", (d) => (stderr += d))
    child.on("error", (error) => finish({ code: null, signal: null, error }))
    child.on("close", (code, signal) => finish({ code, signal, error: null }))
    child.stdin.on("error", () => {}) // a gate that exits without reading stdin
    child.stdin.end(JSON.stringify(event))
  })
}

function oneLine(text, limit = 2000) {
  const t = String(text ?? "").trim()
  return t.length > limit ? t.slice(0, limit) + " ..." : t
}

export const ContinuumGate = async ({ directory }) => {
  const cwd = directory || SETTINGS.project
  const subagents = new Map() // sessionID -> agent name, for sessions with a parent
  const pending = new Map() // callID -> the pre-tool event of a call the gate let run
  const briefed = new Map() // sessionID -> its briefing ("" when there is nothing to say)
  const base = (sessionID, name, callID) => {
    const event = { session_id: sessionID, cwd, hook_event_name: name }
    if (callID) event.tool_use_id = callID
    if (subagents.has(sessionID)) {
      event.agent_id = sessionID
      event.agent_type = subagents.get(sessionID)
    }
    return event
  }
  const post = async (kind, event) => {
    const r = await runHook(kind, event)
    if (r.error || r.code !== 0) {
      console.error(`continuum ${kind}: ${r.error ? r.error.message : `exit ${r.code ?? r.signal}`} ${oneLine(r.stderr, 300)}`)
    }
  }
  return {
    "tool.execute.before": async (input, output) => {
      const event = {
        ...base(input.sessionID, "PreToolUse", input.callID),
        tool_name: input.tool,
        tool_input: output?.args ?? {},
      }
      const r = await runHook("pre-tool", event)
      if (!r.error && r.code === 0) {
        pending.set(input.callID, event)
        return
      }
      if (!r.error && r.code === 2) {
        throw new Error(oneLine(r.stderr) || "continuum refused this tool call")
      }
      const why = r.error ? r.error.message : r.signal ? `killed by ${r.signal}` : `exit ${r.code}`
      throw new Error(
        `continuum's gate could not judge this ${input.tool} call (${why}), so it was refused ` +
          `to be safe; tell the user. ${oneLine(r.stderr, 500)}`,
      )
    },
    "tool.execute.after": async (input, output) => {
      const before = pending.get(input.callID)
      pending.delete(input.callID)
      const event = {
        ...(before ?? base(input.sessionID, "PostToolUse", input.callID)),
        hook_event_name: "PostToolUse",
        tool_name: input.tool,
        tool_input: input.args ?? before?.tool_input ?? {},
        tool_response: output,
      }
      const exit = output?.metadata?.exit
      if (input.tool === "bash" && typeof exit === "number" && exit !== 0) {
        event.hook_event_name = "PostToolUseFailure"
        event.error = `Exit code ${exit}`
        delete event.tool_response
        await post("post-tool-failure", event)
        return
      }
      await post("post-tool", event)
    },
    "experimental.chat.system.transform": async (input, output) => {
      // Kilo rebuilds the system prompt for every model request: the briefing, asked for
      // once per session (subagent sessions as subagents), goes into each of them.
      const sessionID = input?.sessionID
      if (!sessionID || !Array.isArray(output?.system)) return
      if (!briefed.has(sessionID)) {
        const kind = subagents.has(sessionID) ? "subagent-start" : "session-start"
        const name = subagents.has(sessionID) ? "SubagentStart" : "SessionStart"
        const r = await runHook(kind, { ...base(sessionID, name), source: "startup" })
        let text = ""
        try {
          if (!r.error && r.code === 0 && r.stdout.trim()) {
            text = JSON.parse(r.stdout)?.hookSpecificOutput?.additionalContext ?? ""
          }
        } catch {}
        briefed.set(sessionID, typeof text === "string" ? text : "")
      }
      const text = briefed.get(sessionID)
      if (text) output.system.push(text)
    },
    event: async ({ event }) => {
      const props = event?.properties ?? {}
      if (event?.type === "session.created" && props.info?.parentID) {
        subagents.set(props.info.id, props.info.agent ?? "subagent")
        return
      }
      const part = props.part
      if (event?.type !== "message.part.updated" || part?.type !== "tool") return
      if (part.state?.status !== "error" || !pending.has(part.callID)) return
      const before = pending.get(part.callID)
      pending.delete(part.callID)
      await post("post-tool-failure", {
        ...before,
        hook_event_name: "PostToolUseFailure",
        error: oneLine(part.state.error, 1000) || "the tool failed",
      })
    },
  }
}
