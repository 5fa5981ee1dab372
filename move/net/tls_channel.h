// The transport two sidecars move an agent over: TCP carrying TLS 1.3, both ends
// authenticated by certificates from one CA file that both trust.
//
// What is checked, on both ends: the protocol is TLS 1.3 exactly (nothing older is offered or
// accepted); the peer presents a certificate; it chains to a certificate in `ca_file` (and
// only there: the system's trust store is never consulted); it is within its validity period.
// What is not checked: the host name or address the client dialled against the server's
// certificate. Peers are identified by membership of the CA, not by name: any certificate the
// CA issued is a valid sidecar. Whoever runs the CA decides who may move agents; the common
// name is reported (peer_common_name()) for logs and for callers that want a policy of their
// own.
//
// The client learns that the server accepted its certificate before TlsConnect returns: in
// TLS 1.3 the server judges the client's certificate after the client's handshake has
// finished, so TlsConnect waits for the server's first post-handshake message (its session
// ticket, sent only once the client's certificate has passed), or for its refusal.
//
// No part of this ever raises SIGPIPE: bytes go to the socket through send(MSG_NOSIGNAL).
//
// Thread-safety: a TlsConnection is used by one thread at a time (reads and writes alike);
// different connections are independent. Every TlsListener method may be called from any
// thread, Accept from several at once (see Accept).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "capsule/base/byte_stream.h"
#include "capsule/base/file_io.h"
#include "capsule/base/openssl_handles.h"
#include "capsule/base/status.h"

namespace capsule::move {

// Either sidecar may be either end, so a certificate should allow both TLS client and server
// use (extendedKeyUsage serverAuth,clientAuth, or none at all), as tests/make_pki.sh makes
// them. `ca_file` must hold the root: an intermediate alone is not accepted as an anchor.
struct TlsCredentials {
  std::string cert_file;  // PEM certificate (chain) of this end
  std::string key_file;   // PEM private key of this end
  std::string ca_file;    // PEM CA certificate(s) the peer's certificate must chain to
};

// One authenticated TLS 1.3 connection. Read/Write move application bytes; a peer that
// vanished, a reset, or no byte for `timeout` gives Unavailable naming the peer.
class TlsConnection : public ByteSource, public ByteSink {
 public:
  // Made by TlsListener::Accept and TlsConnect once the handshake is complete.
  TlsConnection(UniqueFd fd, SslPtr ssl, std::string address, std::string common_name);
  TlsConnection(const TlsConnection&) = delete;
  TlsConnection& operator=(const TlsConnection&) = delete;

  // Closes the socket. Sends close_notify first unless Close() already did or the connection
  // is broken (a failed Read or Write); never blocks to do so.
  ~TlsConnection() override;

  // Up to `size` bytes; 0 only when the peer closed cleanly (close_notify). A reset, a peer
  // that closed its socket without close_notify, or `timeout` seconds without a byte:
  // Unavailable naming the peer. Still usable after Close() (TLS 1.3 half-close).
  Result<size_t> Read(char* buffer, size_t size) override;
  // All of `data` or an error (Unavailable when the peer is gone or takes no byte for
  // `timeout` seconds).
  Status Write(std::string_view data) override;
  // Sends close_notify and shuts down this end's writes; the peer's Read then returns 0.
  // Does not wait for the peer's close_notify. Later Writes fail.
  Status Close() override;

  // "127.0.0.1:4711 (CN=sidecar-b)": the peer's address and certificate's common name.
  const std::string& peer() const { return peer_; }
  // The common name in the peer's certificate subject ("" when it has none).
  std::string peer_common_name() const { return common_name_; }
  // Seconds a Read or Write waits for the peer to move a byte; default 60; 0 = forever.
  void set_timeout_seconds(int seconds) { timeout_seconds_ = seconds; }
  int timeout_seconds() const { return timeout_seconds_; }

 private:
  // Waits until the socket is ready for what OpenSSL asked (`ssl_error` is WANT_READ or
  // WANT_WRITE); Unavailable on timeout.
  Status WaitFor(int ssl_error, const char* doing);
  // The Status for a failed SSL_read/SSL_write/SSL_shutdown; marks the connection broken.
  Status Failure(int ret, const char* doing);

