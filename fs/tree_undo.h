// Taking back a change to the workspace tree whose change-log line could not be written.
//
// A call that changes the tree (unlink, rmdir, rename, chmod, chown, utimens, link, a create
// or mkdir, whose new node is detached besides) changes the nodes first and writes its
// change-log line last. When that line cannot be
// written (a full disk), the kernel is told the call failed, and the view must then show that
// it did not happen: a TreeUndo keeps what the call is about to change and puts it back.
// Used under CapsuleFs::tree_mu_, held exclusively from Keep* to Restore.
#pragma once

#include <fuse3/fuse_lowlevel.h>

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "fs/node.h"

namespace capsule::fs {

class TreeUndo {
 public:
  using NodeTable = std::unordered_map<fuse_ino_t, std::shared_ptr<Node>>;

  // Before the change: the node's names, permission bits, owner and times. A node the change
  // may remove from the inode table (its last name goes) is kept by its shared pointer.
  void KeepNode(Node* node);
  void KeepNode(const std::shared_ptr<Node>& node);
  // Before the change: what `dir` holds at `name`, a node or nothing.
  void KeepEntry(Node* dir, const std::string& name);
  // Puts back every entry and node kept; `nodes` gets back a node the change let go of.
  void Restore(NodeTable* nodes);

 private:
  struct NodeState {
    Node* node;
    std::shared_ptr<Node> owner;  // may be null
    Node* parent;
    std::string name;
    std::vector<NodeLink> other_links;
    uint64_t link_group;
    mode_t mode;
    std::optional<uint32_t> uid, gid;
    struct timespec mtime, ctime;
    std::optional<struct timespec> atime;
  };
  struct EntryState {
    Node* dir;
    std::string name;
    std::shared_ptr<Node> held;  // null: the name was free
  };
  std::vector<NodeState> nodes_;
  std::vector<EntryState> entries_;
};

}  // namespace capsule::fs
