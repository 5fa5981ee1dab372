#include "move/seal/envelope.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cstring>

#include "capsule/base/big_endian.h"
#include "move/seal/envelope_format.h"
#include "move/seal/hpke.h"

namespace capsule {

using envelope::kLengthSize;
using envelope::kMaxRecordSize;
using envelope::kTagSize;

namespace {

// The nonce and additional data of record `counter` holding `length` plaintext bytes.
struct RecordIv {
  char nonce[kAeadNonceSize] = {};
  char aad[12] = {};
  RecordIv(uint64_t counter, uint32_t length) {
    PutBigEndian(nonce + 4, counter, 8);  // four zero bytes, then the counter
    PutBigEndian(aad, counter, 8);
    PutBigEndian(aad + 8, length, 4);
  }
  std::string_view Nonce() const { return {nonce, sizeof nonce}; }
  std::string_view Aad() const { return {aad, sizeof aad}; }
};

// Reads until `size` bytes or the end of `in`; returns how many it got.
Result<size_t> ReadUpTo(ByteSource* in, char* buffer, size_t size) {
  size_t done = 0;
  while (done < size) {
    CAPSULE_ASSIGN_OR_RETURN(size_t n, in->Read(buffer + done, size - done));
    if (n == 0) break;
    done += n;
  }
  return done;
}

Status Corrupted(const std::string& reason) {
  return Status::Corruption(std::string(envelope::kCorrupted), reason);
}

}  // namespace

// ---- EnvelopeWriter ----

EnvelopeWriter::EnvelopeWriter(ByteSink* out, AeadCipher cipher, uint64_t first_counter)
    : out_(out), cipher_(std::move(cipher)), counter_(first_counter) {
  pending_.reserve(kMaxRecordSize);
  record_.reserve(kLengthSize + kMaxRecordSize + kTagSize);
}

Result<std::unique_ptr<EnvelopeWriter>> EnvelopeWriter::Create(ByteSink* out, std::string_view recipient_public_key) {
  return CreateForTesting(out, recipient_public_key, 0);
}

Result<std::unique_ptr<EnvelopeWriter>> EnvelopeWriter::CreateForTesting(ByteSink* out,
                                                                         std::string_view recipient_public_key,
                                                                         uint64_t first_counter) {
  std::string stream_key(envelope::kStreamKeySize, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(stream_key.data()), static_cast<int>(stream_key.size())) != 1) {
    return OpenSslError("sealed envelope: random stream key", Code::kIOError);
  }
  Result<hpke::SealedMessage> sealed_key =
      hpke::SealBase(recipient_public_key, envelope::kEnvelopeInfo, "", stream_key, envelope::kHeaderAead);
  Result<AeadCipher> cipher = AeadCipher::Create(envelope::kRecordAead, stream_key);
  OPENSSL_cleanse(stream_key.data(), stream_key.size());
  if (!sealed_key.ok()) return sealed_key.status().WithContext("sealed envelope: sealing the stream key");
  if (!cipher.ok()) return cipher.status().WithContext("sealed envelope");

  std::string start(envelope::kMagic);
  std::string header = sealed_key->enc + sealed_key->ciphertext;
  start.resize(start.size() + kLengthSize);
  PutBigEndian(start.data() + envelope::kMagic.size(), header.size(), kLengthSize);
  start += header;
  Status written = out->Write(start);
  if (!written.ok()) return written.WithContext("sealed envelope");
  return std::unique_ptr<EnvelopeWriter>(new EnvelopeWriter(out, std::move(cipher).value(), first_counter));
}

Status EnvelopeWriter::Fail(Status status) {
  error_ = status;
  return status;
}

