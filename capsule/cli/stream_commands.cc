// capsule stream pack DIR --phase P [--have FILE] [--move ID] [--seal-to PUBHEX] -o FILE
// capsule stream unpack FILE DIR [--open-with KEYFILE]
// capsule stream have DIR
#include "capsule/cli/cli.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <iostream>
#include <memory>
#include <optional>

#include "capsule/base/file_io.h"
#include "capsule/base/output_file.h"
#include "capsule/base/read_ahead.h"
#include "capsule/base/sha256.h"
#include "capsule/format/enclosing_capsule.h"
#include "capsule/format/keys.h"
#include "move/seal/envelope.h"
#include "move/seal/envelope_format.h"
#include "move/stream/plan.h"
#include "move/stream/unpack.h"
#include "move/stream/writer.h"

namespace capsule::cli {

namespace {

// The largest --have read, as a sidecar takes one over the wire (a million files' is a
// hundred megabytes).
constexpr uint64_t kMaxHaveBytes = uint64_t{1} << 30;

struct PackArgs {
  std::string dir, phase, have, move, seal_to, out;
  bool accept_edits = false;
};

Status Pack(const PackArgs& args, move::PackStats* stats, Progress* progress) {
  move::PackOptions options;
  options.progress = progress;
  CAPSULE_ASSIGN_OR_RETURN(options.phase, move::ParsePhase(args.phase));
  if (!args.move.empty()) options.move_id = args.move;
  if (!args.have.empty()) {
    CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadFileBounded(args.have, kMaxHaveBytes, "a have"));
    CAPSULE_ASSIGN_OR_RETURN(options.have, move::ParseHave(text));
  }
  if (options.phase == move::Phase::kSwitch && args.seal_to.empty()) {
    return Status::InvalidArgument("switch", "a switch is always sealed: give --pubkey FILE|HEX");
  }
  CAPSULE_ASSIGN_OR_RETURN(OutputFile out, OutputFile::Open(args.out, 0644));
  ByteSink* sink = out.sink();
  std::unique_ptr<EnvelopeWriter> envelope;
  if (!args.seal_to.empty()) {
    CAPSULE_ASSIGN_OR_RETURN(std::string hex, PublicKeyArgument(args.seal_to));
    Result<std::string> key = HexDecode(hex, "--pubkey");
    if (!key.ok() || key->size() != 32) {
      return Status::InvalidArgument("--pubkey", "not an X25519 public key (64 hex digits)");
    }
    CAPSULE_ASSIGN_OR_RETURN(envelope, EnvelopeWriter::Create(out.sink(), *key));
    sink = envelope.get();
  }
  CAPSULE_ASSIGN_OR_RETURN(std::string dir, ResolveCapsule(args.dir));
  CAPSULE_RETURN_IF_ERROR(move::PackCapsule(dir, options, sink, stats));
  return out.Commit();
}

int RunPack(const PackArgs& args) {
  move::PackStats stats;
  if (args.out == "-") StandardOutputIsData();
  // Nothing is made before DIR is known to be a capsule and -o to lie outside every capsule.
  Status checked = args.move.empty() ? Status::Ok() : move::CheckMoveId(args.move).WithContext("--move");
  if (checked.ok()) checked = CheckOutsideCapsules("-o", args.out);
  Result<std::string> dir = ResolveCapsule(args.dir);
  if (checked.ok()) checked = dir.status();
  if (checked.ok() && args.accept_edits) checked = AcceptEditsFirst(*dir);
  if (!checked.ok()) return Fail(checked);
  std::unique_ptr<ProgressReporter> progress = MakeProgress();
  Status status = Pack(args, &stats, progress.get());
  if (!status.ok()) return progress.reset(), Fail(status);
  if (progress) progress->Finish();
  if (JsonOutput() && args.out != "-") {
    return PrintJson({{"phase", args.phase},
                      {"move", stats.move_id},
                      {"files_sent", stats.files_sent},
                      {"file_bytes_sent", stats.file_bytes_sent},
                      {"files_skipped", stats.files_skipped},
                      {"removed", stats.removed}});
  }
  // On standard output the stream is the output: the report goes to standard error.
  (args.out == "-" ? std::cerr : std::cout) << "packed " << args.phase << " of move " << stats.move_id << ": " << stats.files_sent << " files ("
            << stats.file_bytes_sent << " bytes) sent, " << stats.files_skipped << " held the same by the receiver, "
            << stats.removed << " removed\n";
  return kExitOk;
}

struct UnpackArgs {
  std::string file, dir, open_with;
};

Status UnpackFile(const UnpackArgs& args, move::UnpackStats* stats, Progress* progress) {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(args.file, O_RDONLY));
  if (progress != nullptr) {
    // The stream's bytes read, of the file's size; what it holds is not known beforehand.
    struct stat st;
    progress->Begin("unpack", ::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : 0, 0, "");
  }
  char magic[8] = {};
  static_assert(sizeof magic == envelope::kMagic.size());
  CAPSULE_ASSIGN_OR_RETURN(size_t n, ReadAt(fd.get(), magic, sizeof magic, 0, args.file));
  bool sealed = std::string_view(magic, n) == envelope::kMagic;
  FdSource raw_source(fd.get(), args.file);
  // A file is read ahead on a thread of its own, overlapping the writing of what it holds.
  std::optional<ReadAhead> ahead;
  if (CanReadAhead(fd.get())) ahead.emplace(&raw_source);
  CountingSource file_source(ahead ? static_cast<ByteSource*>(&*ahead) : &raw_source, progress);
  ByteSource* source = &file_source;
  std::unique_ptr<EnvelopeReader> envelope;
  EvpPkeyPtr key;
  if (sealed) {
    if (args.open_with.empty()) return Status::InvalidArgument("", "the stream is sealed: give --key FILE");
    CAPSULE_ASSIGN_OR_RETURN(key, LoadPrivateKey(args.open_with, KeyType::kX25519));
    CAPSULE_ASSIGN_OR_RETURN(envelope, EnvelopeReader::Open(&file_source, key.get()));
    source = envelope.get();
  }
  move::UnpackOptions options;
  options.sealed = sealed;
  return move::UnpackStream(source, args.dir, options, stats);
}

