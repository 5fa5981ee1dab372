#include "move/sidecar_state.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>

#include "capsule/base/file_io.h"
#include "capsule/format/holder.h"
#include "capsule/format/layout.h"
#include "capsule/format/local_files.h"
#include "move/move_source.h"

namespace capsule::move {

namespace {

std::string UtcNow() {
  std::time_t now = std::time(nullptr);
  std::tm tm {};
  ::gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// Text quoted as a JSON string: control characters escaped, bytes that are not UTF-8 replaced,
// so that nothing a peer sent can forge a line or a terminal's escape.
std::string Quoted(const std::string& text) {
  return JsonText(Json(text));
}

// A value of a log line: as it is when it is printable ASCII with no blank, quote, backslash or
// '=', else quoted.
std::string LogValue(const std::string& value) {
  const bool plain = !value.empty() && std::all_of(value.begin(), value.end(), [](char c) {
    return c > ' ' && c < 0x7f && c != '"' && c != '\\' && c != '=';
  });
  return plain ? value : Quoted(value);
}

Json MoveToJson(const MoveInFlight& m) {
  return {{"direction", m.direction}, {"agent", m.agent}, {"move", m.move}, {"epoch", m.epoch},
          {"phase", m.phase},         {"peer", m.peer},   {"since", m.since}};
}

// The folders directly under `dir` whose names do not begin with '.', sorted.
Result<std::vector<std::string>> TopFolders(const std::string& dir) {
  std::unique_ptr<DIR, int (*)(DIR*)> handle(::opendir(dir.c_str()), &::closedir);
  if (!handle) return Status::IOError(dir, errno);
  std::vector<std::string> names;
  while (struct dirent* entry = ::readdir(handle.get())) {
    std::string name = entry->d_name;
    if (name.empty() || name[0] == '.') continue;
    struct stat st;
    if (::lstat(JoinPath(dir, name).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

LogSink LogSinkFor(bool json, FILE* log) {
  // Under systemd, standard error is a stream to journald when JOURNAL_STREAM names its device
  // and inode (systemd.exec(5)); a redirection made since does not count.
  LogSink sink{json, false};
  const char* stream = std::getenv("JOURNAL_STREAM");
  struct stat st;
  if (stream != nullptr && ::fstat(::fileno(log), &st) == 0) {
    sink.journal = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) == stream;
  }
  return sink;
}

SidecarState::SidecarState(std::string root, std::string listen, FILE* log, LogSink sink)
    : root_(std::move(root)),
      listen_(std::move(listen)),
      started_(UtcNow()),
      log_(log),
      sink_(sink),
      metrics_(&registry_, root_, [this] {
        std::lock_guard lock(mu_);
        return moves_.size();
      }) {}

void SidecarState::Log(const std::string& event, const std::string& call, const std::string& agent,
                       const std::string& move, uint64_t epoch, const std::string& peer, const std::string& why,
                       Code code) {
  metrics_.Event(event, call, agent, move);
  if (event == "refused") metrics_.Refused(call, code);
  std::string line = event + " " + call + " agent=" + LogValue(agent) + " move=" + LogValue(move) +
                     " epoch=" + std::to_string(epoch) + " peer=" + LogValue(peer);
  if (!why.empty()) line += " why=" + Quoted(why);
  Json fields = {{"event", event}, {"call", call}, {"agent", agent}, {"move", move}, {"epoch", epoch}, {"peer", peer}};
  if (!why.empty()) fields["why"] = why;
  Write(event, line, std::move(fields));
}

void SidecarState::LogDoor(const std::string& event, const std::string& what, const std::string& peer,
                           const std::string& why, Code code) {
  if (event == "refused") metrics_.Refused(what, code);
  Write(event, event + " " + what + " peer=" + LogValue(peer) + " why=" + Quoted(why),
        {{"event", event}, {"call", what}, {"peer", peer}, {"why", why}});
}

void SidecarState::Note(const std::string& event, const std::string& text) {
  Write(event, event + " " + text, {{"event", event}, {"text", text}});
}

void SidecarState::Write(const std::string& event, const std::string& text, Json fields) {
  std::string line;
  if (sink_.journal) {
    // journald reads the line's priority from this prefix (sd-daemon(3)): a refusal, a drop,
    // a failure or an expiry is a warning, every other event a notice of what happened.
    const bool warning = event == "refused" || event == "dropped" || event == "failed" || event == "expired";
    line = warning ? "<4>" : "<5>";
  }
  if (sink_.json) {
    fields["time"] = UtcNow();
    fields["program"] = "serve";
    line += JsonText(fields);
  } else {
    line += UtcNow() + " serve: " + text;
  }
  std::lock_guard lock(mu_);
  std::fprintf(log_, "%s\n", line.c_str());
  std::fflush(log_);
}

void SidecarState::SetPhase(const std::string& agent, const std::string& move, uint64_t epoch,
                            const std::string& peer, const std::string& phase) {
  std::lock_guard lock(mu_);
  if (phase.empty()) {
    auto it = moves_.find(agent);
    if (it == moves_.end() || it->second.move != move) return;
    moves_.erase(it);
  } else {
    moves_[agent] = MoveInFlight{"in", agent, move, phase, peer, epoch, UtcNow()};
  }
  Status saved = SaveLocked();
  if (!saved.ok()) std::fprintf(log_, "capsule: serve: %s\n", saved.message().c_str());
}

uint64_t SidecarState::EpochOf(const std::string& agent, const std::string& move) {
  std::lock_guard lock(mu_);
  auto it = moves_.find(agent);
  return it != moves_.end() && it->second.move == move ? it->second.epoch : 0;
}

Status SidecarState::Save() {
  std::lock_guard lock(mu_);
  return SaveLocked();
}

void SidecarState::SetFleet(const std::string& url, const std::string& name, int64_t lease, int64_t ttl) {
  std::lock_guard lock(mu_);
  char hex[32];
  std::snprintf(hex, sizeof hex, "%llx", static_cast<unsigned long long>(lease));
  fleet_ = {{"url", url}, {"name", name}, {"lease", hex}, {"ttl", ttl}};
  Status saved = SaveLocked();
  if (!saved.ok()) std::fprintf(log_, "capsule: serve: %s\n", saved.message().c_str());
}

Status SidecarState::SaveLocked() {
  Json moves = Json::array();
  for (const auto& [agent, m] : moves_) moves.push_back(MoveToJson(m));
  Json state = {{"pid", static_cast<int64_t>(::getpid())}, {"listen", listen_}, {"started", started_}, {"moves", moves}};
  if (!fleet_.is_null()) state["fleet"] = fleet_;
  return WriteFileAtomic(JoinPath(root_, kSidecarState), JsonText(state) + "\n");
}

Result<OfferReply> LoggedTarget::Offer(const OfferRequest& asked) {
  OfferRequest request = asked;
  request.source = source_;
  Result<OfferReply> reply = target_->Offer(request);
  if (!reply.ok()) {
    state_->Log("refused", "offer", request.agent, request.move, request.epoch, peer_, reply.status().message(),
                reply.status().code());
    return reply;
  }
  state_->Log("accepted", "offer", request.agent, request.move, request.epoch, peer_);
  state_->SetPhase(request.agent, request.move, request.epoch, peer_, "offered");
  return reply;
}

Result<HaveMap> LoggedTarget::Copy(const std::string& agent, const std::string& move, ByteSource* stream) {
  CountingSource counted(stream, &state_->metrics().bytes_received());
  const auto began = std::chrono::steady_clock::now();
  Result<HaveMap> have = target_->Copy(agent, move, &counted);
  state_->metrics().copy_seconds().Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  uint64_t epoch = state_->EpochOf(agent, move);
  if (!have.ok()) {
    state_->Log("refused", "copy", agent, move, epoch, peer_, have.status().message(), have.status().code());
    state_->SetPhase(agent, move, epoch, peer_, "");  // a failed call drops the staged move
    return have;
  }
  state_->Log("copied", "copy", agent, move, epoch, peer_);
  state_->SetPhase(agent, move, epoch, peer_, "copied");
  return have;
}

Status LoggedTarget::Switch(const std::string& agent, const std::string& move, ByteSource* stream) {
  state_->metrics().Event("switch-begun", "switch", agent, move);
  CountingSource counted(stream, &state_->metrics().bytes_received());
  Status done = target_->Switch(agent, move, &counted);
  uint64_t epoch = state_->EpochOf(agent, move);
  if (!done.ok()) {
    state_->Log("refused", "switch", agent, move, epoch, peer_, done.message(), done.code());
    state_->SetPhase(agent, move, epoch, peer_, "");  // a failed call drops the staged move
    return done;
  }
  state_->Log("switched", "switch", agent, move, epoch, peer_);
  state_->SetPhase(agent, move, epoch, peer_, "switched");
  return done;
}

Status LoggedTarget::Activate(const std::string& agent, const std::string& move, uint64_t epoch) {
  Status done = target_->Activate(agent, move, epoch);
  if (!done.ok()) {
    state_->Log("refused", "activate", agent, move, epoch, peer_, done.message(), done.code());
    state_->SetPhase(agent, move, epoch, peer_, "");  // a failed call drops the staged move
    return done;
  }
  state_->Log("activated", "activate", agent, move, epoch, peer_);
  state_->SetPhase(agent, move, epoch, peer_, "");
  return done;
}

Result<QueryReply> LoggedTarget::Query(const std::string& agent, const std::string& move) {
  Result<QueryReply> reply = target_->Query(agent, move);
  if (!reply.ok()) {
    state_->Log("refused", "query", agent, move, 0, peer_, reply.status().message(), reply.status().code());
  } else {
    // A move not activated by now never will be: its staging area is gone.
    state_->SetPhase(agent, move, 0, peer_, "");
  }
  return reply;
}

Status LoggedTarget::Abort(const std::string& agent, const std::string& move) {
  Status done = target_->Abort(agent, move);
  uint64_t epoch = state_->EpochOf(agent, move);
  if (!done.ok()) {
    state_->Log("refused", "abort", agent, move, epoch, peer_, done.message(), done.code());
    return done;
  }
  state_->Log("aborted", "abort", agent, move, epoch, peer_);
  state_->SetPhase(agent, move, epoch, peer_, "");
  return done;
}

Result<SidecarStatus> ReadSidecarStatus(const std::string& root) {
  SidecarStatus status;
  status.root = root;
  struct stat st;
  if (::stat(root.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::NotFound(root, "no such file or folder");
    return Status::IOError(root, errno);
  }
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(root, "not a folder (a sidecar's --root)");
  Json state = Json::object();
  std::string state_path = JoinPath(root, kSidecarState);
  if (PathExists(state_path)) {
    CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadFileBounded(state_path, 1 << 20, "a sidecar's state"));
    CAPSULE_ASSIGN_OR_RETURN(state, ParseJson(text, kSidecarState, Code::kCorruption));
    if (!state.is_object()) return Status::Corruption(state_path, "not a JSON object");
  } else if (!PathExists(JoinPath(root, kSidecarLock))) {
    return Status::NotFound(root, "no sidecar has served it (no " + std::string(kSidecarState) + ")");
  }
  status.pid = state.value("pid", int64_t{0});
  status.listen = state.value("listen", "");
  status.started = state.value("started", "");
  if (state.contains("fleet") && state["fleet"].is_object()) {
    const Json& fleet = state["fleet"];
    status.fleet_url = fleet.value("url", "");
    status.fleet_name = fleet.value("name", "");
    status.fleet_lease = fleet.value("lease", "");
    status.fleet_ttl = fleet.value("ttl", int64_t{0});
  }
  // The pid the state file names is alive and holds the root's lock (named in the lock file).
  Result<std::string> lock_text = ReadFileBounded(JoinPath(root, kSidecarLock), 64 << 10, "a sidecar's lock");
  std::string lock_pid = lock_text.ok() ? *lock_text : "";
  while (!lock_pid.empty() && (lock_pid.back() == '\n' || lock_pid.back() == ' ')) lock_pid.pop_back();
  status.running = status.pid > 0 && lock_pid == std::to_string(status.pid) &&
                   (::kill(static_cast<pid_t>(status.pid), 0) == 0 || errno == EPERM);

  CAPSULE_ASSIGN_OR_RETURN(std::vector<std::string> folders, TopFolders(root));
  for (const std::string& name : folders) {
    std::string dir = JoinPath(root, name);
    Result<HolderRecord> record = HolderRecord::Load(dir);
    if (!record.ok()) continue;
    status.agents.push_back({record->agent, HolderStateName(record->state), record->epoch});
    Result<std::optional<OutgoingMove>> out = LoadOutgoingMove(dir);
    if (out.ok() && out->has_value()) {
      const OutgoingMove& m = **out;
      status.moves.push_back(MoveInFlight{"out", m.agent, m.move, m.phase, m.to, m.epoch, ""});
    }
  }
  if (status.running) {
    for (const Json& m : state.value("moves", Json::array())) {
      if (!m.is_object()) continue;
      status.moves.push_back(MoveInFlight{"in", m.value("agent", ""), m.value("move", ""), m.value("phase", ""),
                                          m.value("peer", ""), m.value("epoch", uint64_t{0}), m.value("since", "")});
    }
  } else if (PathExists(JoinPath(root, kStagingDir))) {
    // No sidecar: a staging area is a move in left mid-way, emptied at the next start.
    CAPSULE_ASSIGN_OR_RETURN(std::vector<std::string> staged, TopFolders(JoinPath(root, kStagingDir)));
    for (const std::string& agent : staged) {
      status.moves.push_back(MoveInFlight{"in", agent, "", "left mid-way (emptied at the next start)", "", 0, ""});
    }
  }
  return status;
}

Json SidecarStatusToJson(const SidecarStatus& status) {
  Json agents = Json::array(), moves = Json::array();
  for (const SidecarStatus::Agent& a : status.agents) {
    agents.push_back({{"agent", a.agent}, {"epoch", a.epoch}, {"state", a.state}});
  }
  for (const MoveInFlight& m : status.moves) moves.push_back(MoveToJson(m));
  Json json = {{"root", status.root}, {"running", status.running}, {"pid", status.pid}, {"listen", status.listen},
               {"started", status.started}, {"agents", agents}, {"moves", moves}};
  if (!status.fleet_url.empty()) {
    json["fleet"] = {{"url", status.fleet_url}, {"name", status.fleet_name}, {"lease", status.fleet_lease},
                     {"ttl", status.fleet_ttl}};
  }
  return json;
}

}  // namespace capsule::move
