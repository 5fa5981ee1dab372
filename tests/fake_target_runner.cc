#include "tests/fake_target_runner.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

namespace capsule::testing {

FakeTarget::FakeTarget(const std::string& pki, const std::string& mode, const std::string& arg,
                       const std::string& log) {
  std::vector<std::string> args = {"python3",          "tests/fake_target.py", pki + "/server.pem",
                                   pki + "/server.key", pki + "/ca.pem",       mode, arg};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int out[2];
  EXPECT_EQ(::pipe(out), 0);
  pid_ = ::fork();
  if (pid_ == 0) {
    ::dup2(out[1], 1);
    int err = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (err >= 0) ::dup2(err, 2);
    ::close(out[0]);
    ::execvp("python3", argv.data());
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

FakeTarget::~FakeTarget() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
}

}  // namespace capsule::testing
