// The sealed envelope: round trips at every record boundary, then every way a received
// envelope can be wrong (flipped bits in each part, truncation, trailing bytes, another key,
// reordered records), and the writer's sticky error.
#include "move/seal/envelope.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "move/seal/envelope_format.h"
#include "move/seal/hpke.h"

namespace capsule {
namespace {

using envelope::kMaxRecordSize;
constexpr size_t kPreamble = 8 + 4 + envelope::kHeaderSize;  // magic, header_len, header
constexpr size_t kRecordOverhead = 4 + envelope::kTagSize;

std::string Pattern(size_t size) {
  std::string out(size, '\0');
  uint32_t x = 12345;
  for (char& c : out) {
    x = x * 1103515245 + 12345;
    c = static_cast<char>(x >> 16);
  }
  return out;
}

hpke::KeyPair NewKey() {
  Result<hpke::KeyPair> key = hpke::GenerateKeyPair();
  EXPECT_TRUE(key.ok());
  return std::move(key).value();
}

// Seals `plaintext`, written in pieces of `piece` bytes.
std::string Seal(const hpke::KeyPair& key, const std::string& plaintext, size_t piece = 10000,
                 uint64_t first_counter = 0) {
  StringSink sink;
  auto writer = EnvelopeWriter::CreateForTesting(&sink, key.public_key, first_counter);
  EXPECT_TRUE(writer.ok()) << writer.status().ToString();
  for (size_t at = 0; at < plaintext.size(); at += piece) {
    EXPECT_TRUE((*writer)->Write(std::string_view(plaintext).substr(at, piece)).ok());
  }
  EXPECT_TRUE((*writer)->Close().ok());
  return sink.data();
}

// Opens `sealed`, reading 7000 bytes at a time. On failure, *partial holds what Read returned
// before it failed.
Result<std::string> Open(const hpke::KeyPair& key, const std::string& sealed, std::string* partial = nullptr,
                         uint64_t first_counter = 0) {
  StringSource source(sealed);
  auto reader = EnvelopeReader::OpenForTesting(&source, key.private_key.get(), first_counter);
  if (!reader.ok()) return reader.status();
  std::string out;
  char buffer[7000];
  for (;;) {
    Result<size_t> n = (*reader)->Read(buffer, sizeof buffer);
    if (!n.ok()) {
      if (partial != nullptr) *partial = out;
      // Sticky: the same error again.
      EXPECT_EQ((*reader)->Read(buffer, sizeof buffer).status().message(), n.status().message());
      return n.status();
    }
    if (*n == 0) break;
    out.append(buffer, *n);
  }
  Result<size_t> again = (*reader)->Read(buffer, sizeof buffer);
  EXPECT_TRUE(again.ok() && *again == 0);  // the end stays the end
  return out;
}

void ExpectRefused(const hpke::KeyPair& key, const std::string& sealed, const std::string& why) {
  std::string partial;
  Result<std::string> opened = Open(key, sealed, &partial);
  ASSERT_FALSE(opened.ok()) << why << ": opened";
  EXPECT_EQ(opened.status().code(), Code::kCorruption) << why;
  EXPECT_EQ(opened.status().message().rfind(envelope::kCorrupted, 0), 0u) << opened.status().message();
}

const std::vector<size_t> kSizes = {0, 1, 65535, 65536, 65537, 2 * 65536 + 500};

TEST(EnvelopeTest, RoundTripsAtRecordBoundaries) {
  hpke::KeyPair key = NewKey();
  for (size_t size : kSizes) {
    SCOPED_TRACE(size);
    std::string plaintext = Pattern(size);
    size_t records = (size + kMaxRecordSize - 1) / kMaxRecordSize;
    for (size_t piece : {size_t{1000}, size_t{65536}, size_t{200000}}) {
      if (piece == 1000 && size > 70000) continue;  // small pieces of the big ones: slow, and covered below
      std::string sealed = Seal(key, plaintext, piece);
      EXPECT_EQ(sealed.size(), kPreamble + size + records * kRecordOverhead + kRecordOverhead);
      EXPECT_EQ(sealed.substr(0, 12), std::string("LNKSEAL1\0\0\0\x50", 12));
      Result<std::string> opened = Open(key, sealed);
      ASSERT_TRUE(opened.ok()) << opened.status().ToString();
      EXPECT_TRUE(*opened == plaintext);
    }
  }
}

TEST(EnvelopeTest, EachEnvelopeHasAFreshStreamKey) {
  hpke::KeyPair key = NewKey();
  std::string a = Seal(key, "same"), b = Seal(key, "same");
  EXPECT_NE(a.substr(12), b.substr(12));
}

// The offsets of the three data records' and the final record's starts, for 2*65536+500 bytes.
std::vector<size_t> RecordStarts() {
  size_t first = kPreamble, second = first + kRecordOverhead + kMaxRecordSize;
  size_t third = second + kRecordOverhead + kMaxRecordSize, final = third + kRecordOverhead + 500;
  return {first, second, third, final};
}

// NextPiece gives each record's plaintext where it was opened (the rest of one Read began),
// the same bytes Read gives, and a damaged record's refusal, sticky.
TEST(EnvelopeTest, PiecesAreTheRecordsPlaintext) {
  hpke::KeyPair key = NewKey();
  const std::string plaintext = Pattern(2 * 65536 + 500);
  const std::string sealed = Seal(key, plaintext);
  StringSource source(sealed);
  auto reader = EnvelopeReader::Open(&source, key.private_key.get());
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  char buffer[100];
  ASSERT_EQ(*(*reader)->Read(buffer, sizeof buffer), sizeof buffer);
  std::string out(buffer, sizeof buffer);
  std::vector<size_t> sizes;
  for (;;) {
    Result<std::string_view> piece = (*reader)->NextPiece();
    ASSERT_TRUE(piece.ok()) << piece.status().ToString();
    if (piece->empty()) break;
    sizes.push_back(piece->size());
    out.append(*piece);
  }
  EXPECT_TRUE(out == plaintext);
  EXPECT_EQ(sizes, (std::vector<size_t>{kMaxRecordSize - sizeof buffer, kMaxRecordSize, 500}));
  EXPECT_TRUE((*reader)->NextPiece()->empty()) << "the end stays the end";

  std::string bad = sealed;
  bad[RecordStarts()[1] + 4 + 10] ^= 1;
  StringSource bad_source(bad);
  auto bad_reader = EnvelopeReader::Open(&bad_source, key.private_key.get());
  ASSERT_TRUE(bad_reader.ok());
  Result<std::string_view> first = (*bad_reader)->NextPiece();
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(*first == std::string_view(plaintext).substr(0, kMaxRecordSize));
  Result<std::string_view> refused = (*bad_reader)->NextPiece();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kCorruption);
  EXPECT_EQ((*bad_reader)->NextPiece().status().message(), refused.status().message());
}

TEST(EnvelopeTest, FlippedBitsInEveryPartAreRefused) {
  hpke::KeyPair key = NewKey();
  const std::string plaintext = Pattern(2 * 65536 + 500);
  const std::string sealed = Seal(key, plaintext);
  std::vector<size_t> starts = RecordStarts();
  ASSERT_EQ(sealed.size(), starts[3] + kRecordOverhead);

  std::vector<size_t> offsets;
  for (size_t i = 0; i < kPreamble; ++i) offsets.push_back(i);  // magic, header_len, header
  for (size_t r = 0; r < 3; ++r) {
    size_t length = r < 2 ? kMaxRecordSize : 500, s = starts[r];
    for (size_t i = 0; i < 4; ++i) offsets.push_back(s + i);                                  // length
    for (size_t i : {size_t{0}, length / 2, length - 1}) offsets.push_back(s + 4 + i);        // ciphertext
    for (size_t i = 0; i < envelope::kTagSize; ++i) offsets.push_back(s + 4 + length + i);    // tag
  }
  for (size_t i = 0; i < kRecordOverhead; ++i) offsets.push_back(starts[3] + i);  // final record

  for (size_t offset : offsets) {
    for (char bit : {char(0x01), char(0x80)}) {
      std::string bad = sealed;
      bad[offset] ^= bit;
      std::string partial;
      Result<std::string> opened = Open(key, bad, &partial);
      ASSERT_FALSE(opened.ok()) << "offset " << offset;
      EXPECT_EQ(opened.status().code(), Code::kCorruption) << "offset " << offset;
      // Only records wholly before the damaged one come out, and they are the original's.
      size_t damaged = std::upper_bound(starts.begin(), starts.end(), offset) - starts.begin();
      size_t allowed = damaged == 0 ? 0 : std::min((damaged - 1) * kMaxRecordSize, plaintext.size());
      EXPECT_LE(partial.size(), allowed) << "offset " << offset;
      EXPECT_EQ(partial, plaintext.substr(0, partial.size()));
    }
  }
}

TEST(EnvelopeTest, TruncationAnywhereIsRefused) {
  hpke::KeyPair key = NewKey();
  const std::string sealed = Seal(key, Pattern(2 * 65536 + 500));
  std::vector<size_t> cuts = {0, 1, 7, 8, 11, 12, 12 + 31, kPreamble - 1};
  for (size_t start : RecordStarts()) {
    for (size_t delta : {0, 1, 3, 4, 5, 300}) {  // at the boundary, in the length, in the data
      if (start + delta < sealed.size()) cuts.push_back(start + delta);
    }
    cuts.push_back(start - 1);                                                 // a tag short
  }
  cuts.push_back(sealed.size() - 1);
  for (size_t cut : cuts) {
    ASSERT_LT(cut, sealed.size());
    ExpectRefused(key, sealed.substr(0, cut), "cut at " + std::to_string(cut));
  }
  Result<std::string> missing_final = Open(key, sealed.substr(0, RecordStarts()[3]));
  EXPECT_NE(missing_final.status().message().find("final record is missing"), std::string::npos)
      << missing_final.status().ToString();
}

TEST(EnvelopeTest, BytesAfterTheFinalRecordAreRefused) {
  hpke::KeyPair key = NewKey();
  const std::string sealed = Seal(key, Pattern(1000));
  ExpectRefused(key, sealed + "x", "one byte after");
  ExpectRefused(key, sealed + sealed.substr(sealed.size() - kRecordOverhead), "a second final record");
  ExpectRefused(key, sealed + sealed, "two envelopes");
  Result<std::string> opened = Open(key, sealed + std::string(1, '\0'));
  EXPECT_NE(opened.status().message().find("bytes after the final record"), std::string::npos);
}

TEST(EnvelopeTest, ReorderedOrDroppedRecordsAreRefused) {
  hpke::KeyPair key = NewKey();
  const std::string sealed = Seal(key, Pattern(2 * 65536 + 500));
  std::vector<size_t> s = RecordStarts();
  std::string first = sealed.substr(s[0], s[1] - s[0]), second = sealed.substr(s[1], s[2] - s[1]);
  std::string rest = sealed.substr(s[2]);
  std::string preamble = sealed.substr(0, s[0]);
  ExpectRefused(key, preamble + second + first + rest, "records swapped");
  ExpectRefused(key, preamble + second + rest, "first record dropped");
  ExpectRefused(key, preamble + first + first + rest, "a record repeated");
  ExpectRefused(key, preamble + sealed.substr(s[3]), "only the final record");
}

TEST(EnvelopeTest, AnotherRecipientKeyIsRefused) {
  hpke::KeyPair key = NewKey(), other = NewKey();
  std::string partial;
  Result<std::string> opened = Open(other, Seal(key, Pattern(100)), &partial);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), Code::kCorruption);
  EXPECT_NE(opened.status().message().find("does not open with this key"), std::string::npos);
}

