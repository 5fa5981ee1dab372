// capsule seal and capsule open through the real binary: keygen, a round trip of a few hundred
// KiB through standard input and output, and the refusals (tampering, truncation, another
// key), each an exit status of 1 with "capsule: " on standard error.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace {

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

std::string Path(const std::string& name) { return TempDir() + "/" + name; }

std::string Quote(const std::string& s) { return "'" + s + "'"; }

// Runs `./capsule <args>` through the shell; returns its exit status.
int Capsule(const std::string& args) {
  int status = std::system(("./capsule " + args).c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

class SealCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    prefix_ = "case" + std::to_string(counter++) + "_";
    public_key_ = NewKey("key.pem");
    plaintext_.resize(300 * 1024 + 123);
    unsigned x = 7;
    for (char& c : plaintext_) {
      x = x * 1664525 + 1013904223;
      c = static_cast<char>(x >> 24);
    }
    WriteFile(P("plain"), plaintext_);
    ASSERT_EQ(Capsule("seal --to " + public_key_ + " <" + Quote(P("plain")) + " >" + Quote(P("sealed")) +
                      " 2>" + Quote(P("seal.err"))),
              0)
        << ReadFile(P("seal.err"));
  }

  std::string P(const std::string& name) const { return Path(prefix_ + name); }

  // Writes a new X25519 key to `name` and returns its public key in hex.
  std::string NewKey(const std::string& name) {
    EXPECT_EQ(Capsule("keygen --type x25519 -o " + Quote(P(name)) + " >" + Quote(P(name + ".pub"))), 0);
    std::string hex = Trim(ReadFile(P(name + ".pub")));
    EXPECT_EQ(hex.size(), 64u);
    return hex;
  }

  // `capsule open` of file `sealed` with key file `key`; its stderr into *err.
  int Open(const std::string& sealed, const std::string& key, std::string* err) {
    int code = Capsule("open --key " + Quote(P(key)) + " <" + Quote(P(sealed)) + " >" + Quote(P("opened")) + " 2>" +
                       Quote(P("open.err")));
    *err = ReadFile(P("open.err"));
    return code;
  }

  void ExpectRefused(const std::string& sealed, const std::string& key, const std::string& reason) {
    std::string err;
    EXPECT_EQ(Open(sealed, key, &err), 1) << err;
    EXPECT_EQ(err.rfind("capsule: ", 0), 0u) << err;
    EXPECT_NE(err.find(reason), std::string::npos) << err;
  }

  std::string prefix_;
  std::string public_key_;
  std::string plaintext_;
};

TEST_F(SealCliTest, RoundTrip) {
  std::string sealed = ReadFile(P("sealed"));
  EXPECT_EQ(sealed.substr(0, 8), "LNKSEAL1");
  size_t records = (plaintext_.size() + 65535) / 65536;
  EXPECT_EQ(sealed.size(), 8 + 4 + 80 + plaintext_.size() + (records + 1) * 20);
  std::string err;
  ASSERT_EQ(Open("sealed", "key.pem", &err), 0) << err;
  EXPECT_TRUE(ReadFile(P("opened")) == plaintext_);
  EXPECT_EQ(err, "");
}

TEST_F(SealCliTest, TamperedByteIsRefused) {
  std::string sealed = ReadFile(P("sealed"));
  sealed[sealed.size() / 2] ^= 0x04;
  WriteFile(P("tampered"), sealed);
  ExpectRefused("tampered", "key.pem", "corrupted or tampered");
  // The records before the damaged one came out, and the error says they are incomplete.
  std::string opened = ReadFile(P("opened"));
  EXPECT_EQ(opened.size(), 2u * 65536);  // the byte is in the third record
  EXPECT_TRUE(opened == plaintext_.substr(0, opened.size()));
  EXPECT_NE(ReadFile(P("open.err")).find("authentic but incomplete"), std::string::npos);
}

TEST_F(SealCliTest, TruncatedOrExtendedIsRefused) {
  std::string sealed = ReadFile(P("sealed"));
  WriteFile(P("cut"), sealed.substr(0, sealed.size() - 20));  // without the final record
  ExpectRefused("cut", "key.pem", "final record is missing");
  WriteFile(P("long"), sealed + "more");
  ExpectRefused("long", "key.pem", "bytes after the final record");
  WriteFile(P("empty"), "");
  ExpectRefused("empty", "key.pem", "not a sealed envelope");
}

TEST_F(SealCliTest, WrongKeyIsRefused) {
  NewKey("other.pem");
  ExpectRefused("sealed", "other.pem", "does not open with this key");
  EXPECT_EQ(ReadFile(P("opened")), "");  // nothing at all came out
}

TEST_F(SealCliTest, BadArgumentsAreRefused) {
  EXPECT_EQ(Capsule("seal --to abcd </dev/null >/dev/null 2>" + Quote(P("err"))), 1);
  EXPECT_EQ(ReadFile(P("err")).rfind("capsule: --to", 0), 0u);
  EXPECT_EQ(Capsule("open --key " + Quote(P("missing.pem")) + " <" + Quote(P("sealed")) + " >/dev/null 2>" +
                    Quote(P("err"))),
            1);
  EXPECT_EQ(Capsule("open </dev/null >/dev/null 2>/dev/null"), 2);  // usage: --key is required
}

}  // namespace
