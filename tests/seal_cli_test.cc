// capsule seal and capsule open through the real binary: keygen, a round trip of a few hundred
// KiB through standard input and output, and the refusals (tampering, truncation, trailing
// bytes, another key), each an exit status of 1 with "capsule: " on standard error.
#include <gtest/gtest.h>

#include <string>

#include "capsule/base/file_io.h"
#include "tests/cli_runner.h"

namespace capsule::testing {
namespace {

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

class SealCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("seal");
    public_key_ = NewKey("key.pem");
    plaintext_.resize(300 * 1024 + 123);
    unsigned x = 7;
    for (char& c : plaintext_) {
      x = x * 1664525 + 1013904223;
      c = static_cast<char>(x >> 24);
    }
    RunResult sealed = RunCapsule({"seal", "--to", public_key_}, plaintext_);
    ASSERT_EQ(sealed.exit_code, 0) << sealed.err;
    sealed_ = sealed.out;
  }

  // Writes a new X25519 key to `name` in the test's folder and returns its public key in hex.
  std::string NewKey(const std::string& name) {
    RunResult keygen = RunCapsule({"keygen", "--type", "x25519", "-o", dir_ + "/" + name});
    EXPECT_EQ(keygen.exit_code, 0) << keygen.err;
    std::string hex = Trim(keygen.out);
    EXPECT_EQ(hex.size(), 64u);
    return hex;
  }

  RunResult Open(const std::string& sealed, const std::string& key = "key.pem") {
    return RunCapsule({"open", "--key", dir_ + "/" + key}, sealed);
  }

  // Open refuses `sealed` with exit status 1 and `reason` in a "capsule: " error.
  RunResult ExpectRefused(const std::string& sealed, const std::string& reason, const std::string& key = "key.pem") {
    RunResult opened = Open(sealed, key);
    EXPECT_EQ(opened.exit_code, 1) << opened.err;
    EXPECT_EQ(opened.err.rfind("capsule: ", 0), 0u) << opened.err;
    EXPECT_NE(opened.err.find(reason), std::string::npos) << opened.err;
    return opened;
  }

  std::string dir_;
  std::string public_key_;
  std::string plaintext_;
  std::string sealed_;
};

TEST_F(SealCliTest, RoundTrip) {
  EXPECT_EQ(sealed_.substr(0, 8), "LNKSEAL1");
  size_t records = (plaintext_.size() + 65535) / 65536;
  EXPECT_EQ(sealed_.size(), 8 + 4 + 80 + plaintext_.size() + (records + 1) * 20);
  RunResult opened = Open(sealed_);
  ASSERT_EQ(opened.exit_code, 0) << opened.err;
  EXPECT_TRUE(opened.out == plaintext_);
  EXPECT_EQ(opened.err, "");
}

// A file on standard input is read ahead on a thread of its own; a pipe is read as it comes.
// Both give the same bytes.
TEST_F(SealCliTest, PipesRoundTripLikeFiles) {
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/plain", plaintext_).ok());
  ASSERT_EQ(testing::Shell("cat " + dir_ + "/plain | ./capsule seal --to " + public_key_ + " | cat > " + dir_ +
                           "/sealed && cat " + dir_ + "/sealed | ./capsule open --key " + dir_ + "/key.pem > " +
                           dir_ + "/opened"),
            0);
  EXPECT_TRUE(*ReadFile(dir_ + "/opened") == plaintext_);
  RunResult from_file = Open(*ReadFile(dir_ + "/sealed"));
  ASSERT_EQ(from_file.exit_code, 0) << from_file.err;
  EXPECT_TRUE(from_file.out == plaintext_);
}

TEST_F(SealCliTest, TamperedByteIsRefused) {
  std::string tampered = sealed_;
  tampered[tampered.size() / 2] ^= 0x04;
  RunResult opened = ExpectRefused(tampered, "corrupted or tampered");
  // The records before the damaged one came out, and the error says they are incomplete.
  EXPECT_EQ(opened.out.size(), 2u * 65536);  // the byte is in the third record
  EXPECT_TRUE(opened.out == plaintext_.substr(0, opened.out.size()));
  EXPECT_NE(opened.err.find("authentic but incomplete"), std::string::npos);
}

TEST_F(SealCliTest, TruncatedOrExtendedIsRefused) {
  ExpectRefused(sealed_.substr(0, sealed_.size() - 20), "final record is missing");
  ExpectRefused(sealed_ + "more", "bytes after the final record");
  ExpectRefused("", "not a sealed envelope");
}

TEST_F(SealCliTest, WrongKeyIsRefused) {
  NewKey("other.pem");
  RunResult opened = ExpectRefused(sealed_, "does not open with this key", "other.pem");
  EXPECT_EQ(opened.out, "");  // nothing at all came out
}

TEST_F(SealCliTest, BadArgumentsAreRefused) {
  RunResult bad_key = RunCapsule({"seal", "--pubkey", "abcd"}, "x");
  EXPECT_EQ(bad_key.exit_code, 1);
  EXPECT_EQ(bad_key.err, "capsule: --pubkey abcd: neither 64 hex digits nor a file holding them\n") << bad_key.err;
  EXPECT_EQ(bad_key.out, "");
  EXPECT_EQ(Open(sealed_, "missing.pem").exit_code, 1);
  EXPECT_EQ(RunCapsule({"open"}, sealed_).exit_code, 2);  // usage: --key is required
}

}  // namespace
}  // namespace capsule::testing
