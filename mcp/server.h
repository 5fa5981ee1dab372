// The Model Context Protocol server of `capsule mcp`: the history, memory and run ports of one
// capsule as MCP tools and resources, over standard input and output (man/capsule-mcp.7).
//
// Protocol: newline-delimited JSON-RPC 2.0 (mcp/json_rpc.h), protocol revision 2025-11-25, and
// 2025-06-18, 2025-03-26 and 2024-11-05 for a client that asks for one of those. Methods:
// initialize, ping, tools/list, tools/call, resources/list, resources/templates/list,
// resources/read; every other request gets -32601. Notifications (notifications/initialized,
// notifications/cancelled, ...) are read and get no reply. Requests are answered one at a time,
// in the order they arrive. A line longer than kMaxLine is refused (-32600, id null) and
// skipped to its newline. Nothing but replies is written to the output.
//
// A tool's failure is a result with isError true (mcp/tools.h); a request that cannot be
// carried out is a JSON-RPC error: -32602 for params that are not an object, a missing or
// unknown tool name, a resource URI missing; -32002 for a URI that names nothing; -32603 for
// anything else. The server keeps answering after every one of them.
//
// Thread-safety: one thread at a time.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "capsule/base/canonical_json.h"
#include "capsule/base/status.h"
#include "journal/journal.h"
#include "journal/owned/capsule_ports.h"
#include "mcp/json_rpc.h"
#include "mcp/resources.h"

namespace capsule::mcp {

inline constexpr char kProtocolVersion[] = "2025-11-25";
inline constexpr size_t kMaxLine = 16 << 20;

struct ServerOptions {
  std::string capsule_dir;  // the capsule folder: journal, owned state, holder record
  std::string served_path;  // the folder or mountpoint named by the user: notes are read there
  journal::JournalOptions journal;
};

class Server {
 public:
  // Opens the capsule's ports (catching its owned state up with the journal).
  static Result<std::unique_ptr<Server>> Open(const ServerOptions& options);

  // One line without its newline: the reply to write, as one line without its newline, or
  // nullopt when none is due (a notification, a response, a blank line).
  std::optional<std::string> HandleLine(std::string_view line);

  // Reads lines from `in_fd` until it ends, writing each reply and a newline to `out_fd`.
  // Returns Ok at the end of the input or when the output is closed (the client left).
  Status Serve(int in_fd, int out_fd);

 private:
  Server(std::unique_ptr<owned::CapsulePorts> ports, ResourceSource resources)
      : ports_(std::move(ports)), resources_(std::move(resources)) {
    resources_.ports = ports_.get();
  }
  Json Dispatch(const Incoming& request);
  Json Initialize(const Incoming& request);
  Json CallTool(const Incoming& request);
  Json ListResources(const Incoming& request);
  Json ReadResource(const Incoming& request);

  std::unique_ptr<owned::CapsulePorts> ports_;
  ResourceSource resources_;
};

}  // namespace capsule::mcp
