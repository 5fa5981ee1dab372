// capsule init, verify, export, import, keygen.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <iostream>
#include <memory>

#include "capsule/base/canonical_json.h"
#include "capsule/base/dir_fd.h"
#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/cli/cli.h"
#include "capsule/format/create.h"
#include "capsule/format/export.h"
#include "capsule/format/import.h"
#include "capsule/format/holder.h"
#include "capsule/format/keys.h"
#include "capsule/format/layout.h"
#include "capsule/format/manifest.h"
#include "capsule/format/mount_lock.h"
#include "capsule/format/trust.h"
#include "capsule/format/verify.h"
#include "capsule/format/workspace.h"
#include "journal/check.h"
#include "journal/owned/vector_index.h"

namespace capsule::cli {

namespace {

struct InitArgs {
  std::string dir, id, name, owner, workspace;
  FleetFlags fleet;
};

int RunInit(const InitArgs& args) {
  if (Status outside = CheckOutsideCapsules("", args.dir); !outside.ok()) return Fail(outside);
  if (!args.workspace.empty()) {
    if (Status there = CheckExists(args.workspace); !there.ok()) return Fail(there.WithContext("--workspace"));
  }
  CreateOptions options;
  options.agent.id = args.id;
  options.agent.name = args.name;
  if (!args.owner.empty()) options.agent.owner = args.owner;
  if (!args.workspace.empty()) options.workspace_source = args.workspace;
  std::unique_ptr<ProgressReporter> progress = MakeProgress();
  options.progress = progress.get();
  uint64_t fleet_epoch = 0;
  if (Status claimed = ClaimInFleet(args.fleet, args.id, false, &fleet_epoch); !claimed.ok()) return Fail(claimed);
  Status status = CreateCapsule(args.dir, options);
  if (!status.ok()) return progress.reset(), Fail(status);
  if (progress) progress->Finish();
  if (JsonOutput()) return PrintJson({{"created", args.dir}, {"agent", args.id}, {"epoch", 1}});
  std::cout << "created " << args.dir << " (agent " << args.id << ", epoch 1, held here)\n";
  return kExitOk;
}

struct VerifyArgs {
  std::string path, pubkey;
};

int RunVerify(const VerifyArgs& args) {
  VerifyOptions options;
  options.check_journal = journal::CheckJournalAt;
  if (!args.pubkey.empty()) {
    Result<std::string> key = PublicKeyArgument(args.pubkey);
    if (!key.ok()) return Fail(key.status());
    options.public_key_hex = *key;
  }
  // -: an exported tar on standard input.
  Result<std::unique_ptr<InputFile>> input = OpenInput(args.path);
  if (!input.ok()) return Fail(input.status());
  Result<std::string> path = args.path == "-" ? (*input)->path() : ResolveCapsule(args.path);
  if (!path.ok()) return Fail(path.status());
  struct stat st;
  if (::stat(path->c_str(), &st) != 0) return Fail(Status::IOError(*path, errno));
  if (S_ISDIR(st.st_mode)) {  // a capsulefs finishing its unmount writes its last checkpoint
    Status settled = WaitForUnmountToFinish(*path);
    if (!settled.ok()) return Fail(settled);
  }
  std::unique_ptr<ProgressReporter> progress = MakeProgress();
  options.progress = progress.get();
  // A folder a mount serves: its last checkpoint is checked, and what the mount wrote since is
  // pending, not damage. A checkpoint that lands during the check (the manifest changed) has it
  // checked again.
  const bool mounted = S_ISDIR(st.st_mode) && HeldByDriver(*path);
  auto manifest_now = [&] {
    Result<std::string> text = ReadFileBeneath(*path, kManifestPath);
    return text.ok() ? Sha256Hex(*text) : std::string();
  };
  Result<VerifyReport> report = Status::FailedPrecondition(*path, "not verified yet");  // set by the first pass
  for (int attempt = 0;; ++attempt) {
    const std::string before = mounted ? manifest_now() : "";
    report = S_ISDIR(st.st_mode) ? VerifyFolder(*path, options) : VerifyTar(*path, options);
    if (!report.ok() || !mounted) break;
    Result<DirFd> folder = DirFd::OpenGiven(*path);
    if (!folder.ok()) return progress.reset(), Fail(folder.status());
    SetAsidePendingWrites(*folder, &*report);
    if (attempt == 2 || manifest_now() == before) break;
  }
  if (!report.ok()) return progress.reset(), Fail((*input)->Shown(report.status()));
  if (progress) progress->Finish();
  if (S_ISDIR(st.st_mode)) {  // the search index this machine derived from the journal
    for (std::string& problem : owned::CheckVectorIndexes(*path)) report->problems.push_back(std::move(problem));
  }
  for (std::string& problem : report->problems) problem = (*input)->Shown(problem);
  Json out = {{"ok", report->ok()}, {"files", report->files_checked}, {"problems", report->problems},
              {"warnings", report->warnings}};
  if (report->signer) out["signer"] = *report->signer;
  if (mounted) {
    out["checked"] = "last checkpoint";
    out["pending"] = report->pending;
  }
  if (JsonOutput()) {
    if (report->ok()) PrintJson(out);
  } else {
    if (mounted) {
      std::cout << "checked the last checkpoint: a capsulefs serves " << *path << "; what it wrote since is "
                << "checked at its next checkpoint (" << report->pending.size() << " pending)\n";
    }
    for (const std::string& problem : report->problems) std::cout << problem << "\n";
    for (const std::string& pending : report->pending) std::cout << "pending: " << pending << "\n";
    for (const std::string& warning : report->warnings) std::cout << "warning: " << warning << "\n";
    if (report->ok()) {
      if (report->signer) std::cout << "signature: good, made by " << *report->signer << "\n";
      std::cout << "ok: " << report->files_checked << " files\n";
    }
  }
  if (!report->ok()) {
    const std::string shown = args.path == "-" ? "standard input" : args.path;
    return Fail(Status::Corruption(shown, "does not verify (" + std::to_string(report->problems.size()) + " problem" +
                                              (report->problems.size() == 1 ? "" : "s") + ")"),
                out);
  }
  return kExitOk;
}

struct ExportArgs {
  std::string dir, out, sign, format = "tar";
};

int RunExport(const ExportArgs& args) {
  if (args.format == "af") {
    if (!args.sign.empty()) return Fail(Status::InvalidArgument("--sign", "signs a tar export, not an agent file"));
    return RunAgentFileExport(args.dir, args.out);
  }
  ExportOptions options;
  if (!args.sign.empty()) options.signing_key_path = args.sign;
  if (args.out == "-") StandardOutputIsData();
  if (Status outside = CheckOutsideCapsules("-o", args.out); !outside.ok()) return Fail(outside);
  Result<std::string> dir = ResolveCapsule(args.dir);
  if (!dir.ok()) return Fail(dir.status());
  std::unique_ptr<ProgressReporter> progress = MakeProgress();
  options.progress = progress.get();
  Status status = WaitForUnmountToFinish(*dir);
  if (status.ok()) status = ExportCapsule(*dir, args.out, options);
  if (!status.ok()) return progress.reset(), Fail(status);
  if (progress) progress->Finish();
  if (JsonOutput() && args.out != "-") {
    return PrintJson({{"exported", args.dir}, {"output", args.out}, {"signed", !args.sign.empty()}});
  }
  // On standard output the tar is the output: the report goes to standard error.
  (args.out == "-" ? std::cerr : std::cout) << "exported " << args.dir << " to "
                                            << (args.out == "-" ? "standard output" : args.out)
                                            << (args.sign.empty() ? "" : " (signed)") << "\n";
  return kExitOk;
}

struct GcArgs {
  std::string dir;
};

// Removes deleted content from a capsule folder no mount serves (a mount does it at each
// checkpoint): the blobs no file of the snapshot names leave the manifest, then the disk.
Status CollectDeletedContent(const std::string& dir, size_t* removed, uint64_t* bytes) {
  Result<UniqueFd> lock = LockForMount(dir);
  if (!lock.ok()) {
    if (lock.status().code() != Code::kAlreadyExists) return lock.status();
    return Status::FailedPrecondition(dir, "is mounted: the mount removes deleted content at each checkpoint "
                                           "(freeze, unmount)");
  }
  CAPSULE_RETURN_IF_ERROR(CheckHeldForWrite(dir));
  CAPSULE_ASSIGN_OR_RETURN(Snapshot snapshot, Snapshot::Load(dir));
  CAPSULE_ASSIGN_OR_RETURN(Manifest manifest, Manifest::Load(dir));
  CAPSULE_ASSIGN_OR_RETURN(std::vector<std::string> unreferenced, UnreferencedBlobs(dir, snapshot));
  for (const std::string& blob : unreferenced) {
    auto it = manifest.files.find(blob);
    if (it != manifest.files.end()) {
      *bytes += it->second.size;
      manifest.files.erase(it);
    }
  }
  CAPSULE_RETURN_IF_ERROR(manifest.Save(dir));
  CAPSULE_RETURN_IF_ERROR(RemoveBlobs(dir, unreferenced));
  *removed = unreferenced.size();
  return Status::Ok();
}

int RunGc(const GcArgs& args) {
  size_t removed = 0;
  uint64_t bytes = 0;
  Result<std::string> dir = ResolveCapsule(args.dir);
  if (!dir.ok()) return Fail(dir.status());
  if (Status done = CollectDeletedContent(*dir, &removed, &bytes); !done.ok()) return Fail(done);
  if (JsonOutput()) return PrintJson({{"dir", args.dir}, {"removed", removed}, {"bytes", bytes}});
  std::cout << "removed " << removed << " unreferenced blob" << (removed == 1 ? "" : "s") << " (" << bytes
            << " bytes) from " << args.dir << "\n";
  return kExitOk;
}

struct AdoptArgs {
  std::string dir;
  FleetFlags fleet;
};

int RunAdopt(const AdoptArgs& args) {
  Result<std::string> dir = ResolveCapsule(args.dir);
  if (!dir.ok()) return Fail(dir.status());
  if (Result<UniqueFd> lock = LockForMount(*dir); !lock.ok()) {
    if (lock.status().code() != Code::kAlreadyExists) return Fail(lock.status());
    return Fail(Status::FailedPrecondition(args.dir, "is mounted; unmount it first"));
  }
  uint64_t fleet_epoch = 0;
  if (Status claimed = ClaimInFleet(args.fleet, *dir, true, &fleet_epoch); !claimed.ok()) return Fail(claimed);
  Result<HolderRecord> adopted = AdoptCopy(*dir);
  if (adopted.ok() && fleet_epoch > adopted->epoch) adopted = HoldAtEpoch(*dir, fleet_epoch);
  if (!adopted.ok()) return Fail(adopted.status());
  if (JsonOutput()) {
    return PrintJson({{"adopted", args.dir},
                      {"machine", adopted->machine},
                      {"state", HolderStateName(adopted->state)},
                      {"epoch", adopted->epoch}});
  }
  std::cout << "adopted " << args.dir << ": machine " << adopted->machine << ", " << HolderStateName(adopted->state)
            << " at epoch " << adopted->epoch << " (the folder it was copied from keeps its own machine id)\n";
  return kExitOk;
}

struct ImportArgs {
  std::string tar, dir, from, agent;
  bool adopt = false;
};

int RunImport(const ImportArgs& args) {
  if (IsForeignImport(args.tar, args.from)) {
    if (args.adopt) return Fail(Status::InvalidArgument("--adopt", "is for an exported tar; an imported agent is held here"));
    return RunForeignImport(args.tar, args.dir, args.from, args.agent);
  }
  if (!args.agent.empty()) return Fail(Status::InvalidArgument("--agent", "picks an agent of an agent file, not of a tar"));
  if (args.tar != "-") {
    if (Status there = CheckExists(args.tar); !there.ok()) return Fail(there);
  }
  if (Status outside = CheckOutsideCapsules("", args.dir); !outside.ok()) return Fail(outside);
  Result<std::unique_ptr<InputFile>> input = OpenInput(args.tar);  // -: the tar on standard input
  if (!input.ok()) return Fail(input.status());
  const std::string shown = args.tar == "-" ? "standard input" : args.tar;
  ImportOptions options;
  options.adopt = args.adopt;
  options.verify.check_journal = journal::CheckJournalAt;
  std::unique_ptr<ProgressReporter> progress = MakeProgress();
  options.verify.progress = progress.get();
  std::vector<std::string> problems;
  Status status = (*input)->Shown(ImportCapsule((*input)->path(), args.dir, options, &problems));
  if (!status.ok()) {
    progress.reset();
    for (std::string& problem : problems) problem = (*input)->Shown(problem);
    for (const std::string& problem : problems) std::cerr << "capsule: " << shown << ": " << problem << "\n";
    return Fail(status, Json{{"problems", problems}});
  }
  if (progress) progress->Finish();
  if (JsonOutput()) return PrintJson({{"imported", args.tar}, {"dir", args.dir}, {"adopted", args.adopt}});
  std::cout << "imported " << shown << " to " << args.dir
            << (args.adopt ? " (adopted: held here at a fresh epoch)" : " (read-only: not held here)") << "\n";
  return kExitOk;
}

struct KeygenArgs {
  std::string type, out;
};

// -o -: the private key on standard output, never on a terminal; the public key, the report,
// on standard error.
int KeygenToStandardOutput(KeyType type) {
  StandardOutputIsData();
  if (::isatty(STDOUT_FILENO)) {
    return Fail(Status::InvalidArgument("keygen -o -", "standard output is a terminal: a private key is never shown "
                                                        "on a screen (redirect it, or give a file)"));
  }
  Result<GeneratedKey> key = GenerateKey(type);
  if (!key.ok()) return Fail(key.status());
  std::cout << key->private_pem << std::flush;
  std::fill(key->private_pem.begin(), key->private_pem.end(), '\0');
  if (!std::cout) return Fail("keygen: standard output: write failed");
  std::cerr << key->public_hex << "\n";
  return kExitOk;
}

int RunKeygen(const KeygenArgs& args) {
  KeyType type = args.type == "ed25519" ? KeyType::kEd25519 : KeyType::kX25519;
  if (args.out == "-") return KeygenToStandardOutput(type);
  if (Status outside = CheckOutsideCapsules("-o", args.out, /*secret=*/true); !outside.ok()) return Fail(outside);
  Result<std::string> public_hex = GenerateKeyFile(type, args.out);
  if (!public_hex.ok()) return Fail(public_hex.status());
  if (JsonOutput()) return PrintJson({{"public_key", *public_hex}, {"type", args.type}, {"file", args.out}});
  std::cout << *public_hex << "\n";
  return kExitOk;
}

}  // namespace

void RegisterCapsuleCommands(CLI::App& app, int* exit_code) {
  auto init_args = std::make_shared<InitArgs>();
  CLI::App* init = app.add_subcommand("init", "Create a new capsule held by this machine at epoch 1");
  init->add_option("DIR", init_args->dir, "Folder to create (absent or empty; not inside another capsule)")->required();
  init->add_option("--id", init_args->id, "Agent id: letters, digits, '.', '_', '-'")->required();
  init->add_option("--name", init_args->name, "Agent name")->required();
  init->add_option("--owner", init_args->owner, "Agent owner");
  init->add_option("--workspace", init_args->workspace, "Folder whose files become the workspace");
  AddFleetOptions(init, &init_args->fleet, true);
  AddJsonFlag(init);
  AddProgressFlag(init);
  init->callback([init_args, exit_code] { *exit_code = RunInit(*init_args); });

  auto verify_args = std::make_shared<VerifyArgs>();
  CLI::App* verify = app.add_subcommand("verify", "Check every digest of a capsule folder or exported tar, offline");
  verify->add_option("PATH", verify_args->path, "Capsule folder, its mountpoint, or an exported tar (- for standard input)")
      ->required();
  AddPubkeyOption(verify, &verify_args->pubkey, "The Ed25519 public key an exported tar must be signed by");
  AddJsonFlag(verify, "Print the report as JSON, success and failure alike");
  AddProgressFlag(verify);
  verify->callback([verify_args, exit_code] { *exit_code = RunVerify(*verify_args); });

  auto export_args = std::make_shared<ExportArgs>();
  CLI::App* exp = app.add_subcommand("export", "Write the capsule as a deterministic tar");
  exp->add_option("DIR", export_args->dir, "Capsule folder or its mountpoint")->required();
  exp->add_option("-o,--output", export_args->out,
                  "Tar file to write (replaced whole; not inside a capsule), a FIFO or device (written in place), or - for "
                  "standard output")
      ->required();
  AddKeyOption(exp, &export_args->sign, "Sign the exported manifest with this Ed25519 private key", {"--sign"});
  exp->add_option("--format", export_args->format, "tar (default) or af: a Letta Agent File (JSON)")
      ->check(OneOf({"tar", "af"}));
  AddJsonFlag(exp, "Print JSON, success and failure alike (not with -o -)");
  AddProgressFlag(exp);
  exp->callback([export_args, exit_code] { *exit_code = RunExport(*export_args); });

  auto gc_args = std::make_shared<GcArgs>();
  CLI::App* gc = app.add_subcommand("gc", "Remove deleted content: blobs no file of the snapshot names");
  gc->add_option("DIR", gc_args->dir, "Capsule folder held here and not mounted (a mount does this itself)")
      ->required();
  AddJsonFlag(gc);
  gc->callback([gc_args, exit_code] { *exit_code = RunGc(*gc_args); });

  auto adopt_args = std::make_shared<AdoptArgs>();
  CLI::App* adopt = app.add_subcommand(
      "adopt", "Make a copied capsule folder (cp -a, rsync, a restore) a holder of its own, with a new machine id");
  adopt->add_option("DIR", adopt_args->dir, "The copied capsule folder, not mounted")->required();
  AddFleetOptions(adopt, &adopt_args->fleet, true);
  AddJsonFlag(adopt);
  adopt->callback([adopt_args, exit_code] { *exit_code = RunAdopt(*adopt_args); });

  auto import_args = std::make_shared<ImportArgs>();
  CLI::App* imp = app.add_subcommand(
      "import", "Verify an exported tar, then place it as a capsule folder; or make one from a Letta Agent File "
                "or a provider's request body");
  imp->add_option("FILE", import_args->tar,
                  "Exported tar (or - for standard input), agent file (.af, recognised by its content) or request body")
      ->required();
  imp->add_option("DIR", import_args->dir, "Folder to create (absent or empty; not inside another capsule)")->required();
  imp->add_flag("--adopt", import_args->adopt,
                "Disaster recovery: make this machine the holder at a fresh epoch (otherwise read-only)");
  imp->add_option("--from", import_args->from, "af: FILE is a Letta Agent File (also recognised by its content)")
      ->check(OneOf({"af"}));
  imp->add_option("--agent", import_args->agent, "Of an agent file's agents, only the one of this name (or id)");
  AddJsonFlag(imp);
  AddProgressFlag(imp);
  imp->callback([import_args, exit_code] { *exit_code = RunImport(*import_args); });

  auto keygen_args = std::make_shared<KeygenArgs>();
  CLI::App* keygen = app.add_subcommand("keygen", "Write a new private key (mode 0600) and print its public key in hex");
  keygen->add_option("--type", keygen_args->type, "Key type")
      ->required()
      ->check(OneOf({"ed25519", "x25519"}));
  keygen->add_option("-o,--output", keygen_args->out,
                     "Private key file to write (must not exist, not inside a capsule), or - for standard output "
                     "(not a terminal; the public key then goes to standard error)")
      ->required();
  AddJsonFlag(keygen, "Print JSON, success and failure alike (not with -o -)");
  keygen->callback([keygen_args, exit_code] { *exit_code = RunKeygen(*keygen_args); });
}

}  // namespace capsule::cli
