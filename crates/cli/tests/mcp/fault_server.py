#!/usr/bin/env python3
"""An MCP server over stdio that misbehaves on request, for Keel's MCP
client tests. Built on the low-level `Server` of the Python MCP SDK 2.x
(`mcp` in `tests/frontends/requirements.txt`); run it with the venv's
python:

    tests/frontends/.venv/bin/python tests/mcp/fault_server.py [--log PATH]
        [--exit-at-start CODE] [--hang-initialize]

Tools (arguments in brackets):

    echo(text)          returns `text`
    big(bytes)          returns a text of exactly `bytes` bytes ("0123456789" repeated)
    fail(text?)         returns isError: true with `text` (default "the tool failed")
    image()             returns one image content item (a 1x1 PNG, image/png)
    structured(value?)  returns structuredContent {"value": value (default 42),
                        "items": [1, 2, 3]} and the same JSON as a text item
    env()               returns its environment variable names, sorted, one a line
    stderr(line)        writes `line` to stderr, then returns "ok"
    sleep(seconds)      returns "slept" after `seconds`
    hang()              never returns (until cancelled)
    crash()             the process exits with os._exit(3) mid-call, no response
    add_tool(name)      registers the tool `late_<name>` (returns "late_<name> called"
                        and its arguments as JSON), sends
                        notifications/tools/list_changed, returns "added late_<name>"

An unknown tool is a JSON-RPC error (-32602).

The log (`--log PATH`, else env `FAULT_LOG`; none when neither is set)
gets one JSON object a line, appended and flushed as it happens:

    {"server": "started", "pid": 1234}
    {"started": "<tool>", "request_id": <id>}     a tools/call reached its handler
    {"listed": <count>}                           a tools/list was answered
    {"cancelled": <id>, "reason": "<reason>"}     notifications/cancelled arrived (logged
                                                  as read from stdin, before the SDK
                                                  cancels the handler; reason null
                                                  when absent)
    {"interrupted": "<tool>", "request_id": <id>} the call's handler was cancelled
    {"server": "stopped"}                         stdin closed, normal exit

Fault modes: `--exit-at-start CODE` writes "fault_server: exiting at start"
to stderr and exits with CODE before reading anything; `--hang-initialize`
never answers `initialize`.
"""

import argparse
import base64
import io
import json
import os
import struct
import sys
import zlib

import anyio
import mcp_types as types
from mcp.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

LOG_PATH = None


