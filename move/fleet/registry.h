// The fleet's registry on etcd (capsule-protocol(7), FLEET):
//
//   /capsulefs/agents/<agent-id>        {"sidecar","epoch","state"}: the holder of record
//   /capsulefs/sidecars/<name>          {"name","address","agents","ttl"}, under the sidecar's
//                                       lease: the sidecar is live while this key exists
//   /capsulefs/fences/<agent-id>/<move> written by a source that, having lost activate's
//                                       reply, makes sure that move never activates
//
// A holder record changes only by a transaction that compares its mod_revision with the one
// the writer read (and checked the epoch of): the fencing token. Nothing here guesses: a
// write whose outcome etcd did not confirm is read back, and fenced when still undecided.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "capsule/base/status.h"
#include "move/fleet/etcd_client.h"

namespace capsule::fleet {

inline constexpr const char kAgentsPrefix[] = "/capsulefs/agents/";
inline constexpr const char kSidecarsPrefix[] = "/capsulefs/sidecars/";
inline constexpr const char kFencesPrefix[] = "/capsulefs/fences/";

struct HolderOfRecord {
  std::string agent;
  std::string sidecar;
  uint64_t epoch = 0;
  std::string state;  // "active" or "retired"
  int64_t mod_revision = 0;
};

struct SidecarEntry {
  std::string name, address;
  std::vector<std::string> agents;
  int64_t ttl = 0;
  int64_t lease = 0;
};

std::string HolderJson(const std::string& sidecar, uint64_t epoch, const std::string& state);
std::string SidecarJson(const SidecarEntry& entry);

Result<std::optional<HolderOfRecord>> ReadHolder(const EtcdClient& etcd, const std::string& agent);
Result<std::vector<HolderOfRecord>> ListHolders(const EtcdClient& etcd);
Result<std::optional<SidecarEntry>> ReadSidecar(const EtcdClient& etcd, const std::string& name);
Result<std::vector<SidecarEntry>> ListSidecars(const EtcdClient& etcd);

// What ClaimHolder changed, for UndoClaim.
struct Claim {
  std::optional<HolderOfRecord> before;
  int64_t revision = 0;  // the record's mod_revision after the claim
};

// The target's activate: `sidecar` becomes the holder of record of `agent` at `epoch` for
// move `move`. Refused (FailedPrecondition, saying what the record says) when the record is
// at `epoch` or newer, or the move was fenced by its source, or the record changed between
// the read and the write. When etcd's answer is lost, reads back; still undecided, fences the
// move itself so that it never lands, and refuses.
Result<Claim> ClaimHolder(const EtcdClient& etcd, const std::string& agent, const std::string& move,
                          const std::string& sidecar, uint64_t epoch);
// Puts back what the claim replaced, if the record is still the claim's (an activation undone).
Status UndoClaim(const EtcdClient& etcd, const std::string& agent, const Claim& claim);

// The source's answer when activate's reply is lost and the target cannot be asked: whether
// move `move` made `sidecar` the holder at `epoch`. When not, the move is fenced first, so it
// never will: the answer is final either way. Unavailable while etcd cannot say.
Result<bool> ResolveByRecord(const EtcdClient& etcd, const std::string& agent, const std::string& move,
                             const std::string& sidecar, uint64_t epoch);

// init and adopt: `sidecar` becomes the holder of record of `agent` at `epoch`, refused while
// the record names another holder that is live and not retired.
Status ClaimFresh(const EtcdClient& etcd, const std::string& agent, const std::string& sidecar, uint64_t epoch);

// capsule fleet retire: the record's state becomes "retired" (its holder flips its mount
// read-only when it next checks). Returns the record as it was.
Result<HolderOfRecord> RetireRecord(const EtcdClient& etcd, const std::string& agent);

}  // namespace capsule::fleet
