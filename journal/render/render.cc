#include "journal/render/render.h"

#include "journal/render/conversation.h"
#include "journal/render/providers.h"
#include "journal/render/trim.h"

namespace capsule::journal::render {

namespace {

std::string StringField(const Event& event, const char* key) {
  auto it = event.data.find(key);
  return it != event.data.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

std::string ProviderName(Provider provider) {
  switch (provider) {
    case Provider::kOpenAI: return "openai";
    case Provider::kAnthropic: return "anthropic";
    case Provider::kGemini: return "gemini";
  }
  return "unknown";
}

Result<Provider> ParseProvider(std::string_view name) {
  for (Provider provider : {Provider::kOpenAI, Provider::kAnthropic, Provider::kGemini}) {
    if (name == ProviderName(provider)) return provider;
  }
  return Status::InvalidArgument("provider " + std::string(name), "unknown (known: openai, anthropic, gemini)");
}

bool ModelChoices::NamesModel(std::string_view type) { return type == "model_switch" || type == "assistant_message"; }

void ModelChoices::Add(const Event& event) {
  if (!NamesModel(event.type)) return;
  Named& named = conversations_[event.Conversation()];
  named.current_provider = StringField(event, "provider");
  std::string model = StringField(event, "model");
  if (!model.empty()) named.latest_model[named.current_provider] = std::move(model);
}

std::vector<std::string> ModelChoices::Conversations() const {
  std::vector<std::string> names;
  for (const auto& [conversation, named] : conversations_) names.push_back(conversation);
  return names;
}

Result<RenderTarget> ModelChoices::Resolve(const TargetRequest& request) const {
  RenderTarget target;
  target.conversation = request.conversation;
  target.context_tokens = request.context_tokens;
  if (request.max_tokens) target.max_tokens = *request.max_tokens;

  auto named = conversations_.find(request.conversation);
  std::string provider_name;
  if (request.provider) {
    provider_name = *request.provider;
  } else if (named != conversations_.end()) {
    provider_name = named->second.current_provider;
  } else {
    return Status::InvalidArgument("conversation " + request.conversation,
                                   "names no provider (no model_switch or assistant_message): give --provider and --model");
  }
  Result<Provider> provider = ParseProvider(provider_name);
  if (!provider.ok()) {
    return request.provider ? provider.status()
                            : provider.status().WithContext("conversation " + request.conversation + ": current");
  }
  target.provider = *provider;

  if (request.model) {
    target.model = *request.model;
  } else {
    if (named != conversations_.end()) {
      auto model = named->second.latest_model.find(provider_name);
      if (model != named->second.latest_model.end()) target.model = model->second;
    }
    if (target.model.empty()) {
      return Status::InvalidArgument("--provider " + provider_name,
                                     "conversation " + request.conversation + " names no model of it: give --model");
    }
  }
  return target;
}

Result<RenderTarget> ResolveTarget(const std::vector<Event>& events, const TargetRequest& request) {
  ModelChoices choices;
  for (const Event& event : events) choices.Add(event);
  return choices.Resolve(request);
}

Result<Json> RenderRequest(const std::vector<Event>& events, const RenderTarget& target,
                           const TokenEstimator& estimator) {
  Conversation conversation = BuildConversation(events, target, estimator);
  if (conversation.units.empty()) {
    return Status::InvalidArgument("conversation " + target.conversation,
                                   "nothing to send (no user message, assistant message, tool call or result)");
  }
  CAPSULE_ASSIGN_OR_RETURN(Window window, ChooseWindow(conversation, target.context_tokens, estimator));
  switch (target.provider) {
    case Provider::kOpenAI: return RenderOpenAI(conversation, window, target);
    case Provider::kAnthropic: return RenderAnthropic(conversation, window, target);
    case Provider::kGemini: return RenderGemini(conversation, window, target);
  }
  return Status::InvalidArgument("render", "unknown provider");
}

Result<Json> RenderRequest(const std::vector<Event>& events, const RenderTarget& target) {
  static const ByteTokenEstimator kDefault;
  return RenderRequest(events, target, kDefault);
}

}  // namespace capsule::journal::render
