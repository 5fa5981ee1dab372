#include "fs/document_writes.h"

#include <unistd.h>

#include <cstddef>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/format/local_files.h"

namespace capsule::fs {
namespace {

// A SAX reader that keeps nothing: only where the parse stopped, and why.
struct PrefixReader {
  size_t error_at = 0;  // 1-based count of bytes read when the parse failed; 0: it did not
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(Json::number_integer_t) { return true; }
  bool number_unsigned(Json::number_unsigned_t) { return true; }
  bool number_float(Json::number_float_t, const Json::string_t&) { return true; }
  bool string(Json::string_t&) { return true; }
  bool binary(Json::binary_t&) { return true; }
  bool start_object(std::size_t) { return true; }
  bool key(Json::string_t&) { return true; }
  bool end_object() { return true; }
  bool start_array(std::size_t) { return true; }
  bool end_array() { return true; }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) {
    error_at = position;
    return false;
  }
};

}  // namespace

bool CouldBecomeJson(std::string_view text) {
  PrefixReader reader;
  if (Json::sax_parse(text.begin(), text.end(), &reader)) return true;  // whole already
  // The parser counts the end of the input as one more byte read: a fault found there is the
  // text running out, which more bytes may mend; one found before it never is.
  return reader.error_at > text.size();
}

bool CouldBecomeJsonObject(std::string_view text, size_t check_bytes) {
  size_t start = text.find_first_not_of(" \t\r");
  if (start == std::string_view::npos) return true;
  if (text[start] != '{') return false;
  return text.size() > check_bytes || CouldBecomeJson(text);
}

Result<std::string> KeepRejected(const std::string& dir, const std::string& rel, std::string_view content) {
  const std::string kept = std::string(local::kRejectedDir) + "/" + rel;
  CAPSULE_RETURN_IF_ERROR(MakeDirectories(DirName(JoinPath(dir, kept))));
  CAPSULE_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, kept), content));
  return kept;
}

void ForgetRejected(const std::string& dir, const std::string& rel) {
  ::unlink(JoinPath(dir, std::string(local::kRejectedDir) + "/" + rel).c_str());
}

}  // namespace capsule::fs