Status Unpack(const UnpackArgs& given, move::UnpackStats* stats, Progress* progress) {
  // -: the stream on standard input, read from a private copy (its first bytes are read twice).
  CAPSULE_ASSIGN_OR_RETURN(std::unique_ptr<InputFile> input, OpenInput(given.file));
  UnpackArgs args = given;
  args.file = input->path();
  return input->Shown(UnpackFile(args, stats, progress));
}

// DIR receives a stream when it is absent (a first copy), an empty folder, or a capsule folder
// (a later phase); any other folder is refused before the stream is read.
Status CheckReceivingFolder(const std::string& dir) {
  CAPSULE_RETURN_IF_ERROR(CheckOutsideCapsules("", dir));
  if (!PathExists(dir)) return Status::Ok();
  Status capsule = CheckCapsuleFolder(dir);
  if (capsule.code() != Code::kInvalidArgument) return capsule;
  std::vector<std::string> others;
  Result<std::vector<std::string>> files = ListFileNames(dir, &others);
  if (files.ok() && files->empty() && others.empty()) return Status::Ok();
  return capsule;
}

int RunUnpack(const UnpackArgs& args) {
  if (Status receiving = CheckReceivingFolder(args.dir); !receiving.ok()) return Fail(receiving);
  move::UnpackStats stats;
  std::unique_ptr<ProgressReporter> progress = MakeProgress();
  Status status = Unpack(args, &stats, progress.get());
  if (!status.ok()) return progress.reset(), Fail(status.WithContext(args.file == "-" ? "standard input" : args.file));
  if (progress) progress->Finish();
  if (JsonOutput()) {
    return PrintJson({{"phase", move::PhaseName(stats.manifest.phase)},
                      {"move", stats.manifest.move},
                      {"dir", args.dir},
                      {"files_received", stats.files_received},
                      {"file_bytes", stats.file_bytes},
                      {"removed", stats.removed},
                      {"ignored", stats.ignored}});
  }
  std::cout << "unpacked " << move::PhaseName(stats.manifest.phase) << " of move " << stats.manifest.move << " into "
            << args.dir << ": " << stats.files_received << " files (" << stats.file_bytes << " bytes), "
            << stats.removed << " removed" << (stats.ignored ? ", " + std::to_string(stats.ignored) + " ignored" : "")
            << "\n";
  return kExitOk;
}

