// capsule render.
#include "capsule/cli/cli.h"

#include <iostream>
#include <memory>

#include "capsule/format/attachments.h"
#include "capsule/format/harness.h"
#include "capsule/format/memory_blocks.h"
#include "journal/journal.h"
#include "journal/render/render.h"

namespace capsule::cli {

namespace {

struct RenderArgs {
  std::string dir, provider, model, conversation = "main";
  uint64_t context_tokens = 0, max_tokens = 0;
  bool has_provider = false, has_model = false, has_context = false, has_max = false, pretty = false;
};

// The instructions with the memory blocks, the skills and the thread's narrowing, from
// harness/ and memory/blocks/ (capsule(5)).
Status AddHarness(const std::string& dir, const std::string& conversation, journal::render::RenderTarget* target) {
  CAPSULE_ASSIGN_OR_RETURN(std::string instructions, LoadInstructions(dir));
  CAPSULE_ASSIGN_OR_RETURN(std::vector<MemoryBlock> blocks, LoadMemoryBlocks(dir));
  target->instructions = InstructionsWithBlocks(instructions, blocks);
  CAPSULE_ASSIGN_OR_RETURN(std::vector<Skill> skills, LoadSkills(dir));
  for (const Skill& skill : skills) target->skills.push_back({skill.name, skill.description});
  CAPSULE_ASSIGN_OR_RETURN(std::optional<Thread> thread, LoadThread(dir, conversation));
  if (thread) target->tools = thread->tools;
  return Status::Ok();
}

// The bytes of every attachment the conversation's events name.
Status AddAttachments(const std::string& dir, const std::vector<journal::Event>& events,
                      journal::render::RenderTarget* target) {
  for (const journal::Event& event : events) {
    if (event.Conversation() != target->conversation) continue;
    auto list = event.data.find("attachments");
    if (list == event.data.end() || !list->is_array()) continue;
    for (const Json& item : *list) {
      std::string sha = item.is_object() ? item.value("sha256", "") : "";
      if (sha.empty() || target->attachments.count(sha)) continue;
      CAPSULE_ASSIGN_OR_RETURN(target->attachments[sha], LoadAttachment(dir, sha));
    }
  }
  return Status::Ok();
}

int RunRender(const RenderArgs& args) {
  Result<std::string> dir = ResolveCapsule(args.dir);
  if (!dir.ok()) return Fail(dir.status());
  Result<std::vector<journal::Event>> events = journal::Journal::Read(*dir);
  if (!events.ok()) return Fail(events.status().WithContext(args.dir));
  journal::render::TargetRequest request;
  if (args.has_provider) request.provider = args.provider;
  if (args.has_model) request.model = args.model;
  request.conversation = args.conversation;
  if (args.has_context) request.context_tokens = args.context_tokens;
  if (args.has_max) request.max_tokens = args.max_tokens;
  Result<journal::render::RenderTarget> target = journal::render::ResolveTarget(*events, request);
  if (!target.ok()) return Fail(target.status().WithContext("render"));
  Status harness = AddHarness(*dir, args.conversation, &*target);
  if (!harness.ok()) return Fail(harness.WithContext("render"));
  Status attachments = AddAttachments(*dir, *events, &*target);
  if (!attachments.ok()) return Fail(attachments.WithContext("render"));
  Result<Json> body = journal::render::RenderRequest(*events, *target);
  if (!body.ok()) return Fail(body.status());
  if (args.pretty) {
    std::cout << body->dump(2) << "\n";
  } else {
    Result<std::string> text = CanonicalJson(*body, "request");
    if (!text.ok()) return Fail(text.status());
    std::cout << *text << "\n";
  }
  return std::cout.flush() ? kExitOk : Fail("render: standard output: write failed");
}

}  // namespace

void RegisterRenderCommands(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<RenderArgs>();
  CLI::App* render = app.add_subcommand(
      "render", "Print the journal's conversation as the JSON request body of a provider's API");
  render->add_option("DIR", args->dir, "Capsule folder or its mountpoint")->required();
  CLI::Option* provider = render->add_option("--provider", args->provider,
                                             "openai, anthropic or gemini (default: the conversation's current one)")
                              ->check(OneOf({"openai", "anthropic", "gemini"}));
  CLI::Option* model = render->add_option("--model", args->model, "Model (default: the latest the journal names for the provider)");
  CLI::Option* context = render->add_option("--context-tokens", args->context_tokens,
                                            "Fit the request in N tokens (estimated): keep the newest messages, digest the rest")
                             ->check(PositiveWholeNumber());
  render->add_option("--conversation", args->conversation, "Conversation to render (default: main)");
  CLI::Option* max = render->add_option("--max-tokens", args->max_tokens, "Anthropic max_tokens (default: 4096)")
                         ->check(PositiveWholeNumber());
  render->add_flag("--pretty", args->pretty, "Indent the JSON (default: canonical, one line)");
  AddJsonFlag(render, "Accepted for uniformity (the request body is JSON); an error as JSON");
  render->callback([args, provider, model, context, max, exit_code] {
    args->has_provider = provider->count() > 0;
    args->has_model = model->count() > 0;
    args->has_context = context->count() > 0;
    args->has_max = max->count() > 0;
    *exit_code = RunRender(*args);
  });
}

}  // namespace capsule::cli
