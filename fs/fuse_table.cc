#include "fs/fuse_table.h"

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "fs/capsule_fs.h"
#include "fs/errno_map.h"

namespace capsule::fs {
namespace {

CapsuleFs* Fs(fuse_req_t req) { return static_cast<CapsuleFs*>(fuse_req_userdata(req)); }
Handle* H(fuse_file_info* fi) { return reinterpret_cast<Handle*>(fi->fh); }

// Runs `work` for `req` so that a wait of it for a thaw ends with EINTR when the kernel takes
// the request back (its caller got a signal: Ctrl-C, SIGTERM, SIGKILL). The interrupt function
// is unregistered before the reply frees the request: libfuse calls it under the request's
// lock, which unregistering takes, so none runs once this returns.
template <typename Work>
auto Interruptibly(fuse_req_t req, Work work) {
  Interruption interruption(&Fs(req)->gate());
  fuse_req_interrupt_func(
      req, [](fuse_req_t, void* data) { static_cast<Interruption*>(data)->Fire(); }, &interruption);
  auto result = work();
  fuse_req_interrupt_func(req, nullptr, nullptr);
  return result;
}

void ReplyStatus(fuse_req_t req, const Status& status) { fuse_reply_err(req, ToErrno(status)); }

void ReplyEntry(fuse_req_t req, const Result<fuse_entry_param>& entry) {
  if (entry.ok()) {
    fuse_reply_entry(req, &*entry);
  } else {
    ReplyStatus(req, entry.status());
  }
}

void Init(void* userdata, fuse_conn_info* conn) {
  (void)userdata;
  if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
  if (conn->capable & FUSE_CAP_SPLICE_READ) conn->want |= FUSE_CAP_SPLICE_READ;
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  // Requests of up to 1 MiB (the kernel's max_pages follows max_write): fewer round trips for
  // sequential I/O, which goes around the page cache.
  conn->max_write = 1u << 20;
  conn->max_readahead = 1u << 20;
}

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) { ReplyEntry(req, Fs(req)->do_lookup(parent, name)); }

void Forget(fuse_req_t req, fuse_ino_t ino, uint64_t n) {
  Fs(req)->do_forget(ino, n);
  fuse_reply_none(req);
}

void ForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  for (size_t i = 0; i < count; ++i) Fs(req)->do_forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void Getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  auto st = Fs(req)->do_getattr(ino);
  if (!st.ok()) return ReplyStatus(req, st.status());
  fuse_reply_attr(req, &*st, Fs(req)->attr_timeout(ino));
}

// The request's caller; with its supplementary groups when `with_groups` (a chown needs them).
Caller CallerOf(fuse_req_t req, bool with_groups = false) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  Caller caller{ctx->uid, ctx->gid, {}};
  if (with_groups) {
    std::vector<gid_t> groups(64);
    int n = fuse_req_getgroups(req, static_cast<int>(groups.size()), groups.data());
    if (n > static_cast<int>(groups.size())) {
      groups.resize(static_cast<size_t>(n));
      n = fuse_req_getgroups(req, n, groups.data());
    }
    if (n > 0) caller.groups.assign(groups.begin(), groups.begin() + std::min<int>(n, static_cast<int>(groups.size())));
  }
  return caller;
}

void Setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
  bool chown = (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) != 0;
  auto st = Interruptibly(req, [&] { return Fs(req)->do_setattr(ino, *attr, to_set, fi ? H(fi) : nullptr, CallerOf(req, chown)); });
  if (!st.ok()) return ReplyStatus(req, st.status());
  fuse_reply_attr(req, &*st, Fs(req)->attr_timeout(ino));
}

void Readlink(fuse_req_t req, fuse_ino_t ino) {
  auto target = Fs(req)->do_readlink(ino);
  if (!target.ok()) return ReplyStatus(req, target.status());
  fuse_reply_readlink(req, target->c_str());
}

void Mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  ReplyEntry(req, Interruptibly(req, [&] { return Fs(req)->do_mknod(parent, name, mode, rdev, CallerOf(req)); }));
}

void Mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  ReplyEntry(req, Interruptibly(req, [&] { return Fs(req)->do_mkdir(parent, name, mode, CallerOf(req)); }));
}

void Symlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  ReplyEntry(req, Interruptibly(req, [&] { return Fs(req)->do_symlink(link, parent, name, CallerOf(req)); }));
}

void Unlink(fuse_req_t req, fuse_ino_t parent, const char* name) { ReplyStatus(req, Interruptibly(req, [&] { return Fs(req)->do_unlink(parent, name); })); }
void Rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) { ReplyStatus(req, Interruptibly(req, [&] { return Fs(req)->do_rmdir(parent, name); })); }

void Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent, const char* newname,
            unsigned int flags) {
  ReplyStatus(req, Interruptibly(req, [&] { return Fs(req)->do_rename(parent, name, newparent, newname, flags); }));
}

void Link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  ReplyEntry(req, Interruptibly(req, [&] { return Fs(req)->do_link(ino, newparent, newname); }));
}

// Workspace files go through the kernel's page cache, shared by every open of the inode as
// our working copy is, so that shared mappings work and every open sees the writes at once
// (writes still reach us one by one: no writeback cache). The capsule's own files skip it: the
// journal is rewritten as it is appended (the driver fills in each line), and the rest are
// small.
bool UsesPageCache(NodeKind kind) { return kind == NodeKind::kWsFile; }

