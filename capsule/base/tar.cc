#include "capsule/base/tar.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

namespace capsule {

namespace {

constexpr size_t kBlock = 512;
constexpr size_t kRecord = 10240;
constexpr uint64_t kMaxOctalSize = 077777777777ULL;  // 11 octal digits
constexpr uint64_t kMaxPaxBody = 1 << 20;

// ustar header field offsets and lengths.
struct Field {
  size_t offset;
  size_t length;
};
constexpr Field kName{0, 100}, kMode{100, 8}, kUid{108, 8}, kGid{116, 8}, kSize{124, 12},
    kMtime{136, 12}, kChecksum{148, 8}, kTypeFlag{156, 1}, kLinkName{157, 100}, kMagic{257, 6},
    kVersion{263, 2}, kUname{265, 32}, kGname{297, 32}, kDevMajor{329, 8}, kDevMinor{337, 8},
    kPrefix{345, 155};

// `value` in octal, zero-padded to the field's width less its NUL; callers keep it in range.
void PutOctal(char* block, Field field, uint64_t value) {
  char digits[24];
  std::snprintf(digits, sizeof digits, "%0*llo", static_cast<int>(field.length - 1),
                static_cast<unsigned long long>(value));
  std::memcpy(block + field.offset, digits + std::strlen(digits) - (field.length - 1), field.length - 1);
  block[field.offset + field.length - 1] = '\0';
}

void PutString(char* block, Field field, std::string_view value) {
  std::memcpy(block + field.offset, value.data(), std::min(value.size(), field.length));
}

unsigned Checksum(const char* block) {
  unsigned sum = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    bool in_field = i >= kChecksum.offset && i < kChecksum.offset + kChecksum.length;
    sum += in_field ? ' ' : static_cast<unsigned char>(block[i]);
  }
  return sum;
}

std::string PaxRecord(const std::string& key, const std::string& value) {
  // "<len> <key>=<value>\n" where <len> counts the whole record, itself included.
  size_t body = 1 + key.size() + 1 + value.size() + 1;
  size_t len = body + 1;
  while (std::to_string(len).size() + body != len) len = std::to_string(len).size() + body;
  return std::to_string(len) + " " + key + "=" + value + "\n";
}

std::string FieldString(const char* block, Field field) {
  const char* start = block + field.offset;
  return std::string(start, strnlen(start, field.length));
}

Result<uint64_t> ParseNumber(const char* block, Field field, const std::string& what) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(block + field.offset);
  if (p[0] & 0x80) {  // GNU base-256
    uint64_t value = 0;
    for (size_t i = 1; i < field.length; ++i) {
      if (value >> 56) return Status::Corruption(what, "number field too large");
      value = value << 8 | p[i];
    }
    if ((p[0] & 0x7f) != 0) return Status::Corruption(what, "number field too large");
    return value;
  }
  uint64_t value = 0;
  size_t i = 0;
  while (i < field.length && p[i] == ' ') ++i;
  bool any = false;
  for (; i < field.length && p[i] >= '0' && p[i] <= '7'; ++i) {
    value = value * 8 + (p[i] - '0');
    any = true;
  }
  for (; i < field.length; ++i) {
    if (p[i] != ' ' && p[i] != '\0') return Status::Corruption(what, "malformed number in header");
  }
  if (!any) return uint64_t{0};
  return value;
}

Status ParsePax(const std::string& body, std::map<std::string, std::string>* records,
                const std::string& what) {
  size_t pos = 0;
  while (pos < body.size()) {
    size_t space = body.find(' ', pos);
    if (space == std::string::npos) return Status::Corruption(what, "malformed pax record");
    uint64_t len = 0;
    for (size_t i = pos; i < space; ++i) {
      if (body[i] < '0' || body[i] > '9' || len > body.size()) {
        return Status::Corruption(what, "malformed pax record length");
      }
      len = len * 10 + static_cast<uint64_t>(body[i] - '0');
    }
    if (len == 0 || pos + len > body.size() || body[pos + len - 1] != '\n') {
      return Status::Corruption(what, "pax record length lies");
    }
    std::string record = body.substr(space + 1, pos + len - 1 - (space + 1));
    size_t eq = record.find('=');
    if (eq == std::string::npos) return Status::Corruption(what, "pax record without '='");
    (*records)[record.substr(0, eq)] = record.substr(eq + 1);
    pos += len;
  }
  return Status::Ok();
}

}  // namespace

const char* TarTypeName(const TarEntry& entry) {
  switch (entry.type_flag) {
    case '0': case '\0': case '7': return "file";
    case '1': return "hard link";
    case '2': return "symbolic link";
    case '3': return "character device";
    case '4': return "block device";
    case '5': return "folder";
    case '6': return "FIFO";
    case 'g': return "global pax header";
    default: return "unknown entry type";
  }
}

