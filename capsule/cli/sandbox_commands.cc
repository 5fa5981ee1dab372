// capsule sandbox build|ls|rm: the machine's cache of sandbox root file systems
// (sandbox/sandbox_cache.h), each built once per digest of what determines it.
#include <ctime>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

#include "capsule/base/file_io.h"
#include "capsule/cli/cli.h"
#include "sandbox/sandbox_cache.h"
#include "sandbox/sandbox_spec.h"

namespace capsule::cli {

namespace {

struct SandboxArgs {
  std::string path, digest;
  std::string cache = sandbox::SandboxCache::DefaultRoot();
};

std::string Size(uint64_t bytes) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << static_cast<double>(bytes) / (1024.0 * 1024.0) << " MiB";
  return out.str();
}

std::string Time(int64_t seconds) {
  std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm {};
  ::gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::string Packages(const std::vector<std::string>& packages) {
  std::string out;
  for (const std::string& p : packages) out += (out.empty() ? "" : ",") + p;
  return out.empty() ? "-" : out;
}

Json EntryJson(const sandbox::SandboxEntry& entry) {
  return {{"digest", entry.digest},   {"image", entry.image}, {"packages", entry.packages}, {"rootfs", entry.rootfs},
          {"size", entry.size},       {"built", Time(entry.built)}, {"last_used", Time(entry.last_used)}};
}

int RunBuild(const SandboxArgs& args) {
  Result<std::string> dir = ResolveCapsule(args.path);
  if (!dir.ok()) return Fail(dir.status());
  Result<sandbox::SandboxSpec> spec = sandbox::SandboxSpec::Load(*dir);
  if (!spec.ok()) return Fail(spec.status().WithContext(args.path));
  if (Status outside = CheckOutsideCapsules("--cache", args.cache); !outside.ok()) return Fail(outside);
  Result<sandbox::SandboxCache> cache = sandbox::SandboxCache::Open(args.cache);
  if (!cache.ok()) return Fail(cache.status());
  if (!JsonOutput()) std::cerr << "capsule: sandbox " << spec->image << " (" << Packages(spec->packages) << ")...\n";
  Result<sandbox::SandboxCache::Built> built = cache->Build(*spec);
  if (!built.ok()) return Fail(built.status().WithContext("sandbox build"));
  if (JsonOutput()) {
    Json out = EntryJson(built->entry);
    out["cache_hit"] = built->cache_hit;
    out["seconds"] = built->seconds;
    return PrintJson(out);
  }
  std::cout << "sandbox " << built->entry.digest.substr(0, 12) << " " << built->entry.image << " ("
            << Packages(built->entry.packages) << "): " << (built->cache_hit ? "in the cache" : "built") << " in "
            << std::fixed << std::setprecision(1) << built->seconds << " s, " << Size(built->entry.size) << "\n";
  return kExitOk;
}

int RunList(const SandboxArgs& args) {
  if (!PathExists(args.cache)) {  // listing makes nothing: a cache not made yet holds no sandbox
    if (JsonOutput()) return PrintJson({{"cache", args.cache}, {"sandboxes", Json::array()}});
    return kExitOk;
  }
  Result<sandbox::SandboxCache> cache = sandbox::SandboxCache::Open(args.cache);
  if (!cache.ok()) return Fail(cache.status());
  Result<std::vector<sandbox::SandboxEntry>> entries = cache->List();
  if (!entries.ok()) return Fail(entries.status());
  if (JsonOutput()) {
    Json list = Json::array();
    for (const auto& entry : *entries) list.push_back(EntryJson(entry));
    return PrintJson({{"cache", cache->root()}, {"sandboxes", list}});
  }
  for (const auto& entry : *entries) {
    std::cout << entry.digest.substr(0, 12) << "  " << entry.image << "  " << std::setw(10) << Size(entry.size)
              << "  last used " << Time(entry.last_used) << "  " << Packages(entry.packages) << "\n";
  }
  return kExitOk;
}

int RunRemove(const SandboxArgs& args) {
  if (!PathExists(args.cache)) {
    return Fail(Status::NotFound("sandbox " + args.digest, "not in the cache " + args.cache + " (no such folder)"));
  }
  Result<sandbox::SandboxCache> cache = sandbox::SandboxCache::Open(args.cache);
  if (!cache.ok()) return Fail(cache.status());
  Result<sandbox::SandboxEntry> removed = cache->Remove(args.digest);
  if (!removed.ok()) return Fail(removed.status());
  if (JsonOutput()) return PrintJson({{"removed", EntryJson(*removed)}});
  std::cout << "removed sandbox " << removed->digest.substr(0, 12) << " (" << Size(removed->size) << ")\n";
  return kExitOk;
}

void AddCache(CLI::App* command, SandboxArgs* args) {
  command->add_option("--cache", args->cache,
                      "Folder of built sandboxes (default $CAPSULE_SANDBOX_CACHE or /var/cache/capsule/sandboxes)");
}

}  // namespace

void RegisterSandboxCommands(CLI::App& app, int* exit_code) {
  CLI::App* sandbox = app.add_subcommand(
      "sandbox", "The machine's cache of sandboxes: root file systems built from an environment spec's image and packages");
  sandbox->require_subcommand(1);

  auto build_args = std::make_shared<SandboxArgs>();
  CLI::App* build = sandbox->add_subcommand(
      "build", "Build the sandbox the capsule's environment spec describes (mmdebstrap), or find it in the cache");
  build->add_option("DIR", build_args->path, "Capsule folder or its mountpoint")->required();
  AddCache(build, build_args.get());
  AddJsonFlag(build);
  build->callback([build_args, exit_code] { *exit_code = RunBuild(*build_args); });

  auto ls_args = std::make_shared<SandboxArgs>();
  CLI::App* ls = sandbox->add_subcommand("ls", "List the cached sandboxes: digest, image, size, last use, packages");
  AddCache(ls, ls_args.get());
  AddJsonFlag(ls);
  ls->callback([ls_args, exit_code] { *exit_code = RunList(*ls_args); });

  auto rm_args = std::make_shared<SandboxArgs>();
  CLI::App* rm = sandbox->add_subcommand("rm", "Remove a cached sandbox (refused while a run uses it)");
  rm->add_option("DIGEST", rm_args->digest, "Its digest, or the first 8 or more hex digits of it")->required();
  AddCache(rm, rm_args.get());
  AddJsonFlag(rm);
  rm->callback([rm_args, exit_code] { *exit_code = RunRemove(*rm_args); });
}

}  // namespace capsule::cli
