// The Move Stream, format 4: the names, phases and path rules both ends of a move agree on.
// man/capsule-move.5 describes the format in words; ../shared/spec/move.md is the contract.
//
// A stream is a tar: first the manifest lnk-move-4.json, last the empty lnk-move-4.end, every
// regular file after a pax header LNK.sha256=<hex>. A capsule maps onto it as
//   workspace file P          files/P
//   memory/working_memory.md  memory/notes.md
//   memory/timeline_events.jsonl          (the same)
//   memory/vector_index/index.json        (the same)
//   environment/spec.json     harness/environment.json
//   schedule/...              (the same; a switch only)
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "capsule/base/canonical_json.h"
#include "capsule/base/status.h"
#include "capsule/base/tar.h"
#include "capsule/format/manifest.h"

namespace capsule::move {

inline constexpr int kStreamFormat = 4;
inline constexpr char kStreamManifestName[] = "lnk-move-4.json";
inline constexpr char kStreamEndName[] = "lnk-move-4.end";
inline constexpr char kDigestRecord[] = "LNK.sha256";
// A workspace entry's owner, when its snapshot entry names one (decimal, 32 bits).
inline constexpr char kUidRecord[] = "LNK.uid";
inline constexpr char kGidRecord[] = "LNK.gid";
// The journal in a switch, when the receiver holds what the copy sent of it: the entry holds
// only the bytes that follow the first LNK.append.size bytes of the journal, whose SHA-256 is
// LNK.append.sha256 (see man capsule-move.5, "The journal").
inline constexpr char kAppendSizeRecord[] = "LNK.append.size";
inline constexpr char kAppendDigestRecord[] = "LNK.append.sha256";
inline constexpr char kHarnessName[] = "capsule";

inline constexpr char kStreamNotes[] = "memory/notes.md";
inline constexpr char kStreamJournal[] = "memory/timeline_events.jsonl";
inline constexpr char kStreamVectorIndex[] = "memory/vector_index/index.json";
inline constexpr char kStreamEnvironment[] = "harness/environment.json";

enum class Phase { kCopy, kSwitch, kFiles };

const char* PhaseName(Phase phase);
Result<Phase> ParsePhase(const std::string& name);

// The top folders a phase allows: copy and switch files/, memory/, harness/, connections/;
// a switch also schedule/; files only files/.
std::vector<std::string> AllowedRoots(Phase phase);

// Ok when `path` is plain (relative, no '.', '..' or empty component, no NUL) and lies in a
// folder `phase` allows (or is that folder). The error names the path and why.
Status CheckStreamPath(const std::string& path, Phase phase);

// A link's target is kept as written, wherever it points (links are data: a receiver never
// follows one). Refused only when empty, holding a NUL, or PATH_MAX bytes or longer.
constexpr size_t kMaxLinkTarget = 4096;  // PATH_MAX, counting the terminating NUL
Status CheckStreamLink(const std::string& path, const std::string& target, Phase phase);

// A FIFO or device node of the workspace. Format 4's tar holds only files, folders, links and
// hard links (other implementations refuse anything else), so these travel in the stream
// manifest, in the part the seed leaves the sender's to say:
//   "special": {"files/<path>": {"gid"?, "major"?, "minor"?, "mode", "type", "uid"?}}
// type "fifo", "chr" or "blk"; major and minor for a device only; uid and gid its owner.
struct StreamSpecial {
  TarEntry::Type type = TarEntry::Type::kFifo;  // kFifo, kCharDevice or kBlockDevice
  mode_t mode = 0644;                           // permission bits
  uint32_t dev_major = 0, dev_minor = 0;        // devices
  std::optional<uint32_t> uid, gid;
};

// The largest epoch a move may carry: 2^53-1, the largest whole number every JSON reader keeps
// exactly. An agent at it moves no further (every move takes its epoch one higher); an offer,
// an activate or a stream past it is refused (man capsule-protocol.7).
inline constexpr uint64_t kMaxEpoch = (uint64_t{1} << 53) - 1;
// InvalidArgument unless 1 <= epoch <= kMaxEpoch, saying the bound.
Status CheckEpoch(uint64_t epoch);

// The stream manifest.
struct StreamManifest {
  Phase phase = Phase::kCopy;
  std::string move;  // 32 lowercase hex digits: 128 random bits
  std::vector<std::string> removed;  // switch only
  std::string version;
  AgentInfo agent;
  std::string harness = kHarnessName;
  uint64_t epoch = 0;
  std::map<std::string, StreamSpecial> special;  // by stream path, each under files/

  Result<std::string> ToCanonicalText() const;
  // Corruption naming lnk-move-4.json on any fault, "another format" included.
  static Result<StreamManifest> Parse(std::string_view text);
};

// A new move id: 128 random bits in hex.
Result<std::string> NewMoveId();
// Whether `id` is a move id: 32 lowercase hex digits (128 bits).
bool IsMoveId(std::string_view id);
// InvalidArgument unless `id` is a move id; the error shows the id escaped (it may come from a
// peer) and says what one is.
Status CheckMoveId(const std::string& id);
// Text from outside (a peer, a stream) as it may appear in a message: quoted as a JSON string
// with everything outside printable ASCII escaped (ESC as \u001b, CR as \r, NUL as \u0000),
// cut to 200 bytes.
std::string ShownText(std::string_view text);

// The receiver's `have`: {"<stream path>": "<sha256>"}.
using HaveMap = std::map<std::string, std::string>;
// A have as JSON: an object of path to SHA-256 in hex; anything else is refused with `code`
// (InvalidArgument for a user's file, Corruption for a peer's reply).
Result<HaveMap> HaveFromJson(const Json& json, Code code = Code::kInvalidArgument);
Result<HaveMap> ParseHave(std::string_view text, Code code = Code::kInvalidArgument);
Json HaveToJsonObject(const HaveMap& have);
// The canonical text of HaveToJsonObject.
Result<std::string> HaveToJson(const HaveMap& have);

// The stream path of a capsule file, or nullopt when the file does not travel in a stream.
std::optional<std::string> StreamPathOfCapsuleFile(const std::string& capsule_path);
// The capsule path of a stream file outside files/, or nullopt when it has none.
std::optional<std::string> CapsulePathOfStreamFile(const std::string& stream_path);

}  // namespace capsule::move
