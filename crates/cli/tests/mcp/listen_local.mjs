// Preloaded with `node --import` into server-everything's streamableHttp
// transport, which calls `app.listen(PORT)` (every interface, no host
// option): binds every TCP listener of the process to 127.0.0.1 instead,
// and prints `KEEL_MCP_LISTENING 127.0.0.1:<port>` on stderr once it
// listens, so `PORT=0` (a free port chosen by the OS) can be used and the
// test reads the port back without a race.
import net from "node:net";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "object" && args[0] !== null) {
    args[0] = { ...args[0], host: "127.0.0.1" };
  } else if (typeof args[0] === "number" || /^\d+$/.test(String(args[0]))) {
    const port = args[0];
    const rest = args.slice(1).filter((a) => typeof a !== "string");
    args = [port, "127.0.0.1", ...rest];
  }
  this.once("listening", () => {
    const a = this.address();
    if (a && typeof a === "object") {
      process.stderr.write(`KEEL_MCP_LISTENING ${a.address}:${a.port}\n`);
    }
  });
  return listen.apply(this, args);
};