TEST(EnvelopeTest, OversizeHeaderAndRecordAreRefused) {
  hpke::KeyPair key = NewKey();
  std::string sealed = Seal(key, Pattern(10));
  std::string big_header = sealed;
  big_header.replace(8, 4, std::string("\0\0\x10\x01", 4));  // 4097
  Result<std::string> opened = Open(key, big_header + std::string(5000, 'x'));
  EXPECT_NE(opened.status().message().find("header length over 4096"), std::string::npos);
  std::string big_record = sealed;
  big_record.replace(kPreamble, 4, std::string("\0\x01\0\x01", 4));  // 65537
  opened = Open(key, big_record + std::string(70000, 'x'));
  EXPECT_NE(opened.status().message().find("length over 65536"), std::string::npos);
  ExpectRefused(key, "LNKSEAL2" + sealed.substr(8), "wrong magic");
}

// A sink that accepts `writes_left` writes, then fails every one.
class FailingSink : public ByteSink {
 public:
  explicit FailingSink(int writes_left) : writes_left_(writes_left) {}
  Status Write(std::string_view data) override {
    if (writes_left_-- <= 0) return Status::IOError("test sink", "disk full");
    data_.append(data);
    return Status::Ok();
  }
  int calls_after_failure() const { return writes_left_ < 0 ? -writes_left_ : 0; }
  const std::string& data() const { return data_; }