Status TarWriter::Emit(std::string_view data) {
  CAPSULE_RETURN_IF_ERROR(sink_->Write(data));
  offset_ += data.size();
  return Status::Ok();
}

namespace {

// One ustar header block with the fixed owner (0/0, root/root) and time (0).
std::string UstarHeader(const std::string& name, mode_t mode, uint64_t size, char type_flag,
                        const std::string& link_target, uint32_t dev_major = 0, uint32_t dev_minor = 0) {
  char block[kBlock] = {};
  PutString(block, kName, name);
  PutOctal(block, kMode, mode & 07777);
  PutOctal(block, kUid, 0);
  PutOctal(block, kGid, 0);
  PutOctal(block, kSize, size > kMaxOctalSize ? 0 : size);
  PutOctal(block, kMtime, 0);
  block[kTypeFlag.offset] = type_flag;
  PutString(block, kLinkName, link_target);
  PutString(block, kMagic, std::string_view("ustar\0", 6));
  PutString(block, kVersion, "00");
  PutString(block, kUname, "root");
  PutString(block, kGname, "root");
  PutOctal(block, kDevMajor, dev_major);
  PutOctal(block, kDevMinor, dev_minor);
  std::snprintf(block + kChecksum.offset, 8, "%06o", Checksum(block));
  block[kChecksum.offset + 7] = ' ';
  return std::string(block, kBlock);
}

}  // namespace

Status TarWriter::WriteHeader(const TarEntry& entry) {
  if (finished_ || in_file_) return Status::FailedPrecondition("tar writer", "entry out of order");
  std::string name = entry.path;
  if (entry.type == TarEntry::Type::kDirectory) name += "/";
  std::map<std::string, std::string> pax = entry.pax;
  if (name.size() > kName.length) pax["path"] = name;
  if (entry.link_target.size() > kLinkName.length) pax["linkpath"] = entry.link_target;
  if (entry.size > kMaxOctalSize) pax["size"] = std::to_string(entry.size);
  if (!pax.empty()) {
    std::string body;
    for (const auto& [key, value] : pax) body += PaxRecord(key, value);
    std::string pax_name = "PaxHeader/" + name.substr(0, 80);
    while (!pax_name.empty() && pax_name.back() == '/') pax_name.pop_back();
    CAPSULE_RETURN_IF_ERROR(Emit(UstarHeader(pax_name, 0644, body.size(), 'x', "")));
    body.resize((body.size() + kBlock - 1) / kBlock * kBlock, '\0');
    CAPSULE_RETURN_IF_ERROR(Emit(body));
  }
  char type_flag = '0';
  switch (entry.type) {
    case TarEntry::Type::kDirectory: type_flag = '5'; break;
    case TarEntry::Type::kSymlink: type_flag = '2'; break;
    case TarEntry::Type::kHardLink: type_flag = '1'; break;
    case TarEntry::Type::kFifo: type_flag = '6'; break;
    case TarEntry::Type::kCharDevice: type_flag = '3'; break;
    case TarEntry::Type::kBlockDevice: type_flag = '4'; break;
    default: break;
  }
  return Emit(UstarHeader(name, entry.mode, entry.size, type_flag, entry.link_target, entry.dev_major,
                          entry.dev_minor));
}

Status TarWriter::AddDirectory(const std::string& path, mode_t mode, const std::map<std::string, std::string>& pax) {
  TarEntry entry;
  entry.path = path;
  entry.type = TarEntry::Type::kDirectory;
  entry.mode = mode;
  entry.pax = pax;
  return WriteHeader(entry);
}

Status TarWriter::AddSymlink(const std::string& path, const std::string& target,
                             const std::map<std::string, std::string>& pax) {
  TarEntry entry;
  entry.path = path;
  entry.type = TarEntry::Type::kSymlink;
  entry.mode = 0777;
  entry.link_target = target;
  entry.pax = pax;
  return WriteHeader(entry);
}

Status TarWriter::AddHardLink(const std::string& path, const std::string& earlier,
                              const std::map<std::string, std::string>& pax) {
  TarEntry entry;
  entry.path = path;
  entry.type = TarEntry::Type::kHardLink;
  entry.link_target = earlier;
  entry.pax = pax;
  return WriteHeader(entry);
}

