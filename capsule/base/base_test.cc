// Tests of the base library: Status, the durable-write path, SHA-256, canonical JSON.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <cstdlib>
#include <vector>

#include "capsule/base/background_sha256.h"
#include "capsule/base/canonical_json.h"
#include "capsule/base/canonical_scan.h"
#include "capsule/base/file_io.h"
#include "capsule/base/parallel.h"
#include "capsule/base/read_ahead.h"
#include "capsule/base/sha256.h"
#include "capsule/base/status.h"

#include "capsule/base/temp_dir.h"

namespace capsule {
namespace {

std::string TempDir() { return testing::MakeTempDir("base_test"); }

TEST(StatusTest, CarriesCodeMessageAndErrno) {
  Status status = Status::IOError("some/file", ENOSPC);
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.code(), Code::kIOError);
  EXPECT_EQ(status.sys_errno(), ENOSPC);
  EXPECT_EQ(status.message(), "some/file: No space left on device");
  EXPECT_EQ(status.WithContext("export").message(), "export: some/file: No space left on device");
  EXPECT_NE(Status::Corruption("a", "b").code(), Status::IOError("a", "b").code());
  // The code says what happened; the errno stays for the FUSE edge.
  EXPECT_EQ(Status::IOError("gone", ENOENT).code(), Code::kNotFound);
  EXPECT_EQ(Status::IOError("gone", ENOENT).sys_errno(), ENOENT);
  EXPECT_EQ(Status::IOError("there", EEXIST).code(), Code::kAlreadyExists);
  EXPECT_EQ(ReadFile(TempDir() + "/missing").status().code(), Code::kNotFound);
}

TEST(StatusTest, ResultHoldsValueOrError) {
  Result<int> good = 7;
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 7);
  Result<int> bad = Status::NotFound("x", "gone");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "x: gone");
}

TEST(FileIoTest, WriteFileAtomicReplacesWholeAndLeavesNoTemp) {
  std::string dir = TempDir();
  std::string path = dir + "/f.txt";
  ASSERT_TRUE(WriteFileAtomic(path, "old").ok());
  ASSERT_TRUE(WriteFileAtomic(path, "new content", 0600).ok());
  EXPECT_EQ(*ReadFile(path), "new content");
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto entries = ListTree(dir);
  ASSERT_TRUE(entries.ok());
  ASSERT_EQ(entries->size(), 1u);  // no temporary left behind
  EXPECT_EQ((*entries)[0].path, "f.txt");
}

TEST(FileIoTest, UncommittedAtomicFileLeavesTargetUntouched) {
  std::string dir = TempDir();
  std::string path = dir + "/f.txt";
  ASSERT_TRUE(WriteFileAtomic(path, "old").ok());
  {
    auto file = AtomicFile::Create(path);
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE(file->Append("half of the new").ok());
    // Destroyed without Commit: as if the writer crashed.
  }
  EXPECT_EQ(*ReadFile(path), "old");
  EXPECT_EQ(ListTree(dir)->size(), 1u);
}

TEST(FileIoTest, CommitNoReplaceRefusesExistingTarget) {
  std::string dir = TempDir();
  std::string path = dir + "/f";
  ASSERT_TRUE(WriteFileAtomic(path, "first").ok());
  auto file = AtomicFile::Create(path);
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE(file->Append("second").ok());
  EXPECT_EQ(file->CommitNoReplace().code(), Code::kAlreadyExists);
  EXPECT_EQ(*ReadFile(path), "first");
}

TEST(FileIoTest, StagingSyncCoversOnlyItsFolderAndOnlyWhileAlive) {
  std::string dir = TempDir();
  ASSERT_TRUE(MakeDirectories(dir + "/stage").ok());
  {
    StagingSync sync(dir + "/stage");
    EXPECT_TRUE(StagingSync::Covers(dir + "/stage/a/b"));
    EXPECT_FALSE(StagingSync::Covers(dir + "/stage"));
    EXPECT_FALSE(StagingSync::Covers(dir + "/stagex/a"));
    EXPECT_FALSE(StagingSync::Covers(dir + "/other"));
    ASSERT_TRUE(WriteFileAtomic(dir + "/stage/f", "deferred").ok());
    EXPECT_TRUE(sync.Finish().ok());
  }
  EXPECT_FALSE(StagingSync::Covers(dir + "/stage/a"));
  EXPECT_EQ(*ReadFile(dir + "/stage/f"), "deferred");
  EXPECT_EQ(ListTree(dir + "/stage")->size(), 1u);
}