 private:
  int writes_left_;
  std::string data_;
};

TEST(EnvelopeTest, WriterIsUnusableAfterAFailedWrite) {
  hpke::KeyPair key = NewKey();
  FailingSink sink(2);  // the header and one record
  auto writer = EnvelopeWriter::Create(&sink, key.public_key);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Write(Pattern(65536)).ok());
  Status failed = (*writer)->Write(Pattern(65536));
  EXPECT_EQ(failed.code(), Code::kIOError);
  EXPECT_FALSE((*writer)->Write("x").ok());
  EXPECT_FALSE((*writer)->Write(Pattern(70000)).ok());
  EXPECT_FALSE((*writer)->Close().ok());
  EXPECT_EQ(sink.calls_after_failure(), 1);  // nothing more was even tried
  ExpectRefused(key, sink.data(), "the unfinished envelope");
}

TEST(EnvelopeTest, WriterIsUnusableOnCounterOverflow) {
  hpke::KeyPair key = NewKey();
  // The last counter is the final record's: a data record may take UINT64_MAX - 1 at most.
  const std::string one_record = Pattern(65536);
  std::string sealed = Seal(key, one_record, 65536, UINT64_MAX - 1);
  Result<std::string> opened = Open(key, sealed, nullptr, UINT64_MAX - 1);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(*opened, one_record);
  ExpectRefused(key, sealed, "numbered from 0");  // the counter is bound into every record

  StringSink sink;
  auto writer = EnvelopeWriter::CreateForTesting(&sink, key.public_key, UINT64_MAX - 1);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Write(one_record).ok());
  size_t before = sink.data().size();
  Status overflow = (*writer)->Write(one_record);
  EXPECT_EQ(overflow.code(), Code::kFailedPrecondition);
  EXPECT_NE(overflow.message().find("overflow"), std::string::npos);
  EXPECT_FALSE((*writer)->Write("x").ok());
  EXPECT_FALSE((*writer)->Close().ok());
  EXPECT_EQ(sink.data().size(), before);
}

