#include "mcp/server.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <exception>

#include "capsule/base/file_io.h"
#include "capsule/base/version.h"
#include "capsule/format/layout.h"
#include "capsule/format/manifest.h"
#include "mcp/reply_bounds.h"
#include "mcp/tools.h"

namespace capsule::mcp {

namespace {

constexpr const char* kSupportedVersions[] = {kProtocolVersion, "2025-06-18", "2025-03-26", "2024-11-05"};

// The params of a request as an object: absent or null is an empty object; anything else that
// is not an object is nullopt.
std::optional<Json> ParamsObject(const Incoming& request) {
  if (request.params.is_null()) return Json::object();
  if (!request.params.is_object()) return std::nullopt;
  return request.params;
}

Json InvalidParams(const Incoming& request, const std::string& why) {
  return ErrorReply(request.id, kInvalidParams, "Invalid params: " + request.method + ": " + why);
}

std::string KnownTools() {
  std::string names;
  for (const Tool& tool : Tools()) names += (names.empty() ? "" : ", ") + tool.name;
  return names;
}

}  // namespace

Result<std::unique_ptr<Server>> Server::Open(const ServerOptions& options) {
  CAPSULE_ASSIGN_OR_RETURN(Manifest manifest, Manifest::Load(options.capsule_dir));
  CAPSULE_ASSIGN_OR_RETURN(std::unique_ptr<owned::CapsulePorts> ports,
                           owned::CapsulePorts::Open(options.capsule_dir, options.journal));
  ResourceSource resources;
  resources.agent = manifest.agent.id;
  resources.served_root = options.served_path.empty() ? options.capsule_dir : options.served_path;
  resources.notes_path = JoinPath(resources.served_root, kWorkingMemoryPath);
  return std::unique_ptr<Server>(new Server(std::move(ports), std::move(resources)));
}

std::optional<std::string> Server::HandleLine(std::string_view line) {
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) return std::nullopt;
  ReadLine read = ParseLine(line);
  if (read.error_reply) return Serialize(*read.error_reply);
  const Incoming& message = *read.message;
  if (message.kind != Incoming::Kind::kRequest) return std::nullopt;
  try {
    return Serialize(Dispatch(message));
  } catch (const std::exception& e) {
    // A bug, not an input: the request fails and the server goes on.
    return Serialize(ErrorReply(message.id, kInternalError, std::string("Internal error: ") + e.what()));
  }
}

Json Server::Dispatch(const Incoming& request) {
  const std::string& method = request.method;
  if (method == "initialize") return Initialize(request);
  if (!ParamsObject(request)) return InvalidParams(request, "params must be an object");
  if (method == "ping") return ResultReply(request.id, Json::object());
  if (method == "tools/list") {
    Json tools = Json::array();
    for (const Tool& tool : Tools()) tools.push_back(ToolListing(tool));
    return ResultReply(request.id, {{"tools", std::move(tools)}});
  }
  if (method == "tools/call") return CallTool(request);
  if (method == "resources/list") return ListResources(request);
  if (method == "resources/templates/list") return ResultReply(request.id, ResourceTemplates(resources_));
  if (method == "resources/read") return ReadResource(request);
  return ErrorReply(request.id, kMethodNotFound, "Method not found: " + Excerpt(method));
}

Json Server::Initialize(const Incoming& request) {
  std::optional<Json> params = ParamsObject(request);
  if (!params) return InvalidParams(request, "params must be an object");
  auto asked = params->find("protocolVersion");
  if (asked == params->end() || !asked->is_string()) return InvalidParams(request, "protocolVersion must be a string");
  // The client's revision when this server speaks it; else the latest, for the client to judge.
  std::string version = kProtocolVersion;
  for (const char* supported : kSupportedVersions) {
    if (*asked == supported) version = supported;
  }
  Json result = {
      {"protocolVersion", version},
      {"capabilities",
       {{"tools", {{"listChanged", false}}}, {"resources", {{"subscribe", false}, {"listChanged", false}}}}},
      {"serverInfo", {{"name", "capsule"}, {"title", "capsule owned state"}, {"version", kVersion}}},
      {"instructions",
       "The state agent " + resources_.agent +
           " owns: its conversation history, its facts with provenance, and the shadow record of its runs. "
           "Every write is a journal event of the capsule, durable when the call returns. Start with runs_in_flight "
           "to resume what another framework left; history_load gives a conversation, newest last. The agent's "
           "standing instructions and skills are the resources capsule://" + resources_.agent + "/instructions and "
           "capsule://" + resources_.agent + "/skills/NAME."}};
  return ResultReply(request.id, std::move(result));
}

