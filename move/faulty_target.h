// Tests only: a TargetApi that wraps the real one and fails one named call, either before it
// runs (the request was lost) or after (the reply was lost); or crashes the target around it
// (the target is destroyed and rebuilt from its root folder, as a restarted sidecar is); or
// flips a byte of a call's stream (a corrupted chunk); or cuts the target off entirely (a
// partition). Everything else goes through untouched, so the real protocol code runs.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "move/target_api.h"

namespace capsule::move {

enum class Fault { kNone, kLoseRequest, kLoseReply, kCrashBefore, kCrashAfter, kCorrupt };

class FaultyTarget : public TargetApi {
 public:
  using Factory = std::function<std::unique_ptr<TargetApi>()>;
  explicit FaultyTarget(Factory factory) : factory_(std::move(factory)), inner_(factory_()) {}

  // The next `times` calls named `call` meet `fault`.
  void Arm(std::string call, Fault fault, int times = 1) {
    call_ = std::move(call);
    fault_ = fault;
    times_ = times;
  }
  // While partitioned, every call is lost before it runs.
  void set_partitioned(bool partitioned) { partitioned_ = partitioned; }
  int faults_fired() const { return fired_; }
  TargetApi* inner() { return inner_.get(); }
  void Restart() {
    inner_.reset();
    inner_ = factory_();
  }

  Result<OfferReply> Offer(const OfferRequest& request) override {
    return Wrap<OfferReply>("offer", nullptr, [&](ByteSource*) { return inner_->Offer(request); });
  }
  Result<HaveMap> Copy(const std::string& agent, const std::string& move, ByteSource* stream) override {
    return Wrap<HaveMap>("copy", stream, [&](ByteSource* s) { return inner_->Copy(agent, move, s); });
  }
  Status Switch(const std::string& agent, const std::string& move, ByteSource* stream) override {
    return Wrap<bool>("switch", stream, [&](ByteSource* s) -> Result<bool> {
             CAPSULE_RETURN_IF_ERROR(inner_->Switch(agent, move, s));
             return true;
           }).status();
  }
  Status Activate(const std::string& agent, const std::string& move, uint64_t epoch) override {
    return Wrap<bool>("activate", nullptr, [&](ByteSource*) -> Result<bool> {
             CAPSULE_RETURN_IF_ERROR(inner_->Activate(agent, move, epoch));
             return true;
           }).status();
  }
  Result<QueryReply> Query(const std::string& agent, const std::string& move) override {
    return Wrap<QueryReply>("query", nullptr, [&](ByteSource*) { return inner_->Query(agent, move); });
  }
  Status Abort(const std::string& agent, const std::string& move) override {
    return Wrap<bool>("abort", nullptr, [&](ByteSource*) -> Result<bool> {
             CAPSULE_RETURN_IF_ERROR(inner_->Abort(agent, move));
             return true;
           }).status();
  }

 private:
  // Flips one byte, 200 bytes into the stream.
  class CorruptingSource : public ByteSource {
   public:
    explicit CorruptingSource(ByteSource* in) : in_(in) {}
    Result<size_t> Read(char* buffer, size_t size) override {
      CAPSULE_ASSIGN_OR_RETURN(size_t n, in_->Read(buffer, size));
      if (!done_ && offset_ + n > kAt) {
        size_t at = kAt - offset_;
        buffer[at] = static_cast<char>(buffer[at] ^ 0x5a);
        done_ = true;
      }
      offset_ += n;
      return n;
    }

   private:
    static constexpr uint64_t kAt = 200;
    ByteSource* in_;
    uint64_t offset_ = 0;
    bool done_ = false;
  };

  template <typename T, typename F>
  Result<T> Wrap(const char* name, ByteSource* stream, F call) {
    if (partitioned_) return Status::Unavailable("target", std::string(name) + ": partitioned");
    Fault fault = Fault::kNone;
    if (times_ > 0 && call_ == name) {
      --times_;
      ++fired_;
      fault = fault_;
    }
    switch (fault) {
      case Fault::kNone: return call(stream);
      case Fault::kLoseRequest: return Status::Unavailable("target", std::string(name) + ": request lost");
      case Fault::kCrashBefore:
        Restart();
        return Status::Unavailable("target", std::string(name) + ": the target crashed");
      case Fault::kLoseReply:
      case Fault::kCrashAfter: {
        Result<T> ran = call(stream);
        if (fault == Fault::kCrashAfter) Restart();
        return Status::Unavailable("target", std::string(name) + (ran.ok() ? " ran, " : " failed, ") + "its reply was lost");
      }
      case Fault::kCorrupt: {
        CorruptingSource corrupt(stream);
        return call(stream ? &corrupt : nullptr);
      }
    }
    return call(stream);
  }

  Factory factory_;
  std::unique_ptr<TargetApi> inner_;
  std::string call_;
  Fault fault_ = Fault::kNone;
  int times_ = 0;
  int fired_ = 0;
  bool partitioned_ = false;
};

}  // namespace capsule::move