  UniqueFd fd_;
  SslPtr ssl_;
  std::string common_name_;
  std::string peer_;
  int timeout_seconds_ = 60;
  bool broken_ = false;
  bool closed_ = false;
};

// Connections the kernel queues for a listener until it accepts them. The accept loop of a
// server takes them at once and hands each handshake to a thread of its own (AcceptSocket,
// Handshake), so the queue is short-lived; a burst of connections fills it, not a slow peer.
inline constexpr int kListenBacklog = 256;

// A TCP connection TlsListener::AcceptSocket took, its TLS handshake not begun.
struct AcceptedSocket {
  UniqueFd fd;
  std::string address;  // "1.2.3.4:5" or "[::1]:5"
  std::string host;     // the same without the port: the peer's address, as limits count it
};

class TlsListener {
 public:
  // "HOST:PORT" ("[::1]:PORT" for IPv6; ":PORT" for the wildcard address of the first family
  // getaddrinfo offers, 0.0.0.0 on a usual system); PORT 0 picks a free port (see port()).
  // Refuses bad credentials with a clear error (file missing, key not matching the
  // certificate, CA unreadable).
  static Result<std::unique_ptr<TlsListener>> Listen(const std::string& host_port,
                                                     const TlsCredentials& credentials);
  ~TlsListener();
  TlsListener(const TlsListener&) = delete;
  TlsListener& operator=(const TlsListener&) = delete;

  uint16_t port() const { return port_; }

  // Accepts one TCP connection, without its handshake; thread-safe. A server that must not
  // wait on one peer (capsule serve) takes connections with it on one thread and hands each
  // to Handshake on another. Unavailable once Shutdown is called.
  Result<AcceptedSocket> AcceptSocket();

  // Waits up to `timeout_ms` (-1: no limit) for a connection to accept: true when one waits
  // (or the listener is shut down, so that AcceptSocket returns at once), false when the time
  // ran out. For a server loop that has something to do even when nobody connects (the
  // watchdog's ping of capsule serve).
  bool WaitForConnection(int timeout_ms);

  // Completes the TLS handshake of `socket` by `timeout_seconds` from now (0 = no limit), or
  // gives it up (Unavailable saying `woken_why`) as soon as `wake_fd` (or -1 for none)
  // becomes readable. Errors as Accept's; thread-safe (handshakes run at once).
  Result<std::unique_ptr<TlsConnection>> Handshake(AcceptedSocket socket, int timeout_seconds,
                                                   int wake_fd, const std::string& woken_why);

  // Accepts one TCP connection and completes the handshake. A peer that presents no
  // certificate, or one not chaining to the CA, or offers less than TLS 1.3, fails here with
  // PermissionDenied naming the peer and the reason; a peer that vanishes or stalls during the
  // handshake fails with Unavailable. Either way the listener stays usable.
  // The handshake runs inside Accept, so a peer that is slow to complete it holds this call
  // for up to the handshake timeout; a server that must not wait on one peer takes
  // connections with AcceptSocket and runs each Handshake on a thread of its own.
  Result<std::unique_ptr<TlsConnection>> Accept();

  // Makes a blocked Accept return (Unavailable) so a server can stop, and every later Accept
  // too; thread-safe.
  void Shutdown();

  // Seconds a peer has to complete its handshake in Accept; default 30; 0 = forever.
  // Keeps a peer that connects and says nothing from holding Accept.
  void set_handshake_timeout_seconds(int seconds) { handshake_timeout_seconds_ = seconds; }

 private:
  TlsListener(UniqueFd fd, UniqueFd wake_fd, SslCtxPtr ctx, uint16_t port);

  UniqueFd fd_;
  UniqueFd wake_fd_;  // an eventfd Shutdown makes readable
  SslCtxPtr ctx_;
  uint16_t port_;
  std::atomic<bool> shut_down_{false};
  std::atomic<int> handshake_timeout_seconds_{30};
};

// Connects and completes the handshake within `timeout_seconds` (0 = no limit). The server's
// certificate must chain to the CA; the host name is not checked against the certificate
// (peers are identified by CA membership, see above). Returns once the server has accepted
// this end's certificate. Errors: Unavailable (cannot resolve or connect, the server vanished
// or did not finish in time), PermissionDenied (handshake refused, by either end),
// InvalidArgument (malformed address or credentials), NotFound (a credentials file missing).
Result<std::unique_ptr<TlsConnection>> TlsConnect(const std::string& host_port,
                                                  const TlsCredentials& credentials,
                                                  int timeout_seconds = 30);

}  // namespace capsule::move
