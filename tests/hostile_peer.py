#!/usr/bin/env python3
"""A hostile peer of a sidecar, for tests: sends framed messages over mutual TLS and prints
each reply (or how the connection ended), one line per message.

  hostile_peer.py HOST:PORT CERT KEY CA MESSAGE...

A MESSAGE is JSON text, sent as the wire frames it (u32 big-endian length, then the bytes),
or "raw:HEX" for bytes sent as they are (a length that lies, a cut message). Each reply line
is the reply's JSON, "closed" when the sidecar ended the connection, or "no reply" when it
said nothing for 3 seconds after raw bytes (it waits for the rest of a cut message)."""
import socket
import ssl
import struct
import sys


def main():
    address, cert, key, ca = sys.argv[1:5]
    host, port = address.rsplit(":", 1)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.load_cert_chain(cert, key)
    context.load_verify_locations(ca)
    context.check_hostname = False
    for message in sys.argv[5:]:
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            with context.wrap_socket(raw) as conn:
                if message.startswith("raw:"):
                    conn.sendall(bytes.fromhex(message[4:]))
                    conn.settimeout(3)  # a cut message may be waited on: no reply is an answer too
                else:
                    body = message.encode()
                    conn.sendall(struct.pack(">I", len(body)) + body)
                try:
                    head = conn.recv(4)
                    if len(head) < 4:
                        print("closed")
                        continue
                    (length,) = struct.unpack(">I", head)
                    reply = b""
                    while len(reply) < length:
                        chunk = conn.recv(length - len(reply))
                        if not chunk:
                            break
                        reply += chunk
                    print(reply.decode(errors="replace"))
                except socket.timeout:
                    print("no reply")
                except (ConnectionError, ssl.SSLError) as e:
                    print("closed (%s)" % type(e).__name__)


if __name__ == "__main__":
    main()
