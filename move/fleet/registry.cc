#include "move/fleet/registry.h"

#include "capsule/base/canonical_json.h"

namespace capsule::fleet {

namespace {

std::string AgentKey(const std::string& agent) { return kAgentsPrefix + agent; }
std::string SidecarKey(const std::string& name) { return kSidecarsPrefix + name; }
std::string FenceKey(const std::string& agent, const std::string& move) {
  return kFencesPrefix + agent + "/" + move;
}

Result<HolderOfRecord> ParseHolder(const KeyValue& kv) {
  const std::string agent = kv.key.substr(std::string(kAgentsPrefix).size());
  CAPSULE_ASSIGN_OR_RETURN(Json json, ParseJson(kv.value, "holder of record " + agent, Code::kCorruption));
  if (!json.is_object() || !json.contains("sidecar") || !json["sidecar"].is_string() || !json.contains("epoch") ||
      !json["epoch"].is_number_unsigned() || !json.contains("state") || !json["state"].is_string()) {
    return Status::Corruption("holder of record " + agent, "expected {sidecar, epoch, state}");
  }
  return HolderOfRecord{agent, json["sidecar"].get<std::string>(), json["epoch"].get<uint64_t>(),
                        json["state"].get<std::string>(), kv.mod_revision};
}

Result<SidecarEntry> ParseSidecar(const KeyValue& kv) {
  const std::string name = kv.key.substr(std::string(kSidecarsPrefix).size());
  CAPSULE_ASSIGN_OR_RETURN(Json json, ParseJson(kv.value, "sidecar " + name, Code::kCorruption));
  if (!json.is_object()) return Status::Corruption("sidecar " + name, "expected a JSON object");
  SidecarEntry entry;
  entry.name = name;
  entry.address = json.value("address", "");
  entry.ttl = json.value("ttl", int64_t{0});
  entry.lease = kv.lease;
  if (json.contains("agents") && json["agents"].is_array()) {
    for (const Json& agent : json["agents"]) {
      if (agent.is_string()) entry.agents.push_back(agent.get<std::string>());
    }
  }
  return entry;
}

std::string Describe(const std::optional<HolderOfRecord>& record) {
  if (!record) return "no holder of record";
  return "the record names " + record->sidecar + " at epoch " + std::to_string(record->epoch) + " (" + record->state +
         ")";
}

}  // namespace

std::string HolderJson(const std::string& sidecar, uint64_t epoch, const std::string& state) {
  return JsonText({{"epoch", epoch}, {"sidecar", sidecar}, {"state", state}});
}

std::string SidecarJson(const SidecarEntry& entry) {
  return JsonText({{"address", entry.address}, {"agents", entry.agents}, {"name", entry.name}, {"ttl", entry.ttl}});
}

Result<std::optional<HolderOfRecord>> ReadHolder(const EtcdClient& etcd, const std::string& agent) {
  CAPSULE_ASSIGN_OR_RETURN(std::optional<KeyValue> kv, etcd.Get(AgentKey(agent)));
  if (!kv) return std::optional<HolderOfRecord>();
  CAPSULE_ASSIGN_OR_RETURN(HolderOfRecord record, ParseHolder(*kv));
  return std::optional<HolderOfRecord>(std::move(record));
}

Result<std::vector<HolderOfRecord>> ListHolders(const EtcdClient& etcd) {
  CAPSULE_ASSIGN_OR_RETURN(std::vector<KeyValue> kvs, etcd.List(kAgentsPrefix));
  std::vector<HolderOfRecord> out;
  for (const KeyValue& kv : kvs) {
    CAPSULE_ASSIGN_OR_RETURN(HolderOfRecord record, ParseHolder(kv));
    out.push_back(std::move(record));
  }
  return out;
}

Result<std::optional<SidecarEntry>> ReadSidecar(const EtcdClient& etcd, const std::string& name) {
  CAPSULE_ASSIGN_OR_RETURN(std::optional<KeyValue> kv, etcd.Get(SidecarKey(name)));
  if (!kv) return std::optional<SidecarEntry>();
  CAPSULE_ASSIGN_OR_RETURN(SidecarEntry entry, ParseSidecar(*kv));
  return std::optional<SidecarEntry>(std::move(entry));
}

Result<std::vector<SidecarEntry>> ListSidecars(const EtcdClient& etcd) {
  CAPSULE_ASSIGN_OR_RETURN(std::vector<KeyValue> kvs, etcd.List(kSidecarsPrefix));
  std::vector<SidecarEntry> out;
  for (const KeyValue& kv : kvs) {
    CAPSULE_ASSIGN_OR_RETURN(SidecarEntry entry, ParseSidecar(kv));
    out.push_back(std::move(entry));
  }
  return out;
}

Result<Claim> ClaimHolder(const EtcdClient& etcd, const std::string& agent, const std::string& move,
                          const std::string& sidecar, uint64_t epoch) {
  const std::string what = "the holder of record of " + agent;
  CAPSULE_ASSIGN_OR_RETURN(std::optional<HolderOfRecord> before, ReadHolder(etcd, agent));
  if (before && before->epoch >= epoch) {
    return Status::FailedPrecondition(what, "epoch " + std::to_string(epoch) + " is stale: " + Describe(before));
  }
  const int64_t expected = before ? before->mod_revision : 0;
  Result<TxnResult> txn = etcd.Txn({{AgentKey(agent), expected}, {FenceKey(agent, move), 0}},
                                   {{AgentKey(agent), HolderJson(sidecar, epoch, "active"), 0, false}});
  if (!txn.ok() && txn.status().code() != Code::kUnavailable) return txn.status().WithContext(what);
  if (txn.ok() && txn->succeeded) return Claim{before, txn->revision};
  if (txn.ok()) {
    CAPSULE_ASSIGN_OR_RETURN(std::optional<HolderOfRecord> now, ReadHolder(etcd, agent));
    return Status::FailedPrecondition(what, "the record changed while epoch " + std::to_string(epoch) +
                                                " was claimed, or the move was fenced by its source: " + Describe(now));
  }
  // etcd did not say: read it back, and fence the move when it has not landed.
  Result<bool> landed = ResolveByRecord(etcd, agent, move, sidecar, epoch);
  if (!landed.ok()) {
    return Status::Unavailable(what, "the claim's outcome is unknown (" + txn.status().message() +
                                         ") and etcd cannot be read back (" + landed.status().message() + ")");
  }
  if (!*landed) return Status::FailedPrecondition(what, "the claim did not land (" + txn.status().message() + ")");
  CAPSULE_ASSIGN_OR_RETURN(std::optional<HolderOfRecord> now, ReadHolder(etcd, agent));
  return Claim{before, now ? now->mod_revision : 0};
}

Status UndoClaim(const EtcdClient& etcd, const std::string& agent, const Claim& claim) {
  Write back{AgentKey(agent), "", 0, !claim.before.has_value()};
  if (claim.before) back.value = HolderJson(claim.before->sidecar, claim.before->epoch, claim.before->state);
  CAPSULE_ASSIGN_OR_RETURN(TxnResult txn, etcd.Txn({{AgentKey(agent), claim.revision}}, {back}));
  if (!txn.succeeded) return Status::FailedPrecondition("the holder of record of " + agent, "changed since the claim");
  return Status::Ok();
}

Result<bool> ResolveByRecord(const EtcdClient& etcd, const std::string& agent, const std::string& move,
                             const std::string& sidecar, uint64_t epoch) {
  for (int round = 0; round < 3; ++round) {
    CAPSULE_ASSIGN_OR_RETURN(std::optional<HolderOfRecord> now, ReadHolder(etcd, agent));
    if (now && now->sidecar == sidecar && now->epoch == epoch) return true;
    if (now && now->epoch >= epoch) return false;  // someone else's, newer: this move can never land
    // Not landed yet: fence it, on the condition that the record is still what was read.
    Result<TxnResult> fence =
        etcd.Txn({{AgentKey(agent), now ? now->mod_revision : 0}, {FenceKey(agent, move), 0}},
                 {{FenceKey(agent, move), HolderJson(sidecar, epoch, "fenced"), 0, false}});
    if (!fence.ok()) return fence.status();  // and the next call reads again
    if (fence->succeeded) return false;
    // The record changed or the fence was there already: read again.
    CAPSULE_ASSIGN_OR_RETURN(std::optional<KeyValue> fenced, etcd.Get(FenceKey(agent, move)));
    if (fenced) {
      CAPSULE_ASSIGN_OR_RETURN(std::optional<HolderOfRecord> after, ReadHolder(etcd, agent));
      return after && after->sidecar == sidecar && after->epoch == epoch;
    }
  }
  return Status::Unavailable("the holder of record of " + agent, "changed under every read; try again");
}

Status ClaimFresh(const EtcdClient& etcd, const std::string& agent, const std::string& sidecar, uint64_t epoch) {
  const std::string what = "the holder of record of " + agent;
  CAPSULE_ASSIGN_OR_RETURN(std::optional<HolderOfRecord> before, ReadHolder(etcd, agent));
  if (before && before->sidecar != sidecar && before->state != "retired") {
    CAPSULE_ASSIGN_OR_RETURN(std::optional<SidecarEntry> holder, ReadSidecar(etcd, before->sidecar));
    if (holder) {
      return Status::FailedPrecondition(what, Describe(before) + ", which is live (its lease holds): retire it first "
                                                                 "(capsule fleet retire " + agent + ")");
    }
  }
  CAPSULE_ASSIGN_OR_RETURN(TxnResult txn, etcd.Txn({{AgentKey(agent), before ? before->mod_revision : 0}},
                                                   {{AgentKey(agent), HolderJson(sidecar, epoch, "active"), 0, false}}));
  if (!txn.succeeded) return Status::FailedPrecondition(what, "changed while it was read; try again");
  return Status::Ok();
}

Result<HolderOfRecord> RetireRecord(const EtcdClient& etcd, const std::string& agent) {
  const std::string what = "the holder of record of " + agent;
  CAPSULE_ASSIGN_OR_RETURN(std::optional<HolderOfRecord> before, ReadHolder(etcd, agent));
  if (!before) return Status::NotFound(what, "there is none");
  if (before->state == "retired") return *before;
  CAPSULE_ASSIGN_OR_RETURN(TxnResult txn,
                           etcd.Txn({{AgentKey(agent), before->mod_revision}},
                                    {{AgentKey(agent), HolderJson(before->sidecar, before->epoch, "retired"), 0, false}}));
  if (!txn.succeeded) return Status::FailedPrecondition(what, "changed while it was read; try again");
  return *before;
}

}  // namespace capsule::fleet
