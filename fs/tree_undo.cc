#include "fs/tree_undo.h"

namespace capsule::fs {

void TreeUndo::KeepNode(const std::shared_ptr<Node>& node) {
  if (!node) return;
  KeepNode(node.get());
  nodes_.back().owner = node;
}

void TreeUndo::KeepNode(Node* node) {
  if (node == nullptr) return;
  nodes_.push_back(NodeState{node, nullptr, node->parent, node->name, node->other_links, node->link_group, node->mode,
                             node->uid, node->gid, node->mtime, node->ctime, node->atime});
}

void TreeUndo::KeepEntry(Node* dir, const std::string& name) {
  auto it = dir->children.find(name);
  entries_.push_back(EntryState{dir, name, it == dir->children.end() ? nullptr : it->second});
}

void TreeUndo::Restore(NodeTable* nodes) {
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    if (it->held) {
      it->dir->children.Put(it->name, it->held);
    } else {
      it->dir->children.Erase(it->name);
    }
  }
  for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it) {
    Node& node = *it->node;
    node.parent = it->parent;
    node.name = it->name;
    node.other_links = it->other_links;
    node.link_group = it->link_group;
    node.mode = it->mode;
    node.uid = it->uid;
    node.gid = it->gid;
    node.mtime = it->mtime;
    node.ctime = it->ctime;
    node.atime = it->atime;
    if (it->owner) nodes->emplace(node.ino, it->owner);
  }
  entries_.clear();
  nodes_.clear();
}

}  // namespace capsule::fs
