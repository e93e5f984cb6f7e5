#!/usr/bin/env python3
"""The far side of bench/fw-traffic.sh, in the bed's gateway namespace.

  serve ADDR CERT KEY ROOT   HTTPS on ADDR:443: git's smart HTTP (git
                             http-backend, repositories under ROOT/git) at
                             /git/, static files under ROOT/npm at /npm/
                             (a registry stand-in: packuments and tarballs)
  relay ADDR TARGET          TCP from ADDR:443 to TARGET (host:port), bytes
                             unchanged (sbx-msgapi cannot share the port)

Both bind with SO_REUSEPORT beside the bed's wildcard TLS server: the more
specific address gets the connections. Prints "ready" once listening.
"""

import os
import socket
import ssl
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def server_bind(self):
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()


def handler(root):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):
            self.route()

        def do_POST(self):
            self.route()

        def route(self):
            path, _, query = self.path.partition("?")
            if path.startswith("/git/"):
                return self.git(path[len("/git"):], query)
            if path.startswith("/npm/") and self.command == "GET":
                return self.static(os.path.join(root, "npm", path[len("/npm/"):]))
            self.reply(404, b"not here\n")

        def reply(self, status, body, ctype="text/plain"):
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def static(self, p):
            p = os.path.normpath(p)
            if os.path.isdir(p):
                p = os.path.join(p, "index.json")
            try:
                with open(p, "rb") as f:
                    body = f.read()
            except OSError:
                return self.reply(404, b"no such package\n")
            ctype = "application/json" if p.endswith(".json") else "application/octet-stream"
            self.reply(200, body, ctype)

        def git(self, path_info, query):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "GIT_PROJECT_ROOT": os.path.join(root, "git"),
                "GIT_HTTP_EXPORT_ALL": "1",
                "PATH_INFO": path_info,
                "QUERY_STRING": query,
                "REQUEST_METHOD": self.command,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                "REMOTE_ADDR": self.client_address[0],
            }
            out = subprocess.run(["git", "http-backend"], input=body, env=env,
                                 capture_output=True).stdout
            head, _, rest = out.partition(b"\r\n\r\n")
            status = 200
            headers = []
            for line in head.split(b"\r\n"):
                k, _, v = line.decode("latin-1").partition(":")
                if k.lower() == "status":
                    status = int(v.strip().split()[0])
                elif k:
                    headers.append((k, v.strip()))
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(rest)))
            self.end_headers()
            self.wfile.write(rest)

    return H


def serve(addr, cert, key, root):
    srv = Server((addr, 443), handler(root))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    print("ready", flush=True)
    srv.serve_forever()


def relay(addr, target):
    host, _, port = target.rpartition(":")
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    ls.bind((addr, 443))
    ls.listen(256)
    print("ready", flush=True)

    def pump(a, b):
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                b.sendall(d)
        except OSError:
            pass
        finally:
            try:
                b.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    while True:
        c, _ = ls.accept()
        u = socket.create_connection((host, int(port)))
        threading.Thread(target=pump, args=(c, u), daemon=True).start()
        threading.Thread(target=pump, args=(u, c), daemon=True).start()


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(*sys.argv[2:6])
    else:
        relay(*sys.argv[2:4])
