#include "tests/sidecar_runner.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/cli_runner.h"

namespace capsule::testing {

bool MakeMoveKeys(const std::string& pki, const std::string& seal_key) {
  return Shell("tests/make_pki.sh " + pki + " >/dev/null") == 0 &&
         RunCapsule({"keygen", "--type", "x25519", "-o", seal_key}).exit_code == 0;
}

Sidecar::Sidecar(const std::string& root, const std::string& pki, const std::string& seal_key,
                 const std::vector<std::string>& extra_args, const std::string& log) {
  std::vector<std::string> args = {"capsule", "serve", "--root", root, "--listen", "127.0.0.1:0",
                                   "--cert", pki + "/server.pem", "--key", pki + "/server.key",
                                   "--ca", pki + "/ca.pem", "--seal-key", seal_key};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  int out[2];
  EXPECT_EQ(::pipe(out), 0);
  pid_ = ::fork();
  if (pid_ == 0) {
    ::dup2(out[1], 1);
    if (!log.empty()) {
      int err = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (err >= 0) ::dup2(err, 2);
    }
    ::close(out[0]);
    ::execv("./capsule", argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  std::string line;
  char c;
  while (::read(out[0], &c, 1) == 1 && c != '\n') line.push_back(c);
  out_ = UniqueFd(out[0]);
  EXPECT_EQ(line.rfind("listening on 127.0.0.1:", 0), 0u) << line;
  address_ = line.substr(std::string("listening on ").size());
}

std::string Sidecar::NextLine() {
  std::string line;
  char c;
  while (::read(out_.get(), &c, 1) == 1 && c != '\n') line.push_back(c);
  return line;
}

void Sidecar::Stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

}  // namespace capsule::testing
