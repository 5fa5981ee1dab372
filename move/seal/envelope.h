// The sealed envelope (LNKSEAL1): a stream of bytes sealed to one X25519 public key, written
// and read in constant memory (one record, at most 64 KiB, at a time). See envelope_format.h
// for the bytes and man/capsule-envelope.5 for the format in words.
//
// EnvelopeWriter is a ByteSink that seals what is written to it into another ByteSink;
// EnvelopeReader is a ByteSource that opens an envelope read from another ByteSource. Neither
// owns the stream it wraps.
//
// Thread-safety: thread-compatible; one writer or reader per thread, or external locking.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "capsule/base/byte_stream.h"
#include "capsule/base/openssl_handles.h"
#include "capsule/base/status.h"
#include "move/seal/aead.h"

namespace capsule {

// Seals into `out`: the magic and the header at Create, a record each time 64 KiB have been
// written, and the last partial record and the final record at Close, which then closes `out`.
// Sticky error: after any failure (a record `out` refused, a record counter that would
// overflow) every later Write and Close fails, and the envelope is unfinished, so a reader
// refuses it.
class EnvelopeWriter : public ByteSink {
 public:
  // `recipient_public_key`: 32 raw bytes (X25519). Writes the magic and the header to `out`.
  static Result<std::unique_ptr<EnvelopeWriter>> Create(ByteSink* out, std::string_view recipient_public_key);
  // Tests only: number the first record `first_counter` instead of 0.
  static Result<std::unique_ptr<EnvelopeWriter>> CreateForTesting(ByteSink* out,
                                                                  std::string_view recipient_public_key,
                                                                  uint64_t first_counter);

  Status Write(std::string_view data) override;
  // Seals what is buffered, writes the final record, closes `out`. The writer is spent after.
  Status Close() override;

 private:
  EnvelopeWriter(ByteSink* out, AeadCipher cipher, uint64_t first_counter);
  Status EmitRecord(std::string_view plaintext);
  Status Fail(Status status);

  ByteSink* out_;
  AeadCipher cipher_;
  uint64_t counter_;
  std::string pending_;  // plaintext not yet sealed, less than one record
  std::string record_;   // the record being written
  Status error_;         // sticky: the first failure
  bool closed_ = false;
};

// Opens an envelope read from `in`. Read returns plaintext only after its record's tag has
// verified, and returns 0 (the end) only once the final record has verified and `in` has
// ended right after it. Everything else a sealed stream can do wrong is Corruption, starting
// "sealed envelope: corrupted or tampered", and sticks: every later Read returns it.
class EnvelopeReader : public ByteSource {
 public:
  // Reads and opens the header: a wrong magic, a header over 4096 bytes, or a header that does
  // not open with `recipient_private_key` (an X25519 key) is Corruption.
  static Result<std::unique_ptr<EnvelopeReader>> Open(ByteSource* in, EVP_PKEY* recipient_private_key);
  // Tests only: expect the first record to be numbered `first_counter`.
  static Result<std::unique_ptr<EnvelopeReader>> OpenForTesting(ByteSource* in, EVP_PKEY* recipient_private_key,
                                                                uint64_t first_counter);

  // REQUIRES: size > 0 (a read of 0 bytes is InvalidArgument, since 0 means the end).
  Result<size_t> Read(char* buffer, size_t size) override;

  // The rest of the current record's verified plaintext (the next record's once it is all
  // read), without copying it: a view into the reader, valid until its next call; empty at
  // the end. Read gives the same bytes, copied.
  Result<std::string_view> NextPiece();

 private:
  EnvelopeReader(ByteSource* in, AeadCipher cipher, uint64_t first_counter);
  Status ReadRecord();  // the next record into plaintext_, or the end
  Status Fail(const std::string& reason);

  ByteSource* in_;
  AeadCipher cipher_;
  uint64_t counter_;
  std::string sealed_;     // the record being read: ciphertext || tag
  std::string plaintext_;  // the last verified record
  size_t offset_ = 0;      // how much of plaintext_ Read has returned
  Status error_;           // sticky: the first failure
  bool finished_ = false;  // the final record verified and nothing followed
};

}  // namespace capsule