def log(record):
    if not LOG_PATH:
        return
    with open(LOG_PATH, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()


def tiny_png():
    """A 1x1 opaque red PNG, built with the standard library."""

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


PNG_BASE64 = base64.b64encode(tiny_png()).decode("ascii")


def schema(properties=None, required=()):
    return {"type": "object", "properties": properties or {}, "required": list(required)}


STRING = {"type": "string"}
TOOLS = [
    types.Tool(name="echo", description="Returns its text argument.",
               input_schema=schema({"text": STRING}, ["text"])),
    types.Tool(name="big", description="Returns a text of the given number of bytes.",
               input_schema=schema({"bytes": {"type": "integer", "minimum": 0}}, ["bytes"])),
    types.Tool(name="fail", description="Returns a tool error (isError: true).",
               input_schema=schema({"text": STRING})),
    types.Tool(name="image", description="Returns a 1x1 PNG image.", input_schema=schema()),
    types.Tool(name="structured", description="Returns structured content and its text.",
               input_schema=schema({"value": {}}),
               output_schema=schema({"value": {}, "items": {"type": "array", "items": {"type": "integer"}}},
                                    ["value", "items"])),
    types.Tool(name="env", description="Returns the names of its environment variables.",
               input_schema=schema()),
    types.Tool(name="stderr", description="Writes a line to stderr, returns ok.",
               input_schema=schema({"line": STRING}, ["line"])),
    types.Tool(name="sleep", description="Returns after the given seconds.",
               input_schema=schema({"seconds": {"type": "number", "minimum": 0}}, ["seconds"])),
    types.Tool(name="hang", description="Never returns until cancelled.", input_schema=schema()),
    types.Tool(name="crash", description="The server process exits mid-call.", input_schema=schema()),
    types.Tool(name="add_tool", description="Registers the tool late_<name> and sends tools/list_changed.",
               input_schema=schema({"name": STRING}, ["name"])),
]
LATE_TOOLS = []


def text(value, is_error=False):
    return types.CallToolResult(content=[types.TextContent(type="text", text=value)], is_error=is_error)


async def list_tools(ctx, params):
    log({"listed": len(TOOLS + LATE_TOOLS)})
    return types.ListToolsResult(tools=TOOLS + LATE_TOOLS)


async def call_tool(ctx, params):
    name = params.name
    args = params.arguments or {}
    log({"started": name, "request_id": ctx.request_id})
    try:
        return await run_tool(ctx, name, args)
    except anyio.get_cancelled_exc_class():
        log({"interrupted": name, "request_id": ctx.request_id})
        raise


async def run_tool(ctx, name, args):
    if name == "echo":
        return text(str(args.get("text", "")))
    if name == "big":
        n = int(args.get("bytes", 0))
        return text(("0123456789" * (n // 10 + 1))[:n])
    if name == "fail":
        return text(str(args.get("text", "the tool failed")), is_error=True)
    if name == "image":
        return types.CallToolResult(
            content=[types.ImageContent(type="image", data=PNG_BASE64, mime_type="image/png")])
    if name == "structured":
        value = {"value": args.get("value", 42), "items": [1, 2, 3]}
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(value))], structured_content=value)
    if name == "env":
        return text("\n".join(sorted(os.environ)))
    if name == "stderr":
        sys.stderr.write(str(args.get("line", "")) + "\n")
        sys.stderr.flush()
        return text("ok")
    if name == "sleep":
        await anyio.sleep(float(args.get("seconds", 0)))
        return text("slept")
    if name == "hang":
        await anyio.sleep_forever()
    if name == "crash":
        sys.stderr.write("fault_server: crashing\n")
        sys.stderr.flush()
        os._exit(3)
    if name == "add_tool":
        late = "late_" + str(args.get("name", ""))
        if all(t.name != late for t in TOOLS + LATE_TOOLS):
            LATE_TOOLS.append(types.Tool(name=late, description="Registered at run time by add_tool.",
                                         input_schema=schema()))
        await ctx.session.send_tool_list_changed()
        return text("added " + late)
    if any(t.name == name for t in LATE_TOOLS):
        return text(f"{name} called {json.dumps(args, sort_keys=True)}")
    raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {name}")


class LoggedStdin:
    """stdin lines as the SDK's stdio transport reads them; logs each
    notifications/cancelled as it arrives, before the SDK applies it."""

    def __init__(self):
        stream = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
        self.lines = anyio.wrap_file(stream).__aiter__()

    def __aiter__(self):
        return self

    async def __anext__(self):
        line = await self.lines.__anext__()
        if "notifications/cancelled" in line:
            try:
                msg = json.loads(line)
            except ValueError:
                msg = {}
            if msg.get("method") == "notifications/cancelled":
                p = msg.get("params") or {}
                log({"cancelled": p.get("requestId"), "reason": p.get("reason")})
        return line


async def stall_initialize(ctx, call_next):
    """Middleware for --hang-initialize: never answers initialize."""
    if ctx.method == "initialize":
        await anyio.sleep_forever()
    return await call_next(ctx)


def main():
    global LOG_PATH
    parser = argparse.ArgumentParser(description="A misbehaving MCP server for tests.")
    parser.add_argument("--log", default=os.environ.get("FAULT_LOG"))
    parser.add_argument("--exit-at-start", type=int, default=None)
    parser.add_argument("--hang-initialize", action="store_true")
    opts = parser.parse_args()
    LOG_PATH = opts.log
    if opts.exit_at_start is not None:
        sys.stderr.write("fault_server: exiting at start\n")
        sys.stderr.flush()
        os._exit(opts.exit_at_start)
    log({"server": "started", "pid": os.getpid()})

    server = Server("keel-fault-server", version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool)
    if opts.hang_initialize:
        server.middleware.append(stall_initialize)
    init = server.create_initialization_options(NotificationOptions(tools_changed=True))

    async def serve():
        async with stdio_server(stdin=LoggedStdin()) as (read, write):
            await server.run(read, write, init)

    anyio.run(serve)
    log({"server": "stopped"})


if __name__ == "__main__":
    main()
