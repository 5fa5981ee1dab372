#include "capsule/base/byte_stream.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "capsule/base/file_io.h"

namespace capsule {

Status ReadExactly(ByteSource* source, char* buffer, size_t size, const std::string& what) {
  size_t done = 0;
  while (done < size) {
    CAPSULE_ASSIGN_OR_RETURN(size_t n, source->Read(buffer + done, size - done));
    if (n == 0) return Status::Corruption(what, "cut short");
    done += n;
  }
  return Status::Ok();
}

Status FdSink::Write(std::string_view data) { return WriteAll(fd_, data, name_); }

Result<size_t> FdSource::Read(char* buffer, size_t size) {
  for (;;) {
    ssize_t n = ::read(fd_, buffer, size);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno != EINTR) return Status::IOError(name_, errno);
  }
}

Result<size_t> StringSource::Read(char* buffer, size_t size) {
  size_t n = std::min(size, data_.size() - offset_);
  std::memcpy(buffer, data_.data() + offset_, n);
  offset_ += n;
  return n;
}

}  // namespace capsule