Status TarWriter::AddSpecial(const TarEntry& special) {
  if (special.type != TarEntry::Type::kFifo && special.type != TarEntry::Type::kCharDevice &&
      special.type != TarEntry::Type::kBlockDevice) {
    return Status::InvalidArgument("tar writer", special.path + ": not a FIFO or a device");
  }
  if (special.dev_major > 07777777 || special.dev_minor > 07777777) {
    return Status::InvalidArgument("tar writer", special.path + ": device number too large for a ustar header");
  }
  TarEntry entry = special;
  entry.size = 0;
  entry.link_target.clear();
  return WriteHeader(entry);
}

Status TarWriter::BeginFile(const std::string& path, uint64_t size, mode_t mode,
                            const std::map<std::string, std::string>& pax) {
  TarEntry entry;
  entry.path = path;
  entry.size = size;
  entry.mode = mode;
  entry.pax = pax;
  CAPSULE_RETURN_IF_ERROR(WriteHeader(entry));
  in_file_ = true;
  file_size_ = size;
  file_remaining_ = size;
  return Status::Ok();
}

Status TarWriter::WriteFileData(std::string_view data) {
  if (!in_file_ || data.size() > file_remaining_) {
    return Status::InvalidArgument("tar writer", "file data longer than its header says");
  }
  file_remaining_ -= data.size();
  return Emit(data);
}

Status TarWriter::EndFile() {
  if (!in_file_ || file_remaining_ != 0) {
    return Status::InvalidArgument("tar writer", "file data shorter than its header says");
  }
  in_file_ = false;
  size_t pad = (kBlock - file_size_ % kBlock) % kBlock;
  static const char kZeros[kBlock] = {};
  return Emit(std::string_view(kZeros, pad));
}

Status TarWriter::AddFile(const std::string& path, std::string_view data, mode_t mode,
                          const std::map<std::string, std::string>& pax) {
  CAPSULE_RETURN_IF_ERROR(BeginFile(path, data.size(), mode, pax));
  CAPSULE_RETURN_IF_ERROR(WriteFileData(data));
  return EndFile();
}

Status TarWriter::Finish() {
  if (finished_ || in_file_) return Status::FailedPrecondition("tar writer", "finished out of order");
  finished_ = true;
  uint64_t end = offset_ + 2 * kBlock;
  end = (end + kRecord - 1) / kRecord * kRecord;
  std::string zeros(end - offset_, '\0');
  CAPSULE_RETURN_IF_ERROR(Emit(zeros));
  return sink_->Close();
}

Status TarReader::SkipRestOfEntry() {
  char buffer[8192];
  while (data_remaining_ + padding_remaining_ > 0) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(sizeof buffer, data_remaining_ + padding_remaining_));
    CAPSULE_RETURN_IF_ERROR(ReadExactly(source_, buffer, n, current_path_));
    uint64_t from_data = std::min<uint64_t>(n, data_remaining_);
    data_remaining_ -= from_data;
    padding_remaining_ -= n - from_data;
  }
  return Status::Ok();
}

Result<std::string> TarReader::ReadSpecialBody(uint64_t size, const std::string& what) {
  if (size > kMaxPaxBody) return Status::Corruption(what, "extended header too large");
  std::string body(static_cast<size_t>((size + kBlock - 1) / kBlock * kBlock), '\0');
  CAPSULE_RETURN_IF_ERROR(ReadExactly(source_, body.data(), body.size(), what));
  body.resize(static_cast<size_t>(size));
  return body;
}