TEST(FileIoTest, ReadFileOfMissingPathIsIoErrorWithEnoent) {
  auto missing = ReadFile("/nonexistent/capsule/file");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().sys_errno(), ENOENT);
}

// FileBytes reads a file whole, whatever its size against the huge pages it is read into,
// and keeps what it read when the file is cut short afterwards.
TEST(FileIoTest, FileBytesReadsWholeAndKeepsWhatItRead) {
  std::string dir = TempDir();
  for (size_t size : {size_t{0}, size_t{1}, size_t{(2 << 20) - 1}, size_t{2 << 20}, size_t{5 << 20} + 17}) {
    SCOPED_TRACE(size);
    std::string content(size, '\0');
    for (size_t i = 0; i < size; ++i) content[i] = static_cast<char>('a' + (i * 7 + i / 4096) % 26);
    std::string path = dir + "/f" + std::to_string(size);
    ASSERT_TRUE(WriteFileAtomic(path, content).ok());
    Result<FileBytes> bytes = FileBytes::Read(path);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    EXPECT_TRUE(bytes->view() == content);
    ASSERT_EQ(::truncate(path.c_str(), 0), 0);
    EXPECT_TRUE(bytes->view() == content);  // a copy, not a mapping of the file
    FileBytes moved = std::move(*bytes);
    EXPECT_TRUE(moved.view() == content);
    EXPECT_TRUE(bytes->view().empty());
  }
  EXPECT_EQ(FileBytes::Read(dir + "/missing").status().code(), Code::kNotFound);
}

TEST(FileIoTest, ListTreeSortsByBytesAndSkips) {
  std::string dir = TempDir();
  ASSERT_TRUE(MakeDirectories(dir + "/a/b").ok());
  ASSERT_TRUE(MakeDirectories(dir + "/.capsule").ok());
  ASSERT_TRUE(WriteFileAtomic(dir + "/a.txt", "x").ok());
  ASSERT_TRUE(WriteFileAtomic(dir + "/a/b/c", "yy").ok());
  ASSERT_TRUE(WriteFileAtomic(dir + "/.capsule/m", "z").ok());
  ASSERT_EQ(::symlink("a.txt", (dir + "/l").c_str()), 0);
  auto entries = ListTree(dir, {".capsule"});
  ASSERT_TRUE(entries.ok());
  std::vector<std::string> paths;
  for (const auto& e : *entries) paths.push_back(e.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"a", "a.txt", "a/b", "a/b/c", "l"}));
  EXPECT_EQ((*entries)[3].size, 2u);
  EXPECT_EQ((*entries)[4].type, TreeEntry::Type::kSymlink);
  EXPECT_EQ((*entries)[4].link_target, "a.txt");
}

TEST(FileIoTest, OpenBeneathFollowsNoLinkAnywhereOnThePath) {
  std::string root = TempDir(), outside = TempDir();
  ASSERT_TRUE(MakeDirectories(root + "/a/b").ok());
  ASSERT_TRUE(WriteFileAtomic(root + "/a/b/plain", "in").ok());
  ASSERT_TRUE(WriteFileAtomic(outside + "/secret", "out").ok());
  ASSERT_EQ(::symlink(outside.c_str(), (root + "/a/dir-link").c_str()), 0);
  ASSERT_EQ(::symlink("b/plain", (root + "/a/file-link").c_str()), 0);
  ASSERT_EQ(::symlink("../../..", (root + "/a/b/up").c_str()), 0);

  Result<UniqueFd> plain = OpenBeneath(root, "a/b/plain", O_RDONLY);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  char buffer[8] = {};
  EXPECT_EQ(::read(plain->get(), buffer, sizeof buffer), 2);
  EXPECT_STREQ(buffer, "in");
  // A link as a folder on the way, as the last component, or climbing out: all refused.
  for (const char* rel : {"a/dir-link/secret", "a/file-link", "a/b/up/etc/passwd", "../" }) {
    Result<UniqueFd> through = OpenBeneath(root, rel, O_RDONLY);
    ASSERT_FALSE(through.ok()) << rel;
    if (std::string(rel) != "../") {
      EXPECT_NE(through.status().ToString().find("links are never followed"), std::string::npos)
          << through.status().ToString();
    }
  }
}