Json Server::CallTool(const Incoming& request) {
  const Json& params = request.params;
  if (!params.is_object()) return InvalidParams(request, "params must be an object");
  auto name = params.find("name");
  if (name == params.end() || !name->is_string()) return InvalidParams(request, "name must be a string");
  const Tool* tool = FindTool(name->get<std::string>());
  if (tool == nullptr) {
    return InvalidParams(request, "Unknown tool: " + Excerpt(name->get<std::string>()) + " (known: " + KnownTools() + ")");
  }
  auto arguments = params.find("arguments");
  if (arguments != params.end() && !arguments->is_object() && !arguments->is_null()) {
    return InvalidParams(request, "arguments must be an object");
  }
  const Json given = arguments == params.end() || arguments->is_null() ? Json::object() : *arguments;
  ToolContext context{*ports_, resources_.agent};
  return ResultReply(request.id, mcp::CallTool(*tool, context, given));
}

Json Server::ListResources(const Incoming& request) {
  std::string cursor;
  if (auto it = request.params.find("cursor"); request.params.is_object() && it != request.params.end()) {
    if (!it->is_string()) return InvalidParams(request, "cursor must be a string");
    cursor = it->get<std::string>();
  }
  Result<Json> listed = mcp::ListResources(resources_, cursor);
  if (!listed.ok()) {
    return listed.status().code() == Code::kInvalidArgument
               ? InvalidParams(request, listed.status().message())
               : ErrorReply(request.id, kInternalError, "Internal error: " + listed.status().message());
  }
  return ResultReply(request.id, std::move(*listed));
}

Json Server::ReadResource(const Incoming& request) {
  auto uri = request.params.is_object() ? request.params.find("uri") : request.params.end();
  if (!request.params.is_object() || uri == request.params.end() || !uri->is_string()) {
    return InvalidParams(request, "uri must be a string");
  }
  Result<Json> read = mcp::ReadResource(resources_, uri->get<std::string>());
  if (!read.ok()) {
    if (read.status().code() == Code::kNotFound) {
      Json reply = ErrorReply(request.id, kResourceNotFound, "Resource not found: " + read.status().message());
      reply["error"]["data"] = {{"uri", Excerpt(uri->get<std::string>())}};
      return reply;
    }
    return ErrorReply(request.id, kInternalError, "Internal error: " + read.status().message());
  }
  return ResultReply(request.id, std::move(*read));
}

Status Server::Serve(int in_fd, int out_fd) {
  std::string buffer;
  bool skipping = false;  // the rest of a line too long, already refused
  char chunk[1 << 16];
  auto reply = [&](const std::optional<std::string>& line) -> bool {
    if (!line) return true;
    Status wrote = WriteAll(out_fd, *line + "\n", "standard output");
    return wrote.ok();  // a closed output: the client left
  };
  const std::string too_long = Serialize(ErrorReply(
      nullptr, kInvalidRequest, "Invalid Request: a line longer than " + std::to_string(kMaxLine >> 20) + " MiB; skipped"));
  size_t scanned = 0;  // the bytes of `buffer` already searched for a newline
  for (;;) {
    ssize_t n = ::read(in_fd, chunk, sizeof chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IOError("standard input", errno);
    }
    if (n == 0) break;
    buffer.append(chunk, static_cast<size_t>(n));
    size_t start = 0;
    // A long line comes in many reads: each is searched once, not the whole line again.
    for (size_t end; (end = buffer.find('\n', std::max(start, scanned))) != std::string::npos; start = end + 1) {
      if (skipping) {
        skipping = false;
        continue;
      }
      std::string_view line(buffer.data() + start, end - start);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (!reply(line.size() > kMaxLine ? too_long : HandleLine(line))) return Status::Ok();
    }
    buffer.erase(0, start);
    scanned = buffer.size();
    if (buffer.size() > kMaxLine) {  // no newline yet: refused now, the rest skipped as it comes
      if (!skipping && !reply(too_long)) return Status::Ok();
      skipping = true;
      buffer.clear();
      scanned = 0;
    }
  }
  if (!skipping && !buffer.empty()) reply(HandleLine(buffer));  // a last line without its newline, within kMaxLine
  return Status::Ok();
}

}  // namespace capsule::mcp
