#include "move/door.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

namespace capsule::move {

struct DoorPass::Entry {
  uint64_t order = 0;
  std::string host;
  bool handshaking = true;   // guarded by Door::mu_
  bool dropped = false;      // guarded by Door::mu_
  std::string dropped_why;   // guarded by Door::mu_
  UniqueFd wake;             // an eventfd made readable when dropped
};

Status DoorLimits::Check() const {
  const std::pair<const char*, int> all[] = {
      {"--handshake-timeout", handshake_timeout_seconds},
      {"--max-connections", max_connections},
      {"--max-connections-per-peer", max_connections_per_peer},
      {"--max-handshakes", max_handshakes},
      {"--max-handshakes-per-peer", max_handshakes_per_peer},
  };
  for (const auto& [flag, value] : all) {
    if (value < 1) return Status::InvalidArgument(flag, "must be 1 or more, not " + std::to_string(value));
  }
  auto above = [](const char* flag, int value, const char* limit, int bound) {
    return Status::InvalidArgument(std::string(flag) + " " + std::to_string(value),
                                   "more than " + std::string(limit) + " " + std::to_string(bound) + " allows");
  };
  if (max_connections_per_peer > max_connections) {
    return above("--max-connections-per-peer", max_connections_per_peer, "--max-connections", max_connections);
  }
  if (max_handshakes_per_peer > max_handshakes) {
    return above("--max-handshakes-per-peer", max_handshakes_per_peer, "--max-handshakes", max_handshakes);
  }
  if (max_handshakes > max_connections) {
    return above("--max-handshakes", max_handshakes, "--max-connections", max_connections);
  }
  if (max_handshakes_per_peer > max_connections_per_peer) {
    return above("--max-handshakes-per-peer", max_handshakes_per_peer, "--max-connections-per-peer",
                 max_connections_per_peer);
  }
  return Status::Ok();
}

DoorPass::~DoorPass() { door_->Leave(entry_.get()); }

int DoorPass::wake_fd() const { return entry_->wake.get(); }

std::string DoorPass::dropped_why() const {
  std::lock_guard lock(door_->mu_);
  return entry_->dropped_why;
}

void DoorPass::Authenticated() {
  std::lock_guard lock(door_->mu_);
  entry_->handshaking = false;
}

Door::Counts Door::CountLocked(const std::string* host) const {
  Counts counts;
  for (const auto& [order, entry] : entries_) {
    if (entry->dropped || (host != nullptr && entry->host != *host)) continue;
    ++counts.connections;
    if (entry->handshaking) ++counts.handshakes;
  }
  return counts;
}

Door::Counts Door::CountsFor(const std::string& host) {
  std::lock_guard lock(mu_);
  return CountLocked(&host);
}

Door::Counts Door::CountsInAll() {
  std::lock_guard lock(mu_);
  return CountLocked(nullptr);
}

std::shared_ptr<DoorPass::Entry> Door::VictimLocked(const std::string* host) const {
  std::map<std::string, int> in_progress;  // by host
  for (const auto& [order, entry] : entries_) {
    if (entry->handshaking && !entry->dropped) ++in_progress[entry->host];
  }
  std::shared_ptr<Entry> victim;
  int most = 0;
  for (const auto& [order, entry] : entries_) {  // oldest first
    if (!entry->handshaking || entry->dropped || (host != nullptr && entry->host != *host)) continue;
    if (in_progress[entry->host] > most) {
      victim = entry;
      most = in_progress[entry->host];
    }
  }
  return victim;
}

void Door::DropLocked(const std::shared_ptr<Entry>& victim, const std::string& why) {
  victim->dropped = true;
  victim->dropped_why = why;
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(victim->wake.get(), &one, sizeof one);
}

Result<std::unique_ptr<DoorPass>> Door::Admit(const std::string& host) {
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return Status::IOError("eventfd", errno);
  std::lock_guard lock(mu_);
  const std::string from = " from " + host;
  // Each limit in turn, the peer's first: where one is reached, a handshake in progress gives
  // its place to the newcomer, or the newcomer is refused when none is.
  struct Limit {
    const std::string* host;  // nullptr: in all
    bool connections;         // a limit on connections, else on handshakes
    int bound;
    const char* flag;
  };
  const Limit limits[] = {
      {&host, true, limits_.max_connections_per_peer, "--max-connections-per-peer"},
      {&host, false, limits_.max_handshakes_per_peer, "--max-handshakes-per-peer"},
      {nullptr, true, limits_.max_connections, "--max-connections"},
      {nullptr, false, limits_.max_handshakes, "--max-handshakes"},
  };
  for (const Limit& limit : limits) {
    const Counts counts = CountLocked(limit.host);
    const int open = limit.connections ? counts.connections : counts.handshakes;
    if (open < limit.bound) continue;
    const std::string what = std::to_string(open) + (limit.connections ? " connections" : " handshakes") +
                             (limit.host != nullptr ? from : "") +
                             (limit.connections ? " are open" : " are in progress") +
                             (limit.host != nullptr ? "" : " in all") + " (" + limit.flag + " " +
                             std::to_string(limit.bound) + ")";
    std::shared_ptr<Entry> victim = VictimLocked(limit.host);
    if (victim == nullptr) {
      return Status::PermissionDenied("", what + ", every one authenticated");
    }
    DropLocked(victim, "its place went to a newer connection: " + what);
  }
  auto entry = std::make_shared<Entry>();
  entry->order = next_++;
  entry->host = host;
  entry->wake = std::move(wake);
  entries_[entry->order] = entry;
  return std::unique_ptr<DoorPass>(new DoorPass(this, std::move(entry)));
}

void Door::Leave(const Entry* entry) {
  std::lock_guard lock(mu_);
  entries_.erase(entry->order);
}

}  // namespace capsule::move