TEST(FileIoTest, PathHelpers) {
  EXPECT_EQ(JoinPath("a", "b"), "a/b");
  EXPECT_EQ(JoinPath("a/", "b"), "a/b");
  EXPECT_EQ(DirName("a/b/c"), "a/b");
  EXPECT_EQ(DirName("c"), ".");
  EXPECT_EQ(DirName("/c"), "/");
  EXPECT_EQ(BaseName("a/b/c"), "c");
}

TEST(Sha256Test, KnownAnswers) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256Test, StreamingEqualsOneShot) {
  std::string data(100000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31 + 7);
  Sha256 hasher;
  for (size_t i = 0; i < data.size(); i += 777) hasher.Update(std::string_view(data).substr(i, 777));
  EXPECT_EQ(hasher.FinishHex(), Sha256Hex(data));
}

TEST(Sha256Test, BackgroundEqualsInlineOverManyBatches) {
  std::string data(5 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + (i >> 13));
  BackgroundSha256 background;
  for (size_t i = 0; i < data.size(); i += 3001) background.Update(std::string_view(data).substr(i, 3001));
  EXPECT_EQ(background.FinishHex(), Sha256Hex(data));
  BackgroundSha256 nothing;
  EXPECT_EQ(nothing.FinishHex(), Sha256Hex(""));
  BackgroundSha256 dropped;  // destroyed unfinished, with a batch handed over
  dropped.Update(std::string_view(data).substr(0, 2 << 20));
}

TEST(Sha256Test, BackgroundWaitLetsTheCallerReuseItsBuffer) {
  // One buffer filled again and again, as a reader reuses its blocks: each fill is hashed
  // before the next overwrites it, whether it went over as one piece, many, or a part batch.
  std::string expected_input;
  std::string buffer(1536 << 10, '\0');
  BackgroundSha256 background;
  for (int fill = 0; fill < 6; ++fill) {
    for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<char>(i * 7 + fill * 13 + (i >> 11));
    size_t used = buffer.size() - static_cast<size_t>(fill) * 200000;
    for (size_t i = 0; i < used; i += 70000) background.Update(std::string_view(buffer).substr(i, std::min<size_t>(70000, used - i)));
    expected_input.append(buffer, 0, used);
    background.Wait();
  }
  EXPECT_EQ(background.FinishHex(), Sha256Hex(expected_input));
}

TEST(FileIoTest, AppendOfPiecesWritesThemInOrderBeyondOneWritev) {
  std::string dir = TempDir();
  std::string text;
  for (int i = 0; i < 5000; ++i) text += std::to_string(i) + (i % 3 == 0 ? "" : ",");
  std::vector<std::string_view> pieces;  // more than IOV_MAX, some of them empty
  for (size_t i = 0; i < text.size(); i += 1 + i % 5) pieces.push_back(std::string_view(text).substr(i, 1 + i % 5));
  pieces.insert(pieces.begin() + 7, std::string_view());
  ASSERT_GT(pieces.size(), 2048u);
  auto file = AtomicFile::Create(dir + "/f");
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE(file->Append(pieces).ok());
  ASSERT_TRUE(file->Commit().ok());
  EXPECT_EQ(*ReadFile(dir + "/f"), text);
}

TEST(Sha256Test, FileWithPrefix) {
  std::string dir = TempDir();
  ASSERT_TRUE(WriteFileAtomic(dir + "/f", "hello world").ok());
  std::string prefix;
  uint64_t size = 0;
  auto full = Sha256FileWithPrefix(dir + "/f", 5, &prefix, &size);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(*full, Sha256Hex("hello world"));
  EXPECT_EQ(prefix, Sha256Hex("hello"));
  EXPECT_EQ(size, 11u);
  ASSERT_TRUE(Sha256FileWithPrefix(dir + "/f", 50, &prefix, &size).ok());
  EXPECT_EQ(prefix, "");  // the file is shorter than the prefix
}

TEST(HexTest, RoundTripAndRejects) {
  EXPECT_EQ(HexEncode(std::string("\x00\xff\x10", 3)), "00ff10");
  EXPECT_EQ(*HexDecode("00FF10", "k"), std::string("\x00\xff\x10", 3));
  EXPECT_FALSE(HexDecode("abc", "k").ok());
  EXPECT_FALSE(HexDecode("zz", "k").ok());
  EXPECT_TRUE(IsSha256Hex(Sha256Hex("x")));
  EXPECT_FALSE(IsSha256Hex(std::string(64, 'A')));
}

