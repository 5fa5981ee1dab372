// The move protocol over the TLS transport: a TLS connection as a move::Connection, and a
// Dialer that opens one to a sidecar.
#pragma once

#include <memory>
#include <string>

#include "move/net/tls_channel.h"
#include "move/remote_target.h"

namespace capsule::move {

// Seconds a sidecar connection waits for the peer to move a byte before it is given up.
inline constexpr int kLinkTimeoutSeconds = 300;

class TlsLink : public Connection {
 public:
  explicit TlsLink(std::unique_ptr<TlsConnection> conn) : conn_(std::move(conn)) {}
  ByteSource* in() override { return conn_.get(); }
  ByteSink* out() override { return conn_.get(); }
  void Close() override { (void)conn_->Close(); }
  std::string peer() const override { return conn_->peer(); }
  void set_timeout_seconds(int seconds) override { conn_->set_timeout_seconds(seconds); }
  int timeout_seconds() const override { return conn_->timeout_seconds(); }
  // The common name of the peer's certificate: who it is, whatever address it comes from.
  std::string peer_name() const { return conn_->peer_common_name(); }

 private:
  std::unique_ptr<TlsConnection> conn_;
};

// Connects and completes the handshake within the dial's limit, 30 seconds when it gives none.
inline Dialer TlsDialer(const std::string& to, const TlsCredentials& credentials) {
  return [to, credentials](int timeout_seconds) -> Result<std::unique_ptr<Connection>> {
    CAPSULE_ASSIGN_OR_RETURN(std::unique_ptr<TlsConnection> conn,
                             TlsConnect(to, credentials, timeout_seconds > 0 ? timeout_seconds : 30));
    conn->set_timeout_seconds(kLinkTimeoutSeconds);
    return std::unique_ptr<Connection>(new TlsLink(std::move(conn)));
  };
}

}  // namespace capsule::move
