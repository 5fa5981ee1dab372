// capsule exec: one run of a command in the agent's workspace, in its sandbox (bubblewrap,
// sandbox/sandbox_run.h) or, with --no-sandbox, on the host; with the environment spec's
// variables and its secrets from this machine's keychain for that run only.
//
// The workspace is the files/ of a capsulefs mount, so that every write of the command is
// crash-atomic and committed like any other: the mount already serving the capsule, or one
// made for the run and unmounted (its last checkpoint on disk) before exec returns.
#include <stdlib.h>
#include <unistd.h>

#include <iostream>
#include <memory>

#include "capsule/base/file_io.h"
#include "capsule/cli/cli.h"
#include "capsule/format/holder.h"
#include "capsule/format/layout.h"
#include "capsule/format/local_files.h"
#include "capsule/format/manifest.h"
#include "capsule/format/mount_lock.h"
#include "fs/control_client.h"
#include "journal/journal.h"
#include "journal/owned/owned_state.h"
#include "sandbox/keychain.h"
#include "sandbox/process.h"
#include "sandbox/sandbox_cache.h"
#include "sandbox/sandbox_run.h"

namespace capsule::cli {

namespace {

struct ExecArgs {
  std::string path;
  std::string cache;
  bool no_sandbox = false;
  bool accept_edits = false;
  std::vector<std::string> command;
};

std::string ProgramBesideMe(const std::string& name) {
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    std::string beside = JoinPath(DirName(std::string(self, static_cast<size_t>(n))), name);
    if (::access(beside.c_str(), X_OK) == 0) return beside;
  }
  return name;
}

// The mount a run works through: one already serving the capsule, or one made for the run
// and taken away (fusermount3 -u, then the driver's last checkpoint awaited) when dropped.
class WorkspaceMount {
 public:
  static Result<std::unique_ptr<WorkspaceMount>> ForCapsule(const std::string& path, const std::string& dir) {
    auto mount = std::unique_ptr<WorkspaceMount>(new WorkspaceMount(dir));
    if (fs::IsFuseMount(path) && PathExists(JoinPath(path, kControlFileName))) {
      mount->mountpoint_ = path;
      return mount;
    }
    Result<std::string> socket = fs::FindControlSocket(dir);
    if (socket.ok() && fs::SendControl(*socket, "status").ok()) {
      // Mounted elsewhere: the driver wrote its mountpoint into the lock it holds.
      std::string recorded = RecordedMountpoint(dir);
      if (!recorded.empty() && fs::IsFuseMount(recorded)) {
        mount->mountpoint_ = recorded;
        return mount;
      }
      return Status::FailedPrecondition(dir, "mounted, but where is not known; name the mountpoint instead");
    }
    CAPSULE_RETURN_IF_ERROR(WaitForDriverToExit(dir));
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = JoinPath(tmp != nullptr && *tmp ? tmp : "/tmp", "capsule-exec-XXXXXX");
    if (::mkdtemp(pattern.data()) == nullptr) return Status::IOError(pattern, errno);
    mount->mountpoint_ = pattern;
    mount->made_ = true;
    sandbox::ProcessOptions options;
    options.null_input = true;
    CAPSULE_ASSIGN_OR_RETURN(int code, sandbox::RunProcess({ProgramBesideMe("capsulefs"), dir, pattern}, options));
    if (code != 0 || !fs::IsFuseMount(pattern)) {
      mount->made_ = false;
      ::rmdir(pattern.c_str());
      return Status::IOError(dir, "capsulefs did not mount it for the run (exit " + std::to_string(code) + ")");
    }
    return mount;
  }

  ~WorkspaceMount() {
    if (!made_) return;
    sandbox::ProcessOptions options;
    options.null_input = true;
    for (int attempt = 0; attempt < 50; ++attempt) {
      Result<int> code = sandbox::RunProcess({"fusermount3", "-u", "-q", mountpoint_}, options);
      if (!fs::IsFuseMount(mountpoint_)) break;
      (void)code;
      ::usleep(100 * 1000);  // busy: a process the command left behind still has it open
    }
    if (fs::IsFuseMount(mountpoint_)) {
      std::cerr << "capsule: " << mountpoint_ << ": still busy; left mounted (fusermount3 -u " << mountpoint_ << ")\n";
      return;
    }
    Status done = WaitForDriverToExit(dir_);
    if (!done.ok()) std::cerr << "capsule: " << done.message() << "\n";
    ::rmdir(mountpoint_.c_str());
  }
  WorkspaceMount(const WorkspaceMount&) = delete;
  WorkspaceMount& operator=(const WorkspaceMount&) = delete;

