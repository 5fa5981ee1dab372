// Planning a Move Stream: every entry the stream of a capsule holds, before any is written.
//
// A pack sends the plan in path order; a receiver's have is the digest of each file the plan
// names. Both come from one walk (VisitStream), so that a have always names what a pack of the
// same capsule would send.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "capsule/base/sha256.h"
#include "capsule/base/status.h"
#include "capsule/base/tar.h"
#include "capsule/format/manifest.h"
#include "move/stream/format.h"

namespace capsule::move {

// What a copy's plan saw of the journal it sent whole, so that a switch's plan can know the
// journal still begins with those bytes without reading them again (PlanJournal): the
// SHA-256 state after them, the file (device and inode), and its last few KiB among them.
struct JournalSeen {
  std::shared_ptr<const Sha256> state;
  uint64_t device = 0;
  uint64_t inode = 0;
  std::string last_bytes;
};

// One entry of the stream, before it is written. A plan holds one for every workspace entry,
// so what only a few entries need is kept apart (`extra`).
struct Planned {
  enum class Kind : uint8_t { kFolder, kFile, kLink, kHardLink, kSpecial };
  struct Extra {
    std::string source;       // kFile: the file to read, under the capsule folder (a workspace
                              // file's blob when empty: named when sent, as most are not)
    std::string link_target;  // kLink; kHardLink: the stream path of the group's first name
    TarEntry special;         // kSpecial: a FIFO or a device node
    std::string inline_data;  // kFile whose bytes were rewritten (canonical jobs)
    bool has_inline = false;
    // The journal of a switch that sends only what follows what the receiver holds: the
    // entry's bytes are the source's from `append_from` on, appended to the receiver's first
    // `append_from` bytes, whose SHA-256 is `append_to_sha256` (LNK.append.*).
    uint64_t append_from = 0;
    std::string append_to_sha256;
    // The journal planned whole: what the plan saw of it (HeldJournal::seen).
    std::shared_ptr<const JournalSeen> journal_seen;
  };

  Kind kind = Kind::kFile;
  bool whole = false;  // sent whatever the receiver's have says: harness/ is replaced whole
  mode_t mode = 0644;
  uint64_t size = 0;         // kFile
  uint64_t link = 0;         // the snapshot's link group: never skipped for the receiver's have
  std::string sha256;        // kFile
  std::optional<uint32_t> uid, gid;  // workspace entries: the owner, when the snapshot names one
  std::unique_ptr<Extra> extra;      // null: every field of Extra empty

  const Extra& extras() const;
  Extra& mutable_extras();
};

// The journal as the receiver holds it (what a move's copy sent of it).
struct HeldJournal {
  uint64_t size = 0;
  std::string sha256;
  // What the copy's plan saw of those bytes, when it kept it.
  std::shared_ptr<const JournalSeen> seen;
  // The capsule manifest's entry for its journal when the switch is planned (the freeze's
  // checkpoint wrote it). When the journal is the file `seen` names, ends its held bytes with
  // the same last bytes, and `seen`'s state continued over what follows gives this digest,
  // the journal is taken to begin with the held bytes, as a mount's checkpoint takes a journal
  // it appends to; otherwise they are read and compared.
  std::optional<FileDigest> recorded;
};

// What one walk of a capsule's stream finds is given to a PlanVisitor, the workspace's entries
// first and in path order, then the capsule's other files.
class PlanVisitor {
 public:
  virtual ~PlanVisitor() = default;
  // The folders above `stream_path` are to be in the stream.
  virtual void AddFolders(const std::string& stream_path) = 0;
  virtual void Add(const std::string& stream_path, Planned item) = 0;
};

// `held_journal` (a switch only): the journal the receiver holds; when the capsule's journal
// begins with it and is longer, the journal is planned as what follows it.
Status VisitStream(const std::string& dir, Phase phase, PlanVisitor* visitor,
                   const std::optional<HeldJournal>& held_journal = std::nullopt);

// The whole plan, by stream path.
using StreamPlan = std::map<std::string, Planned>;
Result<StreamPlan> PlanStream(const std::string& dir, Phase phase,
                              const std::optional<HeldJournal>& held_journal = std::nullopt);

// What the capsule at `dir` holds, as a `have` for a sender: every stream file and its digest.
// Only the digests are kept, not the plan.
Result<HaveMap> HaveOfCapsule(const std::string& dir);

}  // namespace capsule::move
