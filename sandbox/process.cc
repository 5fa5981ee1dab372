#include "sandbox/process.h"

#include <fcntl.h>
#include <linux/keyctl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "capsule/base/file_io.h"

namespace capsule::sandbox {

namespace {

std::atomic<pid_t> running_child{-1};

void PassOn(int signal) {
  pid_t child = running_child.load();
  if (child > 0) ::kill(child, signal);
}

// Restores the signal dispositions it changed when dropped.
class SignalForwarding {
 public:
  explicit SignalForwarding(bool on) : on_(on) {
    if (!on_) return;
    struct sigaction ignore {}, pass {};
    ignore.sa_handler = SIG_IGN;
    pass.sa_handler = PassOn;
    ::sigaction(SIGINT, &ignore, &old_[0]);
    ::sigaction(SIGQUIT, &ignore, &old_[1]);
    ::sigaction(SIGTERM, &pass, &old_[2]);
    ::sigaction(SIGHUP, &pass, &old_[3]);
  }
  ~SignalForwarding() {
    if (!on_) return;
    running_child = -1;
    ::sigaction(SIGINT, &old_[0], nullptr);
    ::sigaction(SIGQUIT, &old_[1], nullptr);
    ::sigaction(SIGTERM, &old_[2], nullptr);
    ::sigaction(SIGHUP, &old_[3], nullptr);
  }
  SignalForwarding(const SignalForwarding&) = delete;
  SignalForwarding& operator=(const SignalForwarding&) = delete;

 private:
  bool on_;
  struct sigaction old_[4] {};
};

}  // namespace

std::string FindProgram(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate = JoinPath(dirs.substr(start, end - start), name);
    if (end > start && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

Result<int> RunProcess(const std::vector<std::string>& argv, const ProcessOptions& options) {
  if (argv.empty()) return Status::InvalidArgument("command", "empty");
  std::string program = FindProgram(argv[0]);
  if (program.empty()) return Status::NotFound(argv[0], "not found");
  // Everything the child needs is made before fork: after it, only async-signal-safe calls.
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  std::vector<char*> env;
  if (options.env != nullptr) {
    for (const std::string& var : *options.env) env.push_back(const_cast<char*>(var.c_str()));
    env.push_back(nullptr);
  }
  UniqueFd output, input;
  if (!options.output_file.empty()) {
    CAPSULE_ASSIGN_OR_RETURN(output, OpenFile(options.output_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  }
  if (options.null_input) {
    CAPSULE_ASSIGN_OR_RETURN(input, OpenFile("/dev/null", O_RDONLY | O_CLOEXEC));
  }
  SignalForwarding forwarding(options.forward_signals);
  pid_t pid = ::fork();
  if (pid < 0) return Status::IOError("fork", errno);
  if (pid == 0) {
    struct sigaction fallback {};
    fallback.sa_handler = SIG_DFL;
    for (int signal : {SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGPIPE}) ::sigaction(signal, &fallback, nullptr);
    if (output.valid() && (::dup2(output.get(), 1) < 0 || ::dup2(output.get(), 2) < 0)) ::_exit(127);
    if (input.valid() && ::dup2(input.get(), 0) < 0) ::_exit(127);
    if (!options.chdir.empty() && ::chdir(options.chdir.c_str()) != 0) ::_exit(127);
    for (int fd : options.inherit_fds) {
      if (::fcntl(fd, F_SETFD, 0) != 0) ::_exit(127);
    }
    if (options.new_session_keyring && ::syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, nullptr) < 0) ::_exit(127);
    if (options.env != nullptr) {
      ::execve(program.c_str(), args.data(), env.data());
    } else {
      ::execv(program.c_str(), args.data());
    }
    ::_exit(127);
  }
  if (options.forward_signals) running_child = pid;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return Status::IOError("waitpid", errno);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace capsule::sandbox