TEST(CanonicalJsonTest, SortsKeysAtEveryDepthCompactly) {
  auto value = ParseJson(R"({ "b": 1, "a": {"z": [3, {"y": true, "x": null}], "c": "s"} })", "t");
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*CanonicalJson(*value), R"({"a":{"c":"s","z":[3,{"x":null,"y":true}]},"b":1})");
}

TEST(CanonicalJsonTest, NumbersHaveOneSpelling) {
  EXPECT_EQ(*CanonicalJson(*ParseJson("[1.0, -2.0, 1e2, 0.5, 1.5e-7, 12345678901234567890]", "t")),
            "[1,-2,100,0.5,1.5e-07,12345678901234567890]");
  EXPECT_EQ(Sha256Hex(*CanonicalJson(*ParseJson("{\"n\":1.0}", "t"))),
            Sha256Hex(*CanonicalJson(*ParseJson("{\"n\":1}", "t"))));
  Json nan = Json::array({std::nan("")});
  EXPECT_FALSE(CanonicalJson(nan).ok());
}

TEST(CanonicalJsonTest, StringsKeepUtf8AndEscapeControls) {
  auto value = ParseJson("{\"k\":\"caf\xc3\xa9\\n\\u0001\\/\"}", "t");
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*CanonicalJson(*value), "{\"k\":\"caf\xc3\xa9\\n\\u0001/\"}");
  Json bad = std::string("\xff\xfe");
  EXPECT_FALSE(CanonicalJson(bad).ok());
}

// IsUtf8 accepts exactly the strings CanonicalJson can write.
TEST(CanonicalJsonTest, IsUtf8IsWhatCanonicalJsonCanWrite) {
  const std::vector<std::pair<std::string, bool>> samples = {
      {"", true},
      {"plain/ascii name", true},
      {"caf\xc3\xa9", true},
      {"\xe2\x82\xac euro", true},
      {"\xf0\x9f\x98\x80", true},
      {"\xf4\x8f\xbf\xbf", true},          // U+10FFFF
      {"bad\xff", false},
      {"\xc0\x80", false},                  // overlong
      {"\xed\xa0\x80", false},              // a surrogate
      {"\xf4\x90\x80\x80", false},          // past U+10FFFF
      {"\xe2\x82", false},                  // cut short
      {"\x80 alone", false},
  };
  for (const auto& [text, utf8] : samples) {
    EXPECT_EQ(IsUtf8(text), utf8) << text;
    EXPECT_EQ(CanonicalJson(Json(text)).ok(), utf8) << text;
  }
}

TEST(CanonicalJsonTest, IsCanonicalAndParseErrors) {
  EXPECT_TRUE(IsCanonicalJson(R"({"a":1,"b":[true]})"));
  EXPECT_FALSE(IsCanonicalJson(R"({"b":1,"a":1})"));
  EXPECT_FALSE(IsCanonicalJson(R"({"a": 1})"));
  EXPECT_FALSE(IsCanonicalJson(R"({"a":1,"a":2})"));  // duplicate keys collapse, so the text differs
  auto bad = ParseJson("{\"a\":", "spec.json", Code::kCorruption);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kCorruption);
  EXPECT_NE(bad.status().message().find("spec.json: not valid JSON"), std::string::npos);
}

TEST(ParallelForTest, CallsEveryIndexOnceWhateverTheThreads) {
  for (unsigned threads : {0u, 1u, 3u, 64u}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{1000}}) {
      std::vector<std::atomic<int>> calls(count);
      ParallelFor(count, threads, [&](size_t i) { ++calls[i]; });
      for (size_t i = 0; i < count; ++i) {
        EXPECT_EQ(calls[i].load(), 1) << "index " << i << " of " << count << ", threads " << threads;
      }
    }
  }
}

