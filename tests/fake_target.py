#!/usr/bin/env python3
"""A target sidecar that misbehaves, for tests of the source: it speaks the move protocol's
wire over mutual TLS (its certificate, key and CA as a sidecar's) and answers as MODE says.

  fake_target.py CERT KEY CA MODE [ARG]

It prints "listening on 127.0.0.1:PORT" once it listens, then serves each connection on a
thread of its own, and logs each call it reads to standard error ("call NAME").

  refuse TEXT           every call is refused with the error TEXT (a JSON string: escapes
                        such as \\u001b reach the source as the bytes they stand for)
  never-answers SEALHEX offer, copy and switch are answered as a target would (an empty have,
                        the switch sealed to SEALHEX); activate's connection is closed without
                        a reply (the reply lost); every query is read and never answered, its
                        connection held open in silence."""
import json
import socket
import ssl
import struct
import sys
import threading
import time


def read_exactly(conn, n):
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def read_message(conn):
    head = read_exactly(conn, 4)
    if head is None:
        return None
    (length,) = struct.unpack(">I", head)
    body = read_exactly(conn, length)
    return None if body is None else json.loads(body)


def drain_body(conn):
    """Reads a body of chunks to its end marker (0) or cut-off marker (0xFFFFFFFF)."""
    while True:
        head = read_exactly(conn, 4)
        if head is None:
            return False
        (length,) = struct.unpack(">I", head)
        if length in (0, 0xFFFFFFFF):
            return True
        if read_exactly(conn, length) is None:
            return False


def send(conn, message):
    body = json.dumps(message, sort_keys=True, separators=(",", ":")).encode()
    conn.sendall(struct.pack(">I", len(body)) + body)


def serve(conn, mode, arg):
    with conn:
        while True:
            request = read_message(conn)
            if request is None:
                return
            call = request.get("call")
            print("call %s" % call, file=sys.stderr, flush=True)
            if call in ("copy", "switch") and not drain_body(conn):
                return
            if mode == "refuse":
                send(conn, {"ok": False, "code": "FailedPrecondition", "error": json.loads(arg)})
            elif call == "offer":
                send(conn, {"ok": True, "have": {}, "seal_key": arg, "held_epoch": 0, "journal_append": False})
            elif call in ("copy", "switch"):
                send(conn, {"ok": True, "have": {}})
            elif call == "activate":
                return  # the reply is lost: the connection closes without one
            elif call == "query":
                while True:  # read, and never answered
                    time.sleep(3600)
            else:
                send(conn, {"ok": True})


def main():
    cert, key, ca, mode = sys.argv[1:5]
    arg = sys.argv[5] if len(sys.argv) > 5 else ""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.load_cert_chain(cert, key)
    context.load_verify_locations(ca)
    context.verify_mode = ssl.CERT_REQUIRED
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    print("listening on 127.0.0.1:%d" % listener.getsockname()[1], flush=True)
    while True:
        raw, _ = listener.accept()
        try:
            conn = context.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            raw.close()
            continue
        threading.Thread(target=serve, args=(conn, mode, arg), daemon=True).start()


if __name__ == "__main__":
    main()
