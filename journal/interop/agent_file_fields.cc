#include "journal/interop/agent_file_fields.h"

namespace capsule::journal::interop {

const std::set<std::string>& FileFields() {
  static const std::set<std::string> fields = {"agents", "groups", "blocks", "files", "sources",
                                               "tools", "mcp_servers", "metadata", "created_at"};
  return fields;
}

const std::set<std::string>& CarriedAgentFields() {
  static const std::set<std::string> fields = {
      "tool_rules", "tags", "agent_type", "embedding_config", "include_base_tools", "include_multi_agent_tools",
      "include_base_tool_rules", "include_default_source", "description", "metadata", "model", "embedding",
      "context_window_limit", "embedding_chunk_size", "max_tokens", "max_reasoning_tokens", "enable_reasoner",
      "reasoning", "from_template", "template", "project", "project_id", "template_id", "base_template_id",
      "identity_ids", "message_buffer_autoclear", "enable_sleeptime", "response_format", "timezone",
      "max_files_open", "per_file_view_window_char_limit", "hidden"};
  return fields;
}

const std::set<std::string>& AgentFields() {
  static const std::set<std::string> fields = [] {
    std::set<std::string> all = CarriedAgentFields();
    for (const char* mapped : {"name", "memory_blocks", "tool_ids", "block_ids", "system", "llm_config", "id",
                               "in_context_message_ids", "messages", "secrets", "tool_exec_environment_variables",
                               // listed by name when they hold something (agent_file_read.cc)
                               "initial_message_sequence", "source_ids", "files_agents", "group_ids",
                               "memory_variables"}) {
      all.insert(mapped);
    }
    return all;
  }();
  return fields;
}

const std::set<std::string>& LlmConfigFields() {
  static const std::set<std::string> fields = {
      "model", "model_endpoint_type", "model_endpoint", "provider_name", "provider_category", "model_wrapper",
      "context_window", "put_inner_thoughts_in_kwargs", "handle", "temperature", "max_tokens", "enable_reasoner",
      "reasoning_effort", "max_reasoning_tokens", "frequency_penalty", "compatibility_type", "verbosity", "tier"};
  return fields;
}

const std::set<std::string>& CarriedBlockFields() {
  static const std::set<std::string> fields = {"project_id", "name", "is_template", "base_template_id", "deployment_id",
                                               "entity_id", "preserve_on_migration", "metadata", "hidden"};
  return fields;
}

const std::set<std::string>& BlockFields() {
  static const std::set<std::string> fields = [] {
    std::set<std::string> all = CarriedBlockFields();
    for (const char* mapped : {"value", "limit", "label", "read_only", "description", "id"}) all.insert(mapped);
    return all;
  }();
  return fields;
}

const std::set<std::string>& CarriedToolFields() {
  static const std::set<std::string> fields = {
      "tool_type", "source_type", "tags", "json_schema", "args_json_schema", "return_char_limit", "pip_requirements",
      "npm_requirements", "default_requires_approval", "created_by_id", "last_updated_by_id", "metadata_"};
  return fields;
}

const std::set<std::string>& ToolFields() {
  static const std::set<std::string> fields = [] {
    std::set<std::string> all = CarriedToolFields();
    for (const char* mapped : {"id", "name", "description", "source_code"}) all.insert(mapped);
    return all;
  }();
  return fields;
}

const std::set<std::string>& CarriedMessageFields() {
  static const std::set<std::string> fields = {"id",           "created_at", "name",     "otid",
                                               "sender_id",    "batch_item_id", "group_id", "tool_returns"};
  return fields;
}

const std::set<std::string>& MessageFields() {
  static const std::set<std::string> fields = [] {
    std::set<std::string> all = CarriedMessageFields();
    for (const char* mapped : {"type", "role", "content", "model", "agent_id", "tool_calls", "tool_call_id"}) all.insert(mapped);
    return all;
  }();
  return fields;
}

}  // namespace capsule::journal::interop