  const std::string& mountpoint() const { return mountpoint_; }
  std::string workspace() const { return JoinPath(mountpoint_, "files"); }
  bool made() const { return made_; }

 private:
  explicit WorkspaceMount(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_, mountpoint_;
  bool made_ = false;
};

// The secrets the spec names, from the keychain; every one missing is named, and the run
// refused before anything starts.
Result<std::map<std::string, std::string>> SecretsFor(const std::string& agent, const sandbox::SandboxSpec& spec) {
  std::map<std::string, std::string> values;
  std::vector<std::string> missing;
  for (const std::string& name : spec.secrets) {
    Result<std::string> value = sandbox::GetSecret(agent, name);
    if (value.ok()) {
      values[name] = std::move(*value);
    } else if (value.status().code() == Code::kNotFound) {
      missing.push_back(name);
    } else {
      return value.status();
    }
  }
  if (!missing.empty()) {
    std::string names;
    for (const std::string& name : missing) names += (names.empty() ? "" : ", ") + name;
    return Status::FailedPrecondition(
        "exec", "secret" + std::string(missing.size() > 1 ? "s " : " ") + names + " of agent " + agent +
                    " not in this machine's keychain (capsule secret set " + agent + " " + missing.front() + "); not run");
  }
  return values;
}

int RunExec(ExecArgs args) {
  if (!args.command.empty() && args.command.front() == "--") args.command.erase(args.command.begin());
  if (args.command.empty()) return UsageFailure("exec: COMMAND is required: capsule exec DIR [--] COMMAND...", 0, nullptr);
  if (Status outside = args.no_sandbox ? Status::Ok() : CheckOutsideCapsules("--sandbox-cache", args.cache); !outside.ok()) {
    return Fail(outside);
  }
  Result<std::string> dir = ResolveCapsule(args.path);
  if (!dir.ok()) return Fail(dir.status());
  if (args.accept_edits) {
    if (Status accepted = AcceptEditsFirst(*dir); !accepted.ok()) return Fail(accepted);
  }
  Result<Manifest> manifest = Manifest::Load(*dir);
  if (!manifest.ok()) return Fail(manifest.status());
  const std::string agent = manifest->agent.id;
  Result<HolderRecord> holder = HolderRecord::Load(*dir);
  if (!holder.ok() || holder->state == HolderState::kRetired) {
    return Fail(Status::FailedPrecondition(args.path, "this machine does not hold agent " + agent + "; not run"));
  }
  Result<sandbox::SandboxSpec> spec = sandbox::SandboxSpec::Load(*dir);
  if (!spec.ok()) return Fail(spec.status().WithContext(args.path));
  Result<std::map<std::string, std::string>> secrets = SecretsFor(agent, *spec);
  if (!secrets.ok()) return Fail(secrets.status());

  sandbox::RunRequest request;
  request.command = args.command;
  request.network = spec->network;
  request.env = spec->env;
  std::string where = "host";
  sandbox::SandboxHold hold;
  if (args.no_sandbox) {
    std::cerr << "capsule: exec: running on the host, not in a sandbox (--no-sandbox)\n";
  } else {
    Result<sandbox::SandboxCache> cache = sandbox::SandboxCache::Open(args.cache);
    if (!cache.ok()) return Fail(cache.status());
    Result<sandbox::SandboxCache::Built> built = cache->Build(*spec);
    if (!built.ok()) return Fail(built.status().WithContext("exec"));
    if (!built->cache_hit) {
      std::cerr << "capsule: exec: built sandbox " << built->entry.digest.substr(0, 12) << " (" << spec->image << ") in "
                << static_cast<int>(built->seconds + 0.5) << " s\n";
    }
    Result<sandbox::SandboxEntry> held = cache->Hold(*spec, &hold);
    if (!held.ok()) return Fail(held.status().WithContext("exec"));
    request.rootfs = held->rootfs;
    Result<std::string> devices = cache->DeviceNodes();
    if (!devices.ok()) return Fail(devices.status().WithContext("exec"));
    request.devices = *devices;
    where = held->digest;
  }
  Result<std::unique_ptr<WorkspaceMount>> mount = WorkspaceMount::ForCapsule(args.path, *dir);
  if (!mount.ok()) return Fail(mount.status().WithContext("exec"));
  request.workspace = (*mount)->workspace();
  if (!spec->secrets.empty()) {
    // That the run had them, by name: the journal says so; the values go nowhere but the run.
    Result<journal::Journal> journal = journal::Journal::OpenForWrite(*dir);
    if (!journal.ok()) return Fail(journal.status().WithContext("exec"));
    Result<journal::Event> event = journal->Append("secrets_used", {{"secrets", spec->secrets}, {"sandbox", where}});
    if (!event.ok()) return Fail(event.status().WithContext("exec"));
    Status followed = owned::FollowJournal(*dir);
    if (!followed.ok()) std::cerr << "capsule: warning: owned state not updated: " << followed.message() << "\n";
  }
  for (auto& [name, value] : *secrets) request.env[name] = std::move(value);
  Result<int> ran = args.no_sandbox ? sandbox::RunOnHost(request) : sandbox::RunInSandbox(request);
  for (auto& [name, value] : request.env) std::fill(value.begin(), value.end(), '\0');
  if (!ran.ok()) return Fail(ran.status().WithContext("exec"));
  return *ran;
}

std::vector<std::string>& ExecCommandSlot() {
  static std::vector<std::string> command;
  return command;
}

std::vector<std::string> ExecCommand() { return ExecCommandSlot(); }

}  // namespace

int SplitExecCommand(int argc, char** argv) {
  // capsule [--json] exec [OPTIONS] DIR [--] COMMAND...: options are exec's until DIR; after
  // it, every word is the command's, however it looks.
  int i = 1;
  while (i < argc && std::string(argv[i]) != "exec") {
    if (argv[i][0] != '-') return argc;  // another command
    ++i;
  }
  if (i >= argc) return argc;
  for (++i; i < argc; ++i) {
    std::string word = argv[i];
    if (word == "--sandbox-cache") {
      ++i;
      continue;
    }
    if (word == "--") return argc;  // no DIR before it: the parser says what is missing
    if (word.empty() || word[0] != '-') break;
  }
  if (i >= argc) return argc;
  std::vector<std::string>& command = ExecCommandSlot();
  command.assign(argv + i + 1, argv + argc);
  if (!command.empty() && command.front() == "--") command.erase(command.begin());
  return i + 1;
}

void RegisterExecCommands(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ExecArgs>();
  CLI::App* exec = app.add_subcommand(
      "exec",
      "Run a command in the agent's workspace, in its sandbox (bubblewrap), with the spec's variables and secrets; "
      "exit status is the command's. Usage: capsule exec [OPTIONS] DIR [--] COMMAND...");
  exec->add_option("DIR", args->path, "Capsule folder or its mountpoint (a folder not mounted is mounted for the run)")
      ->required();
  exec->add_flag("--no-sandbox", args->no_sandbox, "Run on the host, in the mounted workspace, with the host's environment too");
  exec->add_flag("--accept-edits", args->accept_edits,
                 "Take files edited behind the manifest on purpose first, as capsule accept does (journal: edits_accepted)");
  args->cache = sandbox::SandboxCache::DefaultRoot();
  exec->add_option("--sandbox-cache", args->cache,
                   "Folder of built sandboxes (default $CAPSULE_SANDBOX_CACHE or /var/cache/capsule/sandboxes)");
  AddJsonFlag(exec, "A refusal as JSON on standard output (what the command prints is its own)");
  exec->footer(
      "The command's standard input, output and error are capsule's; its exit status is capsule's (128+N when signal N "
      "ended it); 1 when the run is refused before it starts (a secret missing from the keychain, a sandbox that cannot "
      "be built), 2 usage. See man capsule.1, exec");
  exec->callback([args, exit_code] {
    args->command = ExecCommand();
    *exit_code = RunExec(*args);
  });
}

}  // namespace capsule::cli
