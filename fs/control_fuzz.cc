// libFuzzer target: arbitrary bytes as what a control channel's peer sends. The first byte
// picks the end: a command line as the server parses it (ParseControlCommand), or a reply as
// the client parses it (ParseControlReply). Either must refuse with a Status, never throw,
// crash or accept what is not one. Built and run by tests/fuzz.sh control.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fs/control_client.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    auto command = capsule::fs::ParseControlCommand(text);
    if (command.ok()) {
      const std::string& verb = command->verb;
      bool known = verb == "status" || verb == "freeze" || verb == "thaw" || verb == "retire" || verb == "preverify";
      if (!known || command->move.size() > 64) std::abort();
      if (!command->move.empty() && verb != "freeze" && verb != "thaw") std::abort();
    }
  } else {
    auto reply = capsule::fs::ParseControlReply(text, "status", "control.sock");
    if (reply.ok() && (!reply->is_object() || !(*reply)["ok"].is_boolean())) std::abort();
  }
  return 0;
}
