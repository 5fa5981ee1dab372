#include "journal/owned/search_index.h"

#include <cmath>

#include "journal/owned/projector.h"

namespace capsule::owned {

Result<std::string> SearchableText(const journal::Event& event) {
  const Json& data = event.data;
  if (event.type == "fact_remembered") {
    const Json& value = data["value"];
    std::string text;
    if (value.is_string()) {
      text = value.get<std::string>();
    } else {
      CAPSULE_ASSIGN_OR_RETURN(text, CanonicalJson(value, "fact value"));
    }
    return data["subject"].get<std::string>() + " " + data["key"].get<std::string>() + " " + text;
  }
  std::string body;
  if (event.type == "tool_call") {
    CAPSULE_ASSIGN_OR_RETURN(body, CanonicalJson(data["arguments"], "tool_call arguments"));
    return data["name"].get<std::string>() + " " + body;
  }
  if (event.type == "tool_result") {
    const Json& content = data["content"];
    if (content.is_string()) {
      body = content.get<std::string>();
    } else {
      CAPSULE_ASSIGN_OR_RETURN(body, CanonicalJson(content, "tool_result content"));
    }
    if (body.size() > kTrimThresholdBytes) {
      size_t cut = kTrimPrefixBytes;
      while (cut > 0 && (static_cast<unsigned char>(body[cut]) & 0xC0) == 0x80) --cut;
      body.resize(cut);
    }
    return body;
  }
  return data["text"].get<std::string>();
}

std::string EmbeddingProblem(const Json& data) {
  auto it = data.find("embedding");
  if (it == data.end()) return "";
  const Json& e = *it;
  if (!e.is_object()) return "data.embedding: must be an object {model, dims, vector}";
  auto model = e.find("model");
  if (model == e.end() || !model->is_string() || model->get<std::string>().empty()) {
    return "data.embedding.model: must be a non-empty string";
  }
  auto dims = e.find("dims");
  if (dims == e.end() || !dims->is_number_unsigned() || dims->get<uint64_t>() == 0 ||
      dims->get<uint64_t>() > kMaxEmbeddingDims) {
    return "data.embedding.dims: must be a whole number from 1 to " + std::to_string(kMaxEmbeddingDims);
  }
  auto vector = e.find("vector");
  if (vector == e.end() || !vector->is_array() || vector->size() != dims->get<uint64_t>()) {
    return "data.embedding.vector: must be an array of dims (" + std::to_string(dims->get<uint64_t>()) + ") numbers";
  }
  for (const Json& x : *vector) {
    if (!x.is_number() || !std::isfinite(x.get<double>())) return "data.embedding.vector: must hold only finite numbers";
  }
  return "";
}

std::optional<Embedding> EmbeddingOf(const Json& data) {
  if (!data.contains("embedding") || !EmbeddingProblem(data).empty()) return std::nullopt;
  const Json& e = data["embedding"];
  Embedding embedding;
  embedding.model = e["model"].get<std::string>();
  embedding.vector.reserve(e["vector"].size());
  for (const Json& x : e["vector"]) embedding.vector.push_back(static_cast<float>(x.get<double>()));
  return embedding;
}

}  // namespace capsule::owned
