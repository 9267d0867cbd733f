#!/usr/bin/env python3
"""Talks to an MCP server over stdio by hand (newline-delimited JSON-RPC),
for checking the test servers without the Rust client.

    probe.py [--caps JSON] [--call NAME ARGS_JSON]... [--cancel NAME ARGS_JSON SECONDS]...
             [--list] [--wait SECONDS] -- CMD...

Sends initialize, notifications/initialized, tools/list, then in order each
--call as tools/call (waiting for its answer), each --cancel as a tools/call
followed SECONDS later by notifications/cancelled for it (not waiting for an
answer), each --list as another tools/list; then waits --wait seconds
(default 1) and closes stdin. Prints every message the server sends (one JSON per line,
prefixed with "<-") and what it sends ("->"). Stdlib only.
"""
import json
import subprocess
import sys
import threading
import time


def main():
    argv = sys.argv[1:]
    caps, calls, wait = {}, [], 1.0
    while argv and argv[0] != "--":
        flag = argv.pop(0)
        if flag == "--caps":
            caps = json.loads(argv.pop(0))
        elif flag == "--call":
            calls.append(("call", argv.pop(0), json.loads(argv.pop(0)), None))
        elif flag == "--cancel":
            calls.append(("cancel", argv.pop(0), json.loads(argv.pop(0)), float(argv.pop(0))))
        elif flag == "--list":
            calls.append(("list", None, None, None))
        elif flag == "--wait":
            wait = float(argv.pop(0))
        else:
            sys.exit(f"unknown flag {flag}")
    cmd = argv[1:]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    responses = {}
    cond = threading.Condition()

    def reader():
        for line in proc.stdout:
            print("<-", line.rstrip(), flush=True)
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "id" in msg and ("result" in msg or "error" in msg):
                with cond:
                    responses[msg["id"]] = msg
                    cond.notify_all()

    threading.Thread(target=reader, daemon=True).start()

    def send(msg):
        print("->", json.dumps(msg), flush=True)
        proc.stdin.write(json.dumps(msg) + "\n")
        proc.stdin.flush()

    def request(rid, method, params):
        send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        with cond:
            cond.wait_for(lambda: rid in responses or proc.poll() is not None, timeout=60)
        return responses.get(rid)

    request(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": caps,
                              "clientInfo": {"name": "probe", "version": "0"}})
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    time.sleep(0.5)
    request(2, "tools/list", {})
    for i, (kind, name, args, delay) in enumerate(calls):
        params = {"name": name, "arguments": args, "_meta": {"progressToken": f"p{i}"}}
        if kind == "call":
            request(10 + i, "tools/call", params)
        elif kind == "list":
            request(10 + i, "tools/list", {})
        else:
            send({"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call", "params": params})
            time.sleep(delay)
            send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": 10 + i, "reason": "probe cancelled it"}})
    time.sleep(wait)
    proc.stdin.close()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
    print("exit", proc.returncode, flush=True)


if __name__ == "__main__":
    main()