struct HaveArgs {
  std::string dir;
};

int RunHave(const HaveArgs& args) {
  Result<std::string> dir = ResolveCapsule(args.dir);
  if (!dir.ok()) return Fail(dir.status());
  Result<move::HaveMap> have = move::HaveOfCapsule(*dir);
  if (!have.ok()) return Fail(have.status());
  Result<std::string> text = move::HaveToJson(*have);
  if (!text.ok()) return Fail(text.status());
  std::cout << *text << "\n";
  return kExitOk;
}

}  // namespace

void RegisterStreamCommands(CLI::App& app, int* exit_code) {
  CLI::App* stream = app.add_subcommand("stream", "The Move Stream (format 4): pack, unpack, have");
  stream->require_subcommand(1);
  stream->footer("The format: man capsule-protocol.7");

  auto pack_args = std::make_shared<PackArgs>();
  CLI::App* pack = stream->add_subcommand("pack", "Write a Move Stream of the capsule at DIR");
  pack->add_option("DIR", pack_args->dir, "Capsule folder or its mountpoint")->required();
  pack->add_option("--phase", pack_args->phase, "copy, switch or files")
      ->required()
      ->check(OneOf({"copy", "switch", "files"}));
  pack->add_option("--have", pack_args->have, "The receiver's have (JSON {path: sha256}): files it holds the same are skipped");
  pack->add_option("--move", pack_args->move, "Move id (32 lowercase hex digits); a switch must give its copy's");
  AddPubkeyOption(pack, &pack_args->seal_to, "Seal the stream to this X25519 public key (required for a switch)",
                  {"--seal-to"});
  pack->add_flag("--accept-edits", pack_args->accept_edits,
                 "Take files edited behind the manifest on purpose first, as capsule accept does (journal: edits_accepted)");
  pack->add_option("-o,--output", pack_args->out,
                   "Stream file to write (replaced whole; not inside a capsule), a FIFO or device (written in place), or - "
                   "for standard output")
      ->required();
  AddJsonFlag(pack, "Print the figures as JSON (not with -o -); an error as JSON");
  AddProgressFlag(pack);
  pack->callback([pack_args, exit_code] { *exit_code = RunPack(*pack_args); });

  auto unpack_args = std::make_shared<UnpackArgs>();
  CLI::App* unpack = stream->add_subcommand("unpack", "Read a Move Stream into the capsule at DIR, refusing it whole on any fault");
  unpack->add_option("FILE", unpack_args->file, "Stream file (sealed or not), or - for standard input")->required();
  unpack->add_option("DIR", unpack_args->dir, "Capsule folder to receive into (absent for a first copy; not inside another capsule)")->required();
  AddKeyOption(unpack, &unpack_args->open_with, "X25519 private key file to open a sealed stream", {"--open-with"});
  AddJsonFlag(unpack);
  AddProgressFlag(unpack);
  unpack->callback([unpack_args, exit_code] { *exit_code = RunUnpack(*unpack_args); });

  auto have_args = std::make_shared<HaveArgs>();
  CLI::App* have = stream->add_subcommand("have", "Print what the capsule at DIR holds, as a have for pack --have");
  have->add_option("DIR", have_args->dir, "Capsule folder or its mountpoint")->required();
  AddJsonFlag(have, "Accepted for uniformity (the have is JSON); an error as JSON");
  have->callback([have_args, exit_code] { *exit_code = RunHave(*have_args); });
}

}  // namespace capsule::cli