// The one JSON reader refuses what canonical JSON cannot keep, and bounds its work.
TEST(ParseJsonTest, RefusesHostileNumbersAndNestingWithoutThrowing) {
  auto refused = [](const std::string& text) {
    Result<Json> parsed = ParseJson(text, "data");
    return parsed.ok() ? std::string("accepted") : parsed.status().message();
  };
  EXPECT_EQ(refused(R"({"n":1e999})"), "data: the number 1e999 is too large for a double");
  EXPECT_EQ(refused(R"([-1e400])"), "data: the number -1e400 is too large for a double");
  EXPECT_EQ(refused(R"({"n":123456789012345678901234567890})"),
            "data: the integer 123456789012345678901234567890 does not fit in 64 bits (JSON numbers here are kept "
            "exactly)");
  EXPECT_EQ(refused("-9223372036854775809"), "data: the integer -9223372036854775809 does not fit in 64 bits (JSON "
                                             "numbers here are kept exactly)");
  EXPECT_EQ(refused(std::string(100000, '[') + std::string(100000, ']')), "data: nested deeper than 256 levels");
  EXPECT_EQ(refused(std::string(100000, '{')), "data: nested deeper than 256 levels");
  // What fits is kept exactly, and look-alikes inside strings are only text.
  EXPECT_EQ(refused("18446744073709551615"), "accepted");
  EXPECT_EQ(*CanonicalJson(*ParseJson("18446744073709551615", "n")), "18446744073709551615");
  EXPECT_EQ(*CanonicalJson(*ParseJson("-9223372036854775808", "n")), "-9223372036854775808");
  EXPECT_EQ(refused(R"({"text":"1e999 [[[[ \" 123456789012345678901234567890"})"), "accepted");
  EXPECT_EQ(refused(std::string(256, '[') + std::string(256, ']')), "accepted");
  EXPECT_EQ(refused("0.1e-999"), "accepted");  // underflows to 0: a double all the same
  EXPECT_NE(refused("{\"a\":}").find("not valid JSON"), std::string::npos);
}

// A source that gives its bytes in pieces of uneven size, then an error or its end.
class PieceSource : public ByteSource {
 public:
  PieceSource(std::string bytes, bool fail_at_end) : bytes_(std::move(bytes)), fail_at_end_(fail_at_end) {}
  Result<size_t> Read(char* buffer, size_t size) override {
    if (offset_ == bytes_.size()) {
      if (fail_at_end_) return Status::IOError("piece source", EIO);
      return size_t{0};
    }
    size_t n = std::min({size, bytes_.size() - offset_, 1 + (offset_ * 7919) % 5000});
    std::memcpy(buffer, bytes_.data() + offset_, n);
    offset_ += n;
    return n;
  }

 private:
  std::string bytes_;
  bool fail_at_end_;
  size_t offset_ = 0;
};

std::string Pattern(size_t size) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((i * 131) ^ (i >> 9));
  return bytes;
}

TEST(ReadAheadTest, GivesEveryByteInOrderThenTheEnd) {
  std::string bytes = Pattern(300000);
  PieceSource source(bytes, false);
  ReadAhead ahead(&source, 4096, 3);
  std::string got;
  for (;;) {
    Result<std::string_view> block = ahead.Next();
    ASSERT_TRUE(block.ok()) << block.status().message();
    if (block->empty()) break;
    EXPECT_LE(block->size(), 4096u);
    got.append(*block);
  }
  EXPECT_TRUE(got == bytes);
  EXPECT_TRUE(ahead.Next().ok() && ahead.Next()->empty()) << "the end stays the end";
}

TEST(ReadAheadTest, ReadCopiesAcrossBlocksAndTheErrorComesAfterTheBytes) {
  std::string bytes = Pattern(100000);
  PieceSource source(bytes, true);
  ReadAhead ahead(&source, 1000, 2);
  std::string got;
  char buffer[777];
  Status error;
  for (;;) {
    Result<size_t> n = ahead.Read(buffer, sizeof buffer);
    if (!n.ok()) {
      error = n.status();
      break;
    }
    ASSERT_GT(*n, 0u) << "a source that fails does not end";
    got.append(buffer, *n);
  }
  EXPECT_TRUE(got == bytes);
  EXPECT_EQ(error.code(), Code::kIOError);
  EXPECT_NE(error.message().find("piece source"), std::string::npos) << error.message();
}

TEST(ReadAheadTest, StopsWhenDroppedHalfWay) {
  std::string bytes = Pattern(1 << 20);
  PieceSource source(bytes, false);
  {
    ReadAhead ahead(&source, 512, 2);
    ASSERT_TRUE(ahead.Next().ok());
  }  // the reading thread stops and is joined here
  SUCCEED();
}

}  // namespace
}  // namespace capsule