Status EnvelopeWriter::Write(std::string_view data) {
  if (!error_.ok()) return error_;
  if (closed_) return Status::FailedPrecondition("sealed envelope", "written after it was closed");
  while (!data.empty()) {
    if (pending_.empty() && data.size() >= kMaxRecordSize) {  // a whole record: seal it in place
      CAPSULE_RETURN_IF_ERROR(EmitRecord(data.substr(0, kMaxRecordSize)));
      data.remove_prefix(kMaxRecordSize);
      continue;
    }
    size_t take = std::min(kMaxRecordSize - pending_.size(), data.size());
    pending_.append(data.substr(0, take));
    data.remove_prefix(take);
    if (pending_.size() == kMaxRecordSize) {
      CAPSULE_RETURN_IF_ERROR(EmitRecord(pending_));
      pending_.clear();
    }
  }
  return Status::Ok();
}

Status EnvelopeWriter::Close() {
  if (!error_.ok()) return error_;
  if (closed_) return Status::FailedPrecondition("sealed envelope", "closed twice");
  if (!pending_.empty()) {
    CAPSULE_RETURN_IF_ERROR(EmitRecord(pending_));
    pending_.clear();
  }
  CAPSULE_RETURN_IF_ERROR(EmitRecord(""));  // the final record
  closed_ = true;
  Status closed = out_->Close();
  if (!closed.ok()) return Fail(closed.WithContext("sealed envelope"));
  return Status::Ok();
}

// An empty `plaintext` is the final record: the only record that may take the last counter.
Status EnvelopeWriter::EmitRecord(std::string_view plaintext) {
  if (!plaintext.empty() && counter_ == UINT64_MAX) {
    return Fail(Status::FailedPrecondition("sealed envelope", "the record counter would overflow; unusable"));
  }
  const uint32_t length = static_cast<uint32_t>(plaintext.size());
  RecordIv iv(counter_, length);
  record_.resize(kLengthSize + plaintext.size() + kTagSize);
  PutBigEndian(record_.data(), length, kLengthSize);
  Status sealed = cipher_.Seal(iv.Nonce(), iv.Aad(), plaintext, record_.data() + kLengthSize);
  if (!sealed.ok()) return Fail(sealed.WithContext("sealed envelope"));
  Status written = out_->Write(record_);
  if (!written.ok()) return Fail(written.WithContext("sealed envelope: record write failed; unusable"));
  if (!plaintext.empty()) ++counter_;
  return Status::Ok();
}

// ---- EnvelopeReader ----

EnvelopeReader::EnvelopeReader(ByteSource* in, AeadCipher cipher, uint64_t first_counter)
    : in_(in), cipher_(std::move(cipher)), counter_(first_counter) {
  sealed_.reserve(kMaxRecordSize + kTagSize);
  plaintext_.reserve(kMaxRecordSize);
}

Result<std::unique_ptr<EnvelopeReader>> EnvelopeReader::Open(ByteSource* in, EVP_PKEY* recipient_private_key) {
  return OpenForTesting(in, recipient_private_key, 0);
}

Result<std::unique_ptr<EnvelopeReader>> EnvelopeReader::OpenForTesting(ByteSource* in,
                                                                       EVP_PKEY* recipient_private_key,
                                                                       uint64_t first_counter) {
  char start[envelope::kMagic.size() + kLengthSize];
  Result<size_t> got = ReadUpTo(in, start, sizeof start);
  if (!got.ok()) return got.status().WithContext("sealed envelope");
  if (*got < envelope::kMagic.size() || std::string_view(start, envelope::kMagic.size()) != envelope::kMagic) {
    return Corrupted("not a sealed envelope (no LNKSEAL1 magic)");
  }
  if (*got < sizeof start) return Corrupted("cut short in the header length");
  const uint32_t header_size = GetBigEndian32(start + envelope::kMagic.size());
  if (header_size > envelope::kMaxHeaderSize) return Corrupted("header length over 4096 bytes");
  if (header_size < hpke::kEncSize + kTagSize) return Corrupted("header too short");
  std::string header(header_size, '\0');
  got = ReadUpTo(in, header.data(), header.size());
  if (!got.ok()) return got.status().WithContext("sealed envelope");
  if (*got < header.size()) return Corrupted("cut short in the header");

  std::string_view enc = std::string_view(header).substr(0, hpke::kEncSize);
  std::string_view sealed_key = std::string_view(header).substr(hpke::kEncSize);
  Result<std::string> stream_key = hpke::OpenBase(enc, recipient_private_key, envelope::kEnvelopeInfo, "",
                                                  sealed_key, envelope::kHeaderAead);
  if (!stream_key.ok()) {
    if (stream_key.status().code() == Code::kCorruption || stream_key.status().code() == Code::kInvalidArgument) {
      return Corrupted("the header does not open with this key (sealed to another key, or altered)");
    }
    return stream_key.status().WithContext("sealed envelope");
  }
  if (stream_key->size() != envelope::kStreamKeySize) {
    OPENSSL_cleanse(stream_key->data(), stream_key->size());
    return Corrupted("the stream key is not 32 bytes");
  }
  Result<AeadCipher> cipher = AeadCipher::Create(envelope::kRecordAead, *stream_key);
  OPENSSL_cleanse(stream_key->data(), stream_key->size());
  if (!cipher.ok()) return cipher.status().WithContext("sealed envelope");
  return std::unique_ptr<EnvelopeReader>(new EnvelopeReader(in, std::move(cipher).value(), first_counter));
}

