// A client of etcd's v3 API through its JSON gateway (HTTP/1.1 with libcurl; etcd 3.4 serves
// /v3/kv/range, /v3/kv/put, /v3/kv/txn, /v3/lease/grant, /v3/lease/keepalive and
// /v3/lease/revoke; keys and values travel base64-encoded). Why the gateway rather than gRPC:
// capsule-protocol(7), FLEET.
//
// Several endpoints: a request that could not connect to one (refused, unreachable, the TLS
// handshake failed) is sent to the next, since etcd never saw it. Any other failure after the
// request went out (a timeout, a cut reply, etcd's own "no leader" or "request timed out") is
// ambiguous for a write: Unavailable, saying so, and never retried here; the caller reads
// etcd to learn the outcome. Every read is linearizable (etcd's default): without a quorum
// it fails rather than answer from one member's stale copy.
//
// Thread-safety: one EtcdClient may be used from several threads (each request makes its
// own curl handle).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "capsule/base/status.h"

namespace capsule::fleet {

// Where etcd is and how to reach it: --fleet etcd://H:P[,H:P...] and, for TLS,
// --fleet-cacert, --fleet-cert, --fleet-key.
struct FleetOptions {
  std::string url;  // as given, for messages and the sidecar's status
  std::vector<std::string> endpoints;  // HOST:PORT, in the order tried
  std::string cacert, cert, key;  // TLS to etcd when cacert is set (cert and key: client auth)
  int timeout_ms = 5000;  // each request, from connect to the last byte of the reply
};

// Parses etcd://H:P[,H:P...]; refuses anything else, naming what is wrong.
Result<FleetOptions> ParseFleetUrl(const std::string& url);

struct KeyValue {
  std::string key, value;
  int64_t mod_revision = 0, create_revision = 0, lease = 0;
};

// One compare of a transaction: the key's mod_revision equals `mod_revision` (0: the key does
// not exist).
struct Compare {
  std::string key;
  int64_t mod_revision = 0;
};

// One write of a transaction: put `value` at `key` (with `lease` when not 0), or delete `key`.
struct Write {
  std::string key, value;
  int64_t lease = 0;
  bool remove = false;
};

struct TxnResult {
  bool succeeded = false;  // every compare held, and the writes were made
  int64_t revision = 0;    // the store's revision after the transaction
};

class EtcdClient {
 public:
  explicit EtcdClient(FleetOptions options);

  // The key, or nullopt when it does not exist.
  Result<std::optional<KeyValue>> Get(const std::string& key) const;
  // Every key beginning with `prefix`, in key order.
  Result<std::vector<KeyValue>> List(const std::string& prefix) const;
  // An unconditional put (for benchmarks and tests; the holder of record never uses it).
  Result<int64_t> Put(const std::string& key, const std::string& value, int64_t lease = 0) const;
  // If every compare holds, the writes. Ambiguous failures are Unavailable (see above).
  Result<TxnResult> Txn(const std::vector<Compare>& compares, const std::vector<Write>& writes) const;
  // A lease of `ttl_seconds`; its id.
  Result<int64_t> GrantLease(int64_t ttl_seconds) const;
  // Renews the lease; the TTL it has now, 0 (or NotFound) when it has expired.
  Result<int64_t> KeepAlive(int64_t lease) const;
  Status RevokeLease(int64_t lease) const;

  const FleetOptions& options() const { return options_; }

 private:
  // POSTs `body` to `path` on the first endpoint that takes the connection; etcd's reply.
  Result<std::string> Post(const std::string& path, const std::string& body) const;

  FleetOptions options_;
};

std::string Base64(const std::string& bytes);
Result<std::string> FromBase64(const std::string& text);

}  // namespace capsule::fleet
