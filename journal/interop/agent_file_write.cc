// Writing a capsule as an agent file (agent_file.h; man/capsule.5, AGENT FILE).
#include <map>

#include "capsule/base/file_io.h"
#include "capsule/format/attachments.h"
#include "capsule/format/harness.h"
#include "capsule/format/layout.h"
#include "capsule/format/manifest.h"
#include "capsule/format/memory_blocks.h"
#include "journal/interop/agent_file.h"
#include "journal/interop/agent_file_fields.h"
#include "journal/journal.h"

namespace capsule::journal::interop {

namespace {

std::string Str(const Json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

Json Member(const Json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() ? *it : Json();
}

std::string EndpointType(const std::string& provider) {
  if (provider == "anthropic") return "anthropic";
  if (provider == "gemini") return "google_ai";
  return "openai";
}

Result<std::string> ReadOptional(const std::string& dir, const std::string& rel) {
  if (!PathExists(JoinPath(dir, rel))) return std::string();
  return ReadFileBeneath(dir, rel);
}

class Writer {
 public:
  Writer(std::string dir, Json settings) : dir_(std::move(dir)), settings_(std::move(settings)) {}

  Result<Json> Write() {
    CAPSULE_ASSIGN_OR_RETURN(Manifest manifest, Manifest::Load(dir_));
    CAPSULE_ASSIGN_OR_RETURN(std::string system, ReadOptional(dir_, kInstructionsPath));
    CAPSULE_ASSIGN_OR_RETURN(std::vector<MemoryBlock> blocks, LoadMemoryBlocks(dir_));
    CAPSULE_ASSIGN_OR_RETURN(std::vector<Event> all, Journal::Read(dir_));
    std::vector<Event> events;
    for (Event& event : all) {
      if (event.Conversation() == kImportedConversation) events.push_back(std::move(event));
    }
    agent_id_ = Str(settings_, "agent_id").empty() ? "agent-0" : Str(settings_, "agent_id");
    Json agent = settings_.value("agent", Json::object());
    agent["id"] = agent_id_;
    agent["name"] = manifest.agent.name;
    agent["system"] = system;
    agent["memory_blocks"] = Json::array();
    agent["tools"] = Json::array();
    agent["source_ids"] = Json::array();

    Json file_blocks = Json::array(), block_ids = Json::array();
    const Json block_settings = settings_.value("blocks", Json::object());
    for (size_t i = 0; i < blocks.size(); ++i) {
      const MemoryBlock& block = blocks[i];
      Json json = block_settings.value(block.label, Json::object());
      if (Str(json, "id").empty()) json["id"] = "block-" + std::to_string(i);
      json["label"] = block.label;
      json["value"] = block.value;
      json["description"] = block.description;
      json["read_only"] = block.read_only;
      if (block.limit) json["limit"] = *block.limit;
      block_ids.push_back(json["id"]);
      file_blocks.push_back(std::move(json));
    }
    agent["block_ids"] = block_ids;

    CAPSULE_ASSIGN_OR_RETURN(Json tools, Tools(events));
    Json tool_ids = Json::array();
    for (const Json& tool : tools) tool_ids.push_back(tool["id"]);
    agent["tool_ids"] = tool_ids;
    agent["llm_config"] = LlmConfig(events);
    CAPSULE_ASSIGN_OR_RETURN(Json messages, Messages(events, InstructionsWithBlocks(system, blocks)));
    agent["messages"] = messages;
    Json in_context = Member(settings_, "in_context_message_ids");
    if (!in_context.is_array()) {
      in_context = Json::array();
      for (const Json& message : messages) in_context.push_back(message["id"]);
    }
    agent["in_context_message_ids"] = in_context;
    CAPSULE_ASSIGN_OR_RETURN(std::string spec_text, ReadFileBeneath(dir_, kEnvironmentSpecPath));
    CAPSULE_ASSIGN_OR_RETURN(Json spec, ParseJson(spec_text, kEnvironmentSpecPath));
    Json names = Json::object();  // names only: the values stay with their owner
    for (const Json& name : spec.value("secrets", Json::array())) names[name.get<std::string>()] = nullptr;
    if (!names.empty()) agent["tool_exec_environment_variables"] = names;

    Json file = {{"agents", Json::array({agent})}, {"groups", Json::array()},  {"blocks", file_blocks},
                 {"files", Json::array()},          {"sources", Json::array()}, {"tools", tools},
                 {"mcp_servers", Json::array()}};
    if (settings_.contains("file_metadata")) file["metadata"] = settings_["file_metadata"];
    file["created_at"] = settings_.contains("file_created_at") ? settings_["file_created_at"] : Json(first_ts_);
    return file;
  }

 private:
  Result<Json> Tools(const std::vector<Event>& events) {
    std::vector<std::string> order;
    std::map<std::string, Json> latest;
    for (const Event& event : events) {
      if (event.type != "tool_defined") continue;
      std::string name = Str(event.data, "name");
      if (latest.count(name) == 0) order.push_back(name);
      latest[name] = event.data;
    }
    Json tools = Json::array();
    for (size_t i = 0; i < order.size(); ++i) {
      const Json& data = latest[order[i]];
      Json letta = data.value("letta", Json::object());
      Json tool = Json::object();
      for (const std::string& key : CarriedToolFields()) {
        if (letta.contains(key)) tool[key] = letta[key];
      }
      tool["id"] = Str(letta, "id").empty() ? "tool-" + std::to_string(i) : Str(letta, "id");
      tool["name"] = order[i];
      tool["description"] = Str(data, "description");
      if (!tool.contains("json_schema")) {
        tool["json_schema"] = {{"name", order[i]}, {"description", Str(data, "description")}, {"parameters", data["parameters"]}};
      }
      if (letta.contains("source_code") && letta["source_code"].is_object()) {
        CAPSULE_ASSIGN_OR_RETURN(tool["source_code"], LoadAttachment(dir_, Str(letta["source_code"], "sha256")));
      }
      tools.push_back(std::move(tool));
    }
    return tools;
  }

  Json LlmConfig(const std::vector<Event>& events) {
    Json config;
    std::string provider, model;
    for (const Event& event : events) {
      if (event.type != "model_switch" && event.type != "assistant_message") continue;
      provider = Str(event.data, "provider");
      model = Str(event.data, "model");
      if (event.type == "model_switch") config = event.data.value("letta", Json::object()).value("llm_config", Json());
    }
    if (model.empty() && config.is_null()) return nullptr;
    if (config.is_object() && Str(config, "model") == model) return config;
    return {{"model", model}, {"model_endpoint_type", EndpointType(provider)}, {"context_window", 128000}};
  }

  // The message of `event` as the agent file holds it, without content.
  Json MessageHead(const Event& event, const std::string& role) {
    Json letta = event.data.value("letta", Json::object());
    Json message = Json::object();
    for (const std::string& key : CarriedMessageFields()) {
      if (letta.contains(key)) message[key] = letta[key];
    }
    if (Str(message, "id").empty()) message["id"] = "message-capsule-" + std::to_string(++generated_);
    if (Str(message, "created_at").empty()) message["created_at"] = event.ts;
    message["type"] = "message";
    message["role"] = role;
    message["agent_id"] = agent_id_;
    message["content"] = Json::array();
    return message;
  }

  Result<Json> Messages(const std::vector<Event>& events, const std::string& system_text) {
    Json messages = Json::array();
    if (!events.empty()) first_ts_ = events.front().ts;
    Json head = settings_.value("system_message", Json::object());
    if (!system_text.empty() || !head.empty()) {
      Json message = Json::object();
      for (auto it = head.begin(); it != head.end(); ++it) message[it.key()] = it.value();
      if (Str(message, "id").empty()) message["id"] = "message-0";
      if (Str(message, "created_at").empty() && !first_ts_.empty()) message["created_at"] = first_ts_;
      message["type"] = "message";
      message["role"] = "system";
      message["agent_id"] = agent_id_;
      message["content"] = Json::array({{{"type", "text"}, {"text", system_text}}});
      messages.push_back(std::move(message));
    }
    std::string open_id;  // the assistant message being built: the id its events share
    for (const Event& event : events) {
      const std::string& type = event.type;
      bool assistant_side = type == "reasoning" || type == "assistant_message" || type == "tool_call";
      if (!assistant_side) open_id.clear();
      if (type == "system" || type == "user_message") {
        Json message = MessageHead(event, type == "system" ? "system" : "user");
        message["content"].push_back({{"type", "text"}, {"text", Str(event.data, "text")}});
        messages.push_back(std::move(message));
      } else if (type == "tool_result") {
        Json message = MessageHead(event, "tool");
        const Json& content = event.data["content"];
        message["content"].push_back({{"type", "text"}, {"text", content.is_string() ? content.get<std::string>() : content.dump()}});
        message["tool_call_id"] = Str(event.data, "call_id");
        bool is_error = event.data.value("is_error", false);
        if (!message.contains("tool_returns") && is_error) message["tool_returns"] = Json::array({{{"status", "error"}}});
        messages.push_back(std::move(message));
      } else if (assistant_side) {
        std::string id = Str(event.data.value("letta", Json::object()), "id");
        if (open_id.empty() || id != open_id || messages.back()["role"] != "assistant") {
          Json message = MessageHead(event, "assistant");
          message["model"] = Str(event.data, "model");
          open_id = Str(message, "id");
          messages.push_back(std::move(message));
        }
        Json& message = messages.back();
        if (type == "reasoning") {
          if (!Str(event.data, "encrypted").empty()) {
            message["content"].push_back({{"type", "redacted_reasoning"}, {"data", Str(event.data, "encrypted")}});
          } else {
            Json part = {{"type", "reasoning"}, {"reasoning", Str(event.data, "text")},
                         {"is_native", event.data.value("is_native", Json(true))}};
            if (!Str(event.data, "signature").empty()) part["signature"] = Str(event.data, "signature");
            message["content"].push_back(std::move(part));
          }
        } else if (type == "assistant_message") {
          message["content"].push_back({{"type", "text"}, {"text", Str(event.data, "text")}});
        } else {
          if (!message.contains("tool_calls")) message["tool_calls"] = Json::array();
          message["tool_calls"].push_back({{"id", Str(event.data, "call_id")},
                                           {"type", "function"},
                                           {"function", {{"name", Str(event.data, "name")}, {"arguments", event.data["arguments"].dump()}}}});
        }
      }
      // model_switch and tool_defined have no message: they live in llm_config and tools.
    }
    return messages;
  }

  std::string dir_;
  Json settings_;
  std::string agent_id_, first_ts_;
  size_t generated_ = 0;
};

}  // namespace

Result<Json> WriteAgentFile(const std::string& capsule_dir) {
  CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadOptional(capsule_dir, kAgentFileSettingsPath));
  Json settings = Json::object();
  if (!text.empty()) {
    CAPSULE_ASSIGN_OR_RETURN(settings, ParseJson(text, kAgentFileSettingsPath));
  }
  if (!settings.is_object()) return Status::InvalidArgument(kAgentFileSettingsPath, "must be a JSON object");
  return Writer(capsule_dir, std::move(settings)).Write();
}

}  // namespace capsule::journal::interop
