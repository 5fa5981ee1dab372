// Reading an agent file into capsules (agent_file.h; man/capsule.5, AGENT FILE).
#include <map>
#include <set>

#include "capsule/base/sha256.h"
#include "capsule/format/environment_spec.h"
#include "journal/event.h"
#include "journal/interop/agent_file.h"
#include "journal/interop/agent_file_fields.h"

namespace capsule::journal::interop {

namespace {

bool IsEmptyValue(const Json& value) {
  return value.is_null() || ((value.is_array() || value.is_object() || value.is_string()) && value.empty()) ||
         (value.is_boolean() && !value.get<bool>());
}

std::string Str(const Json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Collects what has no place, as "path.field" with how many times.
class Dropped {
 public:
  void Add(const std::string& what) { ++counts_[what]; }
  // Each member of `object` not in `known` that holds something.
  void Unknown(const Json& object, const std::set<std::string>& known, const std::string& where) {
    for (auto it = object.begin(); it != object.end(); ++it) {
      if (known.count(it.key()) == 0 && !IsEmptyValue(it.value())) Add(where + "." + it.key());
    }
  }
  std::vector<std::string> List() const {
    std::vector<std::string> out;
    for (const auto& [what, n] : counts_) out.push_back(n == 1 ? what : what + " (" + std::to_string(n) + ")");
    return out;
  }

 private:
  std::map<std::string, size_t> counts_;
};

// The members of `object` named in `keys` that hold something.
Json Pick(const Json& object, const std::set<std::string>& keys) {
  Json out = Json::object();
  for (const std::string& key : keys) {
    auto it = object.find(key);
    if (it != object.end() && !it->is_null()) out[key] = *it;
  }
  return out;
}

std::string ProviderOf(const std::string& endpoint_type) {
  if (endpoint_type == "anthropic" || endpoint_type == "bedrock") return "anthropic";
  if (endpoint_type == "google_ai" || endpoint_type == "google_vertex") return "gemini";
  return "openai";  // the rest speak OpenAI's Chat Completions
}

// The names a "secrets" or "tool_exec_environment_variables" member gives: an object's keys,
// or the "key" of each item of an array. Values are never read.
Result<std::vector<std::string>> SecretNames(const Json& value, const std::string& where) {
  std::vector<std::string> names;
  if (value.is_object()) {
    for (auto it = value.begin(); it != value.end(); ++it) names.push_back(it.key());
  } else if (value.is_array()) {
    for (const Json& item : value) {
      if (!item.is_object() || !item.contains("key") || !item["key"].is_string()) {
        return Status::InvalidArgument(where, "each item must be an object with a \"key\"");
      }
      names.push_back(item["key"].get<std::string>());
    }
  } else if (!value.is_null()) {
    return Status::InvalidArgument(where, "must be an object or an array");
  }
  return names;
}

class AgentReader {
 public:
  AgentReader(const Json& file, const Json& agent, const std::string& where, Dropped* dropped)
      : file_(file), agent_(agent), where_(where), dropped_(dropped) {}

  Result<NewCapsule> Read() {
    if (!agent_.is_object()) return Status::InvalidArgument(where_, "must be an object");
    dropped_->Unknown(agent_, AgentFields(), where_);
    for (const char* none : {"initial_message_sequence", "source_ids", "files_agents", "group_ids", "memory_variables"}) {
      if (agent_.contains(none) && !IsEmptyValue(agent_[none])) dropped_->Add(where_ + "." + none);
    }
    NewCapsule out;
    out.agent.name = Str(agent_, "name");
    if (out.agent.name.empty()) return Status::InvalidArgument(where_ + ".name", "missing: a capsule needs its agent's name");
    out.agent.id = AgentIdFromName(out.agent.name);
    out.instructions = Str(agent_, "system");
    CAPSULE_RETURN_IF_ERROR(ReadLlmConfig());
    CAPSULE_RETURN_IF_ERROR(ReadBlocks(&out));
    CAPSULE_RETURN_IF_ERROR(ReadTools(&out));
    // The model_switch that names llm_config's model opens the journal.
    if (!model_.empty()) {
      Json data = {{"provider", provider_}, {"model", model_}};
      if (!llm_config_.empty()) data["letta"] = {{"llm_config", llm_config_}};
      out.events.insert(out.events.begin(), {"model_switch", std::move(data), FirstTime()});
    }
    CAPSULE_RETURN_IF_ERROR(ReadSecrets(&out));
    CAPSULE_RETURN_IF_ERROR(ReadMessages(&out));
    settings_["agent"] = Pick(agent_, CarriedAgentFields());
    settings_["agent_id"] = Str(agent_, "id");
    if (agent_.contains("in_context_message_ids") && agent_["in_context_message_ids"].is_array()) {
      settings_["in_context_message_ids"] = agent_["in_context_message_ids"];
    }
    if (file_.contains("metadata") && !file_["metadata"].is_null()) settings_["file_metadata"] = file_["metadata"];
    if (file_.contains("created_at") && !file_["created_at"].is_null()) settings_["file_created_at"] = file_["created_at"];
    out.settings = settings_;
    return out;
  }

 private:
  Status ReadLlmConfig() {
    auto it = agent_.find("llm_config");
    if (it == agent_.end() || it->is_null()) return Status::Ok();
    if (!it->is_object()) return Status::InvalidArgument(where_ + ".llm_config", "must be an object");
    dropped_->Unknown(*it, LlmConfigFields(), where_ + ".llm_config");
    llm_config_ = Pick(*it, LlmConfigFields());
    model_ = Str(*it, "model");
    provider_ = ProviderOf(Str(*it, "model_endpoint_type"));
    return Status::Ok();
  }

  Status ReadBlocks(NewCapsule* out) {
    std::vector<Json> blocks;
    auto ids = agent_.find("block_ids");
    if (ids != agent_.end() && ids->is_array()) {
      for (const Json& id : *ids) {
        const Json* found = FindById("blocks", id);
        if (found == nullptr) return Status::InvalidArgument(where_ + ".block_ids", "names " + id.dump() + ", which the file's blocks lack");
        blocks.push_back(*found);
      }
    }
    auto inline_blocks = agent_.find("memory_blocks");
    if (inline_blocks != agent_.end() && inline_blocks->is_array()) {
      for (const Json& block : *inline_blocks) blocks.push_back(block);
    }
    Json block_ids = Json::object();
    std::set<std::string> labels;
    for (size_t i = 0; i < blocks.size(); ++i) {
      const Json& json = blocks[i];
      std::string at = "blocks[" + Str(json, "id") + "]";
      if (!json.is_object() || !json.contains("value") || !json["value"].is_string()) {
        return Status::InvalidArgument(at, "a block needs a string \"value\"");
      }
      dropped_->Unknown(json, BlockFields(), "blocks[*]");
      MemoryBlock block;
      block.label = Str(json, "label");
      CAPSULE_RETURN_IF_ERROR(CheckBlockLabel(block.label).WithContext(at));
      if (!labels.insert(block.label).second) return Status::InvalidArgument(at, "a second block labelled " + block.label);
      block.description = Str(json, "description");
      block.value = json["value"].get<std::string>();
      if (json.contains("limit") && json["limit"].is_number_unsigned()) block.limit = json["limit"].get<uint64_t>();
      block.read_only = json.value("read_only", Json(false)).is_boolean() && json.value("read_only", false);
      Json extra = Pick(json, CarriedBlockFields());
      extra["id"] = Str(json, "id");
      block_ids[block.label] = extra;
      out->blocks.push_back(std::move(block));
    }
    settings_["blocks"] = block_ids;
    return Status::Ok();
  }

  const Json* FindById(const char* list, const Json& id) {
    auto it = file_.find(list);
    if (it == file_.end() || !it->is_array()) return nullptr;
    for (const Json& item : *it) {
      if (item.is_object() && item.contains("id") && item["id"] == id) return &item;
    }
    return nullptr;
  }

  Status ReadTools(NewCapsule* out) {
    auto ids = agent_.find("tool_ids");
    if (ids == agent_.end() || !ids->is_array()) return Status::Ok();
    std::vector<std::string> names;
    for (const Json& id : *ids) {
      const Json* tool = FindById("tools", id);
      if (tool == nullptr) return Status::InvalidArgument(where_ + ".tool_ids", "names " + id.dump() + ", which the file's tools lack");
      std::string at = "tools[" + Str(*tool, "id") + "]";
      dropped_->Unknown(*tool, ToolFields(), "tools[*]");
      Json schema = tool->value("json_schema", Json::object());
      if (!schema.is_object()) return Status::InvalidArgument(at + ".json_schema", "must be an object");
      std::string name = Str(*tool, "name");
      if (name.empty()) name = Str(schema, "name");
      if (name.empty()) return Status::InvalidArgument(at, "a tool needs a name");
      std::string description = Str(*tool, "description");
      if (description.empty()) description = Str(schema, "description");
      Json parameters = schema.value("parameters", Json{{"type", "object"}, {"properties", Json::object()}});
      if (!parameters.is_object()) return Status::InvalidArgument(at + ".json_schema.parameters", "must be an object");
      Json letta = Pick(*tool, CarriedToolFields());
      letta["id"] = Str(*tool, "id");
      std::string source = Str(*tool, "source_code");
      if (!source.empty()) {
        std::string sha = Sha256Hex(source);
        out->attachments[sha] = source;
        letta["source_code"] = {{"sha256", sha}, {"media_type", "text/plain"}, {"name", name + SourceSuffix(Str(*tool, "source_type"))}};
      }
      Json data = {{"name", name}, {"description", description}, {"parameters", parameters}, {"letta", letta}};
      out->events.push_back({"tool_defined", std::move(data), FirstTime()});
      names.push_back(name);
    }
    out->thread_tools = names;
    return Status::Ok();
  }

  static std::string SourceSuffix(const std::string& source_type) {
    if (source_type == "python") return ".py";
    if (source_type == "typescript") return ".ts";
    if (source_type == "javascript") return ".js";
    return ".txt";
  }

  Status ReadSecrets(NewCapsule* out) {
    std::set<std::string> seen;
    for (const char* key : {"secrets", "tool_exec_environment_variables"}) {
      auto it = agent_.find(key);
      if (it == agent_.end()) continue;
      CAPSULE_ASSIGN_OR_RETURN(std::vector<std::string> names, SecretNames(*it, where_ + "." + key));
      seen.insert(names.begin(), names.end());
    }
    out->secret_names.assign(seen.begin(), seen.end());  // sorted, each once
    return Status::Ok();
  }

  // The time of the file, for events that have none of their own.
  std::string FirstTime() {
    if (std::optional<std::string> ts = ToUtcSeconds(Str(file_, "created_at"))) return *ts;
    return UtcNowRfc3339();
  }

  Status ReadMessages(NewCapsule* out) {
    auto messages = agent_.find("messages");
    if (messages == agent_.end() || messages->is_null()) return Status::Ok();
    if (!messages->is_array()) return Status::InvalidArgument(where_ + ".messages", "must be an array");
    std::string last_ts = FirstTime();
    for (size_t i = 0; i < messages->size(); ++i) {
      const Json& message = (*messages)[i];
      std::string at = where_ + ".messages[" + std::to_string(i) + "]";
      if (!message.is_object()) return Status::InvalidArgument(at, "must be an object");
      dropped_->Unknown(message, MessageFields(), where_ + ".messages[*]");
      Json letta = Pick(message, CarriedMessageFields());
      std::string ts = last_ts;
      if (std::optional<std::string> own = ToUtcSeconds(Str(message, "created_at"))) ts = *own;
      last_ts = ts;
      std::string role = Str(message, "role");
      // The first message, when it is the system's, is the system text Letta compiled from the
      // agent's system and blocks: the capsule renders it again from the same, so it is kept
      // as its id and time only.
      if (i == 0 && role == "system") {
        settings_["system_message"] = letta;
        continue;
      }
      CAPSULE_RETURN_IF_ERROR(ReadMessage(message, role, at, letta, ts, out));
    }
    return Status::Ok();
  }

  Status ReadMessage(const Json& message, const std::string& role, const std::string& at, const Json& letta,
                     const std::string& ts, NewCapsule* out) {
    std::vector<Json> parts;
    const Json& content = message.contains("content") ? message["content"] : Json();
    if (content.is_string()) {
      parts.push_back({{"type", "text"}, {"text", content}});
    } else if (content.is_array()) {
      for (const Json& part : content) parts.push_back(part);
    } else if (!content.is_null()) {
      return Status::InvalidArgument(at + ".content", "must be a string or an array of parts");
    }
    auto add = [&](const std::string& type, Json data) {
      data["letta"] = letta;
      out->events.push_back({type, std::move(data), ts});
    };
    std::string model = Str(message, "model").empty() ? model_ : Str(message, "model");
    if (role == "user" || role == "system") {
      std::string text;
      size_t texts = 0;
      for (const Json& part : parts) {
        if (Str(part, "type") != "text") {
          dropped_->Add(at.substr(0, at.rfind('[')) + "[*].content[type " + Str(part, "type") + "]");
          continue;
        }
        text += (texts++ == 0 ? "" : "\n\n") + Str(part, "text");
      }
      if (texts > 1) dropped_->Add(at + ".content: " + std::to_string(texts) + " text parts joined into one");
      add(role == "user" ? "user_message" : "system", {{"text", text}});
      return Status::Ok();
    }
    if (role == "assistant") {
      if (model.empty()) return Status::InvalidArgument(at, "an assistant message with no model (neither it nor the agent's llm_config names one)");
      for (const Json& part : parts) {
        std::string type = Str(part, "type");
        if (type == "text") {
          add("assistant_message", {{"text", Str(part, "text")}, {"provider", provider_}, {"model", model}});
        } else if (type == "reasoning") {
          Json data = {{"text", Str(part, "reasoning")}, {"provider", provider_}, {"model", model}};
          if (!Str(part, "signature").empty()) data["signature"] = Str(part, "signature");
          if (part.contains("is_native")) data["is_native"] = part["is_native"];
          add("reasoning", std::move(data));
        } else if (type == "redacted_reasoning") {
          add("reasoning", {{"text", ""}, {"encrypted", Str(part, "data")}, {"provider", provider_}, {"model", model}});
        } else {
          dropped_->Add(where_ + ".messages[*].content[type " + type + "]");
        }
      }
      auto calls = message.find("tool_calls");
      if (calls != message.end() && calls->is_array()) {
        for (size_t c = 0; c < calls->size(); ++c) {
          const Json& call = (*calls)[c];
          std::string call_at = at + ".tool_calls[" + std::to_string(c) + "]";
          const Json& function = call.is_object() ? call.value("function", Json()) : Json();
          if (!function.is_object() || Str(function, "name").empty() || Str(call, "id").empty()) {
            return Status::InvalidArgument(call_at, "a call needs an id and a function with a name");
          }
          Json arguments = Json::object();
          std::string text = Str(function, "arguments");
          if (!text.empty()) {
            Result<Json> parsed = ParseJson(text, call_at + ".function.arguments");
            if (!parsed.ok()) return parsed.status();
            if (!parsed->is_object()) return Status::InvalidArgument(call_at + ".function.arguments", "must be a JSON object");
            arguments = std::move(*parsed);
          }
          add("tool_call", {{"call_id", Str(call, "id")}, {"name", Str(function, "name")}, {"arguments", arguments}});
        }
      }
      return Status::Ok();
    }
    if (role == "tool") {
      std::string call_id = Str(message, "tool_call_id");
      if (call_id.empty()) return Status::InvalidArgument(at, "a tool message needs its tool_call_id");
      std::string text;
      for (const Json& part : parts) text += Str(part, "text");
      bool is_error = false;
      auto returns = message.find("tool_returns");
      if (returns != message.end() && returns->is_array()) {
        for (const Json& r : *returns) is_error = is_error || Str(r, "status") == "error";
      }
      add("tool_result", {{"call_id", call_id}, {"content", text}, {"is_error", is_error}});
      return Status::Ok();
    }
    return Status::InvalidArgument(at + ".role", "\"" + role + "\": a capsule journal has no event for this role (user, assistant, tool, system)");
  }

  const Json& file_;
  const Json& agent_;
  std::string where_;
  Dropped* dropped_;
  Json llm_config_ = Json::object();
  std::string model_, provider_ = "openai";
  Json settings_ = Json::object();
};

}  // namespace

bool LooksLikeAgentFile(const Json& document) {
  if (!document.is_object()) return false;
  if (document.contains("agents") && document["agents"].is_array()) return true;
  return document.contains("messages") && document.contains("llm_config");
}

Result<AgentFileImport> ReadAgentFile(const Json& document, const std::optional<std::string>& only_agent) {
  if (!document.is_object()) return Status::InvalidArgument("agent file", "must be a JSON object");
  if (!document.contains("agents")) {
    return Status::InvalidArgument("agent file", "the single-agent form of before 2025 (no \"agents\" array) is not read; export the agent again from Letta");
  }
  if (!document["agents"].is_array()) return Status::InvalidArgument("agent file: agents", "must be an array");
  Dropped dropped;
  dropped.Unknown(document, FileFields(), "file");
  for (const char* none : {"groups", "files", "sources", "mcp_servers"}) {
    if (document.contains(none) && !IsEmptyValue(document[none])) dropped.Add(std::string(none));
  }
  AgentFileImport out;
  std::set<std::string> ids;
  bool found = false;
  const Json& agents = document["agents"];
  for (size_t i = 0; i < agents.size(); ++i) {
    const Json& agent = agents[i];
    if (only_agent && !(agent.is_object() && (Str(agent, "name") == *only_agent || Str(agent, "id") == *only_agent))) continue;
    found = true;
    AgentReader reader(document, agent, "agents[" + std::to_string(i) + "]", &dropped);
    CAPSULE_ASSIGN_OR_RETURN(NewCapsule capsule, reader.Read());
    std::string base = capsule.agent.id;
    for (int n = 2; !ids.insert(capsule.agent.id).second; ++n) capsule.agent.id = base + "-" + std::to_string(n);
    for (const std::string& name : capsule.secret_names) out.secret_names.push_back(name);
    out.capsules.push_back(std::move(capsule));
  }
  if (only_agent && !found) {
    std::string names;
    for (const Json& agent : agents) names += (names.empty() ? "" : ", ") + Str(agent, "name");
    return Status::NotFound("--agent " + *only_agent, "no agent of the file has this name or id (it has: " + names + ")");
  }
  if (out.capsules.empty()) return Status::InvalidArgument("agent file: agents", "holds no agent");
  out.dropped = dropped.List();
  return out;
}

}  // namespace capsule::journal::interop
