// Receiving a Move Stream into a capsule folder: all of it or nothing.
//
// The stream is read into a staging folder beside the capsule; the new state of the capsule is
// built there from the capsule as it is (blobs hard-linked, other files copied) and what the
// stream holds; it must verify; then it takes the capsule's place in one atomic exchange. A
// refused stream leaves the capsule exactly as it was.
//
// What a receiver replaces: the workspace files the stream holds (a file or link arriving
// where a folder was takes out what was beneath it); notes, vector index and
// environment spec; in a switch, the whole schedule folder, and the paths listed in
// `removed`. The journal is never replaced: what the receiver holds must be a prefix of what
// arrives (the rest is appended) or, when the two diverged, they are merged as a set union.
// A switch is refused unless its move id is the one of the copy this capsule received.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "capsule/base/byte_stream.h"
#include "capsule/base/file_io.h"
#include "capsule/base/status.h"
#include "capsule/format/manifest.h"
#include "capsule/format/workspace.h"
#include "journal/check.h"
#include "move/stream/format.h"

namespace capsule::move {

struct UnpackOptions {
  // True when the stream arrived inside a sealed envelope: a switch is refused otherwise.
  bool sealed = false;
};

struct UnpackStats {
  StreamManifest manifest;
  uint64_t files_received = 0;
  uint64_t file_bytes = 0;
  uint64_t removed = 0;
  uint64_t ignored = 0;  // entries a capsule has no place for (connections/, other harness/ files)
};

Status UnpackStream(ByteSource* source, const std::string& dir, const UnpackOptions& options,
                    UnpackStats* stats);

// A staging area's manifest and snapshot as the last apply saved them, with the files it
// saved them as. Only the process applying a move writes its staging area (move_target.h), so
// the next apply there (the switch after the copy) takes them from memory instead of reading
// and parsing them again, for as long as both files are still the ones saved (FileStamp).
struct StagedDocuments {
  Manifest manifest;
  FileStamp manifest_file;
  Snapshot snapshot;
  FileStamp snapshot_file;
};

// For a move's staging area, a capsule folder that only this move touches (see move_target.h):
// the stream is applied onto `staging` in place, with no second copy, and only what changed
// is hashed again. Every file that arrives is checked against its digest as it is written;
// then the manifest is refreshed for the files outside the blob store and the new blobs, and
// the staged capsule is checked (layout, snapshot against blobs, environment spec, journal
// chains), and the file system is synced once (syncfs) rather than each file. The cost is that of the change and the small documents, not of the capsule. On
// failure `staging` is left part-applied: the caller empties it.
struct ApplyOptions {
  bool sealed = false;
  Phase expected_phase = Phase::kCopy;
  std::string expected_move;
  std::string expected_agent;
  // The holder the staged manifest names (the receiving machine at the move's epoch).
  std::string holder_machine;
  uint64_t holder_epoch = 0;
  // What this process checked of the staged journal before (at the move's copy); updated to
  // the journal the stream leaves. With it, a journal that only grew since is checked by its
  // new lines alone, so a switch's check does not grow with the journal's length.
  journal::CheckedJournal* checked_journal = nullptr;
  // Given each line the journal check reads: every line, or only the new ones when the
  // journal only grew from `checked_journal`. The check reads a block at a time and keeps no
  // line: what the caller needs of the events, it gathers here.
  journal::LineVisitor visit_journal;
  // In: what the last apply to this staging area saved, if anything. Out: what this apply
  // saved (emptied first, so that an apply that fails leaves nothing to take).
  std::optional<StagedDocuments>* staged = nullptr;
};
Status ApplyStreamToStaging(ByteSource* source, const std::string& staging, const ApplyOptions& options,
                            UnpackStats* stats);

}  // namespace capsule::move