void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  auto h = Interruptibly(req, [&] { return Fs(req)->do_open(ino, fi->flags); });
  if (!h.ok()) return ReplyStatus(req, h.status());
  fi->fh = reinterpret_cast<uint64_t>(*h);
  fi->direct_io = UsesPageCache((*h)->node->kind) ? 0 : 1;
  fi->keep_cache = (*h)->keep_cache ? 1 : 0;  // an unchanged file's cache outlives its last close
  fuse_reply_open(req, fi);
}

void Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi) {
  auto created = Interruptibly(req, [&] { return Fs(req)->do_create(parent, name, mode, fi->flags, CallerOf(req)); });
  if (!created.ok()) return ReplyStatus(req, created.status());
  fi->fh = reinterpret_cast<uint64_t>(created->second);
  fi->direct_io = UsesPageCache(created->second->node->kind) ? 0 : 1;
  fuse_reply_create(req, &created->first, fi);
}

void Fallocate(fuse_req_t req, fuse_ino_t, int mode, off_t offset, off_t length, fuse_file_info* fi) {
  ReplyStatus(req, Interruptibly(req, [&] { return Fs(req)->do_fallocate(H(fi), mode, offset, length); }));
}

void Read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  auto reply = Fs(req)->do_read(H(fi), size, off);
  if (!reply.ok()) return ReplyStatus(req, reply.status());
  if (!reply->file) {
    fuse_reply_buf(req, reply->data.data(), reply->data.size());
    return;
  }
  fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
  buf.buf[0].flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
  buf.buf[0].fd = reply->file->get();
  buf.buf[0].pos = off;
  fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

void Write(fuse_req_t req, fuse_ino_t, const char* buf, size_t size, off_t off, fuse_file_info* fi) {
  auto written = Interruptibly(req, [&] { return Fs(req)->do_write(H(fi), buf, size, off); });
  if (!written.ok()) return ReplyStatus(req, written.status());
  fuse_reply_write(req, written->size);
  // Answered first, hashed after: the writer's next write travels while this one is hashed
  // (`buf` lives until this handler returns).
  written->hash.Run();
}

void Flush(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  ReplyStatus(req, Interruptibly(req, [&] { return Fs(req)->do_flush(H(fi)); }));
}

void Release(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  Fs(req)->do_release(H(fi));
  fuse_reply_err(req, 0);
}

void Fsync(fuse_req_t req, fuse_ino_t, int, fuse_file_info* fi) {
  ReplyStatus(req, Interruptibly(req, [&] { return Fs(req)->do_fsync(H(fi)); }));
}

void Opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  auto h = Fs(req)->do_opendir(ino);
  if (!h.ok()) return ReplyStatus(req, h.status());
  fi->fh = reinterpret_cast<uint64_t>(*h);
  fuse_reply_open(req, fi);
}

void Readdir(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  Handle* h = H(fi);
  std::string buf(size, '\0');
  size_t used = 0;
  for (size_t i = static_cast<size_t>(off); i < h->entries.size(); ++i) {
    struct stat st {};
    st.st_ino = h->entries[i].ino;
    st.st_mode = h->entries[i].type;
    size_t n = fuse_add_direntry(req, buf.data() + used, size - used, h->entries[i].name.c_str(), &st,
                                 static_cast<off_t>(i + 1));
    if (n > size - used) break;
    used += n;
  }
  fuse_reply_buf(req, buf.data(), used);
}

void Releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  Fs(req)->do_releasedir(H(fi));
  fuse_reply_err(req, 0);
}

void Fsyncdir(fuse_req_t req, fuse_ino_t, int, fuse_file_info*) { ReplyStatus(req, Fs(req)->do_fsyncdir()); }

void Statfs(fuse_req_t req, fuse_ino_t) {
  auto st = Fs(req)->do_statfs();
  if (!st.ok()) return ReplyStatus(req, st.status());
  fuse_reply_statfs(req, &*st);
}

fuse_lowlevel_ops MakeOperations() {
  fuse_lowlevel_ops ops{};
  ops.init = Init;
  ops.lookup = Lookup;
  ops.forget = Forget;
  ops.forget_multi = ForgetMulti;
  ops.getattr = Getattr;
  ops.setattr = Setattr;
  ops.readlink = Readlink;
  ops.mknod = Mknod;
  ops.mkdir = Mkdir;
  ops.symlink = Symlink;
  ops.unlink = Unlink;
  ops.rmdir = Rmdir;
  ops.rename = Rename;
  ops.link = Link;
  ops.open = Open;
  ops.create = Create;
  ops.read = Read;
  ops.write = Write;
  ops.flush = Flush;
  ops.release = Release;
  ops.fsync = Fsync;
  ops.fallocate = Fallocate;
  ops.opendir = Opendir;
  ops.readdir = Readdir;
  ops.releasedir = Releasedir;
  ops.fsyncdir = Fsyncdir;
  ops.statfs = Statfs;
  return ops;
}

}  // namespace

const fuse_lowlevel_ops& Operations() {
  static const fuse_lowlevel_ops ops = MakeOperations();
  return ops;
}

}  // namespace capsule::fs