TEST(EnvelopeTest, WriterRefusesUseAfterClose) {
  hpke::KeyPair key = NewKey();
  StringSink sink;
  auto writer = EnvelopeWriter::Create(&sink, key.public_key);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Close().ok());
  EXPECT_FALSE((*writer)->Write("late").ok());
  EXPECT_FALSE((*writer)->Close().ok());
  Result<std::string> opened = Open(key, sink.data());
  ASSERT_TRUE(opened.ok());
  EXPECT_EQ(*opened, "");
}

TEST(EnvelopeTest, ReadOfZeroBytesIsNotTheEnd) {
  hpke::KeyPair key = NewKey();
  StringSource source(Seal(key, "abc"));
  auto reader = EnvelopeReader::Open(&source, key.private_key.get());
  ASSERT_TRUE(reader.ok());
  char buffer[8];
  EXPECT_EQ((*reader)->Read(buffer, 0).status().code(), Code::kInvalidArgument);
  Result<size_t> n = (*reader)->Read(buffer, sizeof buffer);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::string(buffer, *n), "abc");
}

// A source whose reads fail after `good_bytes`.
class FailingSource : public ByteSource {
 public:
  FailingSource(std::string data, size_t good_bytes) : data_(std::move(data)), good_bytes_(good_bytes) {}
  Result<size_t> Read(char* buffer, size_t size) override {
    if (offset_ >= good_bytes_) return Status::IOError("test source", "connection reset");
    size_t n = std::min(size, good_bytes_ - offset_);
    std::memcpy(buffer, data_.data() + offset_, n);
    offset_ += n;
    return n;
  }

 private:
  std::string data_;
  size_t good_bytes_;
  size_t offset_ = 0;
};

TEST(EnvelopeTest, ReadFailuresStayIOErrors) {
  hpke::KeyPair key = NewKey();
  std::string sealed = Seal(key, Pattern(1000));
  FailingSource source(sealed, kPreamble + 10);
  auto reader = EnvelopeReader::Open(&source, key.private_key.get());
  ASSERT_TRUE(reader.ok());
  char buffer[100];
  Result<size_t> n = (*reader)->Read(buffer, sizeof buffer);
  EXPECT_EQ(n.status().code(), Code::kIOError);
  EXPECT_FALSE((*reader)->Read(buffer, sizeof buffer).ok());
}

}  // namespace
}  // namespace capsule