Status EnvelopeReader::Fail(const std::string& reason) {
  plaintext_.clear();
  offset_ = 0;
  error_ = Corrupted(reason);
  return error_;
}

Result<size_t> EnvelopeReader::Read(char* buffer, size_t size) {
  if (!error_.ok()) return error_;
  if (size == 0) return Status::InvalidArgument("sealed envelope", "a read of 0 bytes");  // 0 means the end
  while (offset_ == plaintext_.size()) {
    if (finished_) return size_t{0};
    CAPSULE_RETURN_IF_ERROR(ReadRecord());
  }
  size_t n = std::min(size, plaintext_.size() - offset_);
  std::memcpy(buffer, plaintext_.data() + offset_, n);
  offset_ += n;
  return n;
}

Result<std::string_view> EnvelopeReader::NextPiece() {
  if (!error_.ok()) return error_;
  while (offset_ == plaintext_.size()) {
    if (finished_) return std::string_view();
    CAPSULE_RETURN_IF_ERROR(ReadRecord());
  }
  std::string_view piece(plaintext_.data() + offset_, plaintext_.size() - offset_);
  offset_ = plaintext_.size();
  return piece;
}

Status EnvelopeReader::ReadRecord() {
  const std::string record = "record " + std::to_string(counter_);
  char length_bytes[kLengthSize];
  Result<size_t> got = ReadUpTo(in_, length_bytes, sizeof length_bytes);
  if (!got.ok()) return error_ = got.status().WithContext("sealed envelope");
  if (*got == 0) return Fail("the final record is missing (cut short)");
  if (*got < sizeof length_bytes) return Fail(record + ": cut short in its length");
  const uint32_t length = GetBigEndian32(length_bytes);
  if (length > kMaxRecordSize) return Fail(record + ": length over 65536");
  if (length > 0 && counter_ == UINT64_MAX) return Fail(record + ": the record counter would overflow");

  sealed_.resize(length + kTagSize);
  got = ReadUpTo(in_, sealed_.data(), sealed_.size());
  if (!got.ok()) return error_ = got.status().WithContext("sealed envelope");
  if (*got < sealed_.size()) return Fail(record + ": cut short");
  RecordIv iv(counter_, length);
  plaintext_.resize(length);
  offset_ = 0;
  if (!cipher_.Open(iv.Nonce(), iv.Aad(), sealed_, plaintext_.data()).ok()) {
    return Fail(record + ": the tag does not verify");
  }
  if (length > 0) {
    ++counter_;
    return Status::Ok();
  }
  char extra;
  got = ReadUpTo(in_, &extra, 1);
  if (!got.ok()) return error_ = got.status().WithContext("sealed envelope");
  if (*got != 0) return Fail("bytes after the final record");
  finished_ = true;
  return Status::Ok();
}

}  // namespace capsule
