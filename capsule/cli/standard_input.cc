// "-" for standard input wherever a command reads a file (man capsule.1, CONVENTIONS): the
// bytes are copied into a private temporary file first, so that the code that reads the file
// (a tar verified before it is placed, a stream whose first bytes say whether it is sealed)
// can seek in it as in any file, and messages name "standard input".
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "capsule/base/file_io.h"
#include "capsule/cli/cli.h"

namespace capsule::cli {

InputFile::~InputFile() {
  if (!spooled_.empty()) ::unlink(spooled_.c_str());
}

std::string InputFile::Shown(std::string text) const {
  if (spooled_.empty()) return text;
  for (size_t at = text.find(spooled_); at != std::string::npos; at = text.find(spooled_, at)) {
    text.replace(at, spooled_.size(), "standard input");
  }
  return text;
}

Status InputFile::Shown(const Status& status) const {
  if (status.ok() || spooled_.empty()) return status;
  return Status::Make(status.code(), "", Shown(status.message()));
}

Result<std::unique_ptr<InputFile>> OpenInput(const std::string& given) {
  auto input = std::unique_ptr<InputFile>(new InputFile());
  if (given != "-") {
    input->path_ = given;
    return input;
  }
  if (::isatty(STDIN_FILENO)) {
    return Status::InvalidArgument("-", "standard input is a terminal: pipe the file in (capsule export DIR -o - | ...)");
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = JoinPath(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "capsule-stdin-XXXXXX");
  UniqueFd fd(::mkostemp(pattern.data(), O_CLOEXEC));  // mode 0600: the bytes are no one else's
  if (!fd.valid()) return Status::IOError(pattern, errno);
  input->spooled_ = pattern;
  input->path_ = pattern;
  std::string chunk(1 << 20, '\0');
  for (;;) {
    ssize_t n = ::read(STDIN_FILENO, chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::IOError("standard input", errno);
    if (n == 0) break;
    CAPSULE_RETURN_IF_ERROR(input->Shown(WriteAll(fd.get(), std::string_view(chunk.data(), static_cast<size_t>(n)), pattern)));
  }
  return input;
}

}  // namespace capsule::cli
