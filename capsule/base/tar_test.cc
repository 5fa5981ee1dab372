// Tests of the streaming tar writer and reader, including interchange with GNU tar.
#include "capsule/base/tar.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "capsule/base/file_io.h"

#include "capsule/base/temp_dir.h"

namespace capsule {
namespace {

std::string TempDir() { return testing::MakeTempDir("tar_test"); }

const std::string kLongName = "files/" + std::string(150, 'n') + "/" + std::string(120, 'm') + ".txt";

std::string SampleTar() {
  StringSink sink;
  TarWriter tar(&sink);
  EXPECT_TRUE(tar.AddDirectory("files").ok());
  EXPECT_TRUE(tar.AddFile("files/a.txt", "hello").ok());
  EXPECT_TRUE(tar.AddFile(kLongName, std::string(1000, 'x'), 0644, {{"LNK.sha256", "abc"}}).ok());
  EXPECT_TRUE(tar.AddSymlink("files/link", "a.txt").ok());
  EXPECT_TRUE(tar.AddFile("empty", "").ok());
  EXPECT_TRUE(tar.Finish().ok());
  return sink.data();
}

struct ReadBack {
  TarEntry entry;
  std::string data;
};

Result<std::vector<ReadBack>> ReadAll(const std::string& bytes) {
  StringSource source(bytes);
  TarReader reader(&source);
  std::vector<ReadBack> out;
  for (;;) {
    ReadBack item;
    CAPSULE_ASSIGN_OR_RETURN(bool more, reader.Next(&item.entry));
    if (!more) break;
    char buffer[300];
    for (;;) {
      CAPSULE_ASSIGN_OR_RETURN(size_t n, reader.ReadData(buffer, sizeof buffer));
      if (n == 0) break;
      item.data.append(buffer, n);
    }
    out.push_back(std::move(item));
  }
  CAPSULE_RETURN_IF_ERROR(reader.ExpectOnlyZerosAfterEnd());
  return out;
}

TEST(TarTest, RoundTripWithPaxRecords) {
  std::string bytes = SampleTar();
  EXPECT_EQ(bytes.size() % 10240, 0u);
  auto entries = ReadAll(bytes);
  ASSERT_TRUE(entries.ok()) << entries.status().message();
  ASSERT_EQ(entries->size(), 5u);
  EXPECT_EQ((*entries)[0].entry.type, TarEntry::Type::kDirectory);
  EXPECT_EQ((*entries)[0].entry.path, "files");
  EXPECT_EQ((*entries)[1].data, "hello");
  EXPECT_EQ((*entries)[2].entry.path, kLongName);
  EXPECT_EQ((*entries)[2].data, std::string(1000, 'x'));
  EXPECT_EQ((*entries)[2].entry.pax.at("LNK.sha256"), "abc");
  EXPECT_EQ((*entries)[3].entry.type, TarEntry::Type::kSymlink);
  EXPECT_EQ((*entries)[3].entry.link_target, "a.txt");
  EXPECT_EQ((*entries)[4].data, "");
}

TEST(TarTest, SameInputSameBytes) { EXPECT_EQ(SampleTar(), SampleTar()); }

TEST(TarTest, GnuTarListsAndExtractsIt) {
  std::string dir = TempDir();
  ASSERT_TRUE(WriteFileAtomic(dir + "/t.tar", SampleTar()).ok());
  std::string cmd = "cd " + dir + " && mkdir out && tar -xf t.tar -C out 2> err.txt";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << *ReadFile(dir + "/err.txt");
  EXPECT_EQ(*ReadFile(dir + "/out/files/a.txt"), "hello");
  EXPECT_EQ(*ReadFile(dir + "/out/" + kLongName), std::string(1000, 'x'));
}

TEST(TarTest, ReadsWhatGnuTarWrites) {
  std::string dir = TempDir();
  ASSERT_TRUE(MakeDirectories(dir + "/src/" + std::string(120, 'd')).ok());
  ASSERT_TRUE(WriteFileAtomic(dir + "/src/" + std::string(120, 'd') + "/f", "gnu").ok());
  std::string cmd = "cd " + dir + "/src && tar --format=posix -cf ../g.tar . && tar --format=gnu -cf ../h.tar .";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  for (const char* name : {"/g.tar", "/h.tar"}) {
    auto entries = ReadAll(*ReadFile(dir + name));
    ASSERT_TRUE(entries.ok()) << entries.status().message();
    bool found = false;
    for (const auto& e : *entries) {
      if (e.entry.path == std::string(120, 'd') + "/f") found = e.data == "gnu";
    }
    EXPECT_TRUE(found) << name;
  }
}

TEST(TarTest, CutShortAnywhereIsRefused) {
  std::string bytes = SampleTar();
  // Every cut before the end-of-archive marker is an error, never a shorter archive.
  size_t end_marker = bytes.size();
  while (end_marker >= 512 && bytes.substr(end_marker - 512, 512) == std::string(512, '\0')) end_marker -= 512;
  for (size_t cut = 0; cut < end_marker + 1024; cut += 97) {
    auto entries = ReadAll(bytes.substr(0, cut));
    EXPECT_FALSE(entries.ok()) << "cut at " << cut;
  }
}

TEST(TarTest, BadChecksumAndTrailingBytesAreRefused) {
  std::string bytes = SampleTar();
  std::string flipped = bytes;
  flipped[10] ^= 1;  // inside the first header's name
  auto bad = ReadAll(flipped);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("checksum"), std::string::npos);
  std::string trailing = bytes + "garbage";
  auto after = ReadAll(trailing);
  ASSERT_FALSE(after.ok());
  EXPECT_NE(after.status().message().find("after the end"), std::string::npos);
}

TEST(TarTest, WriterRefusesWrongDataLength) {
  StringSink sink;
  TarWriter tar(&sink);
  ASSERT_TRUE(tar.BeginFile("f", 3).ok());
  EXPECT_FALSE(tar.WriteFileData("four").ok());
  ASSERT_TRUE(tar.WriteFileData("ab").ok());
  EXPECT_FALSE(tar.EndFile().ok());
}

}  // namespace
}  // namespace capsule