Result<bool> TarReader::Next(TarEntry* entry) {
  CAPSULE_RETURN_IF_ERROR(SkipRestOfEntry());
  std::map<std::string, std::string> pax;
  std::string long_name, long_link;
  for (;;) {
    char block[kBlock];
    std::string where = current_path_.empty() ? "tar" : "tar entry after '" + current_path_ + "'";
    CAPSULE_RETURN_IF_ERROR(ReadExactly(source_, block, kBlock, where));
    if (std::all_of(block, block + kBlock, [](char c) { return c == 0; })) {
      // End of archive: a second zero block must follow.
      char second[kBlock];
      CAPSULE_RETURN_IF_ERROR(ReadExactly(source_, second, kBlock, "tar end marker"));
      if (!std::all_of(second, second + kBlock, [](char c) { return c == 0; })) {
        return Status::Corruption("tar", "lone zero block inside the archive");
      }
      if (!pax.empty() || !long_name.empty()) return Status::Corruption("tar", "extended header with no entry");
      return false;
    }
    std::string name = FieldString(block, kName);
    std::string magic = FieldString(block, kMagic);
    if (magic != "ustar" && magic != "ustar ") return Status::Corruption(where, "not a tar header (bad magic)");
    CAPSULE_ASSIGN_OR_RETURN(uint64_t stored_sum, ParseNumber(block, kChecksum, name));
    if (stored_sum != Checksum(block)) return Status::Corruption("tar entry '" + name + "'", "header checksum mismatch");
    CAPSULE_ASSIGN_OR_RETURN(uint64_t size, ParseNumber(block, kSize, name));
    char flag = block[kTypeFlag.offset];
    if (flag == 'x') {
      CAPSULE_ASSIGN_OR_RETURN(std::string body, ReadSpecialBody(size, "pax header '" + name + "'"));
      CAPSULE_RETURN_IF_ERROR(ParsePax(body, &pax, "pax header '" + name + "'"));
      continue;
    }
    if (flag == 'L' || flag == 'K') {
      CAPSULE_ASSIGN_OR_RETURN(std::string body, ReadSpecialBody(size, "long name '" + name + "'"));
      body.resize(strnlen(body.data(), body.size()));
      (flag == 'L' ? long_name : long_link) = body;
      continue;
    }
    TarEntry out;
    out.type_flag = flag;
    std::string prefix = FieldString(block, kPrefix);
    out.path = prefix.empty() || magic != "ustar" ? name : prefix + "/" + name;
    if (!long_name.empty()) out.path = long_name;
    if (pax.count("path")) out.path = pax["path"];
    out.link_target = FieldString(block, kLinkName);
    if (!long_link.empty()) out.link_target = long_link;
    if (pax.count("linkpath")) out.link_target = pax["linkpath"];
    if (pax.count("size")) {
      const std::string& text = pax["size"];
      if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos) {
        return Status::Corruption("tar entry '" + out.path + "'", "pax size is not a number");
      }
      size = std::stoull(text);
    }
    CAPSULE_ASSIGN_OR_RETURN(uint64_t mode, ParseNumber(block, kMode, name));
    out.mode = static_cast<mode_t>(mode & 07777);
    switch (flag) {
      case '0': case '\0': case '7': out.type = TarEntry::Type::kFile; break;
      case '1': out.type = TarEntry::Type::kHardLink; break;
      case '2': out.type = TarEntry::Type::kSymlink; break;
      case '3': out.type = TarEntry::Type::kCharDevice; break;
      case '4': out.type = TarEntry::Type::kBlockDevice; break;
      case '5': out.type = TarEntry::Type::kDirectory; break;
      case '6': out.type = TarEntry::Type::kFifo; break;
      default: out.type = TarEntry::Type::kOther; break;
    }
    if (out.type == TarEntry::Type::kCharDevice || out.type == TarEntry::Type::kBlockDevice) {
      CAPSULE_ASSIGN_OR_RETURN(uint64_t major, ParseNumber(block, kDevMajor, name));
      CAPSULE_ASSIGN_OR_RETURN(uint64_t minor, ParseNumber(block, kDevMinor, name));
      if (major > UINT32_MAX || minor > UINT32_MAX) return Status::Corruption("tar entry '" + name + "'", "device number out of range");
      out.dev_major = static_cast<uint32_t>(major);
      out.dev_minor = static_cast<uint32_t>(minor);
    }
    if (out.path.rfind("./", 0) == 0 && out.path.size() > 2) out.path = out.path.substr(2);
    while (out.path.size() > 1 && out.path.back() == '/') out.path.pop_back();
    out.size = out.type == TarEntry::Type::kFile ? size : 0;
    out.pax = std::move(pax);
    current_path_ = out.path;
    // Only regular files carry data; other types' sizes are skipped as opaque.
    data_remaining_ = size;
    padding_remaining_ = (kBlock - size % kBlock) % kBlock;
    if (out.type != TarEntry::Type::kFile) CAPSULE_RETURN_IF_ERROR(SkipRestOfEntry());
    *entry = std::move(out);
    return true;
  }
}

Result<size_t> TarReader::ReadData(char* buffer, size_t size) {
  size_t n = static_cast<size_t>(std::min<uint64_t>(size, data_remaining_));
  if (n == 0) return size_t{0};
  CAPSULE_RETURN_IF_ERROR(ReadExactly(source_, buffer, n, "tar entry '" + current_path_ + "'"));
  data_remaining_ -= n;
  return n;
}

Status TarReader::ExpectOnlyZerosAfterEnd() {
  char buffer[kBlock];
  for (;;) {
    CAPSULE_ASSIGN_OR_RETURN(size_t n, source_->Read(buffer, sizeof buffer));
    if (n == 0) return Status::Ok();
    if (!std::all_of(buffer, buffer + n, [](char c) { return c == 0; })) {
      return Status::Corruption("tar", "bytes after the end of the archive");
    }
  }
}

}  // namespace capsule
