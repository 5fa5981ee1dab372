// capsule seal --to PUBHEX, capsule open --key KEYFILE.
#include "capsule/cli/cli.h"

#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "capsule/base/byte_stream.h"
#include "capsule/base/read_ahead.h"
#include "capsule/base/sha256.h"
#include "capsule/format/keys.h"
#include "move/seal/envelope.h"
#include "move/seal/envelope_format.h"

namespace capsule::cli {

namespace {

constexpr size_t kCopyBufferSize = envelope::kMaxRecordSize;

// Copies `in` to `out` until the end; `copied` counts what reached `out`.
Status Copy(ByteSource* in, ByteSink* out, uint64_t* copied) {
  std::vector<char> buffer(kCopyBufferSize);
  for (;;) {
    CAPSULE_ASSIGN_OR_RETURN(size_t n, in->Read(buffer.data(), buffer.size()));
    if (n == 0) return Status::Ok();
    CAPSULE_RETURN_IF_ERROR(out->Write(std::string_view(buffer.data(), n)));
    *copied += n;
  }
}

// Standard input is read ahead on a thread of its own when it is a file (CanReadAhead), so
// that reading it overlaps sealing or opening; anything else (a pipe, a socket) is read as it
// comes.

// Copies from a source read ahead, without copying each block again.
Status CopyAhead(ReadAhead* in, ByteSink* out, uint64_t* copied) {
  for (;;) {
    CAPSULE_ASSIGN_OR_RETURN(std::string_view block, in->Next());
    if (block.empty()) return Status::Ok();
    CAPSULE_RETURN_IF_ERROR(out->Write(block));
    *copied += block.size();
  }
}

struct SealArgs {
  std::string to;
};

int RunSeal(const SealArgs& args) {
  if (args.to.empty()) return UsageFailure("--pubkey is required", 0, nullptr);
  Result<std::string> hex = PublicKeyArgument(args.to);
  if (!hex.ok()) return Fail(hex.status());
  Result<std::string> public_key = HexDecode(*hex, "--pubkey");
  if (!public_key.ok() || public_key->size() != 32) {
    return Fail("--pubkey: not an X25519 public key (64 hex digits, as capsule keygen --type x25519 prints)");
  }
  FdSource in(STDIN_FILENO, "standard input");
  FdSink out(STDOUT_FILENO, "standard output");
  Result<std::unique_ptr<EnvelopeWriter>> writer = EnvelopeWriter::Create(&out, *public_key);
  if (!writer.ok()) return Fail(writer.status());
  uint64_t copied = 0;
  Status status;
  if (CanReadAhead(STDIN_FILENO)) {
    ReadAhead ahead(&in);
    status = CopyAhead(&ahead, writer->get(), &copied);
  } else {
    status = Copy(&in, writer->get(), &copied);
  }
  if (status.ok()) status = (*writer)->Close();
  if (!status.ok()) return Fail(status.WithContext("seal"));
  return kExitOk;
}

struct OpenArgs {
  std::string key;
};

int RunOpen(const OpenArgs& args) {
  Result<EvpPkeyPtr> key = LoadPrivateKey(args.key, KeyType::kX25519);
  if (!key.ok()) return Fail(key.status());
  FdSource stdin_source(STDIN_FILENO, "standard input");
  std::optional<ReadAhead> ahead;
  if (CanReadAhead(STDIN_FILENO)) ahead.emplace(&stdin_source);
  ByteSource* in = ahead ? static_cast<ByteSource*>(&*ahead) : &stdin_source;
  FdSink out(STDOUT_FILENO, "standard output");
  Result<std::unique_ptr<EnvelopeReader>> reader = EnvelopeReader::Open(in, key->get());
  if (!reader.ok()) return Fail(reader.status().WithContext("open"));
  // Each record's plaintext goes out from where it was opened, not copied again.
  uint64_t copied = 0;
  Status status = [&]() -> Status {
    for (;;) {
      CAPSULE_ASSIGN_OR_RETURN(std::string_view piece, (*reader)->NextPiece());
      if (piece.empty()) return Status::Ok();
      CAPSULE_RETURN_IF_ERROR(out.Write(piece));
      copied += piece.size();
    }
  }();
  if (!status.ok()) {
    Fail(status.WithContext("open"));
    if (copied > 0) {
      return Fail("open: the " + std::to_string(copied) +
                  " bytes already written to standard output are authentic but incomplete; discard them");
    }
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace

void RegisterSealCommands(CLI::App& app, int* exit_code) {
  auto seal_args = std::make_shared<SealArgs>();
  CLI::App* seal = app.add_subcommand(
      "seal", "Seal standard input to an X25519 public key, as a sealed envelope (LNKSEAL1) on standard output");
  AddPubkeyOption(seal, &seal_args->to, "The recipient's X25519 public key (capsule keygen --type x25519); required",
                  {"--to"});
  seal->footer("The envelope format: man capsule-envelope.5");
  seal->callback([seal_args, exit_code] { *exit_code = RunSeal(*seal_args); });

  auto open_args = std::make_shared<OpenArgs>();
  CLI::App* open = app.add_subcommand(
      "open", "Open a sealed envelope from standard input with an X25519 private key; plaintext on standard output");
  AddKeyOption(open, &open_args->key, "X25519 private key file (PEM), as capsule keygen --type x25519 wrote it");
  open->get_option("--key")->required();
  open->footer(
      "Plaintext is written one verified 64 KiB record at a time. On any fault (wrong key, tampering, a\n"
      "missing final record, trailing bytes) open exits 1; what it already wrote to standard output is\n"
      "authentic but incomplete, so keep it only if open exits 0. See man capsule-envelope.5.");
  open->callback([open_args, exit_code] { *exit_code = RunOpen(*open_args); });
}

}  // namespace capsule::cli
