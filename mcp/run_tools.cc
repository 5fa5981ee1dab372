// run_open, run_mark_awaiting, run_close and runs_in_flight: the run port, the shadow record
// of a framework's runs that lets another framework find what is in flight and resume it.
#include "journal/owned/ports_json.h"
#include "mcp/schema_parts.h"
#include "mcp/tools.h"

namespace capsule::mcp {

namespace {

std::string Arg(const Json& arguments, const char* name) { return arguments[name].get<std::string>(); }

Result<Json> Open(owned::CapsulePorts& ports, const Json& arguments) {
  CAPSULE_ASSIGN_OR_RETURN(owned::RunRecord run,
                           ports.OpenRun(Arg(arguments, "run_id"), Arg(arguments, "framework"),
                                         Arg(arguments, "thread_key"), arguments.value("conversation", "main")));
  return Json{{"run", owned::RunToJson(run)}};
}

Result<Json> MarkAwaiting(owned::CapsulePorts& ports, const Json& arguments) {
  CAPSULE_ASSIGN_OR_RETURN(owned::RunRecord run,
                           ports.MarkAwaiting(Arg(arguments, "run_id"), Arg(arguments, "awaiting")));
  return Json{{"run", owned::RunToJson(run)}};
}

Result<Json> Close(owned::CapsulePorts& ports, const Json& arguments) {
  std::optional<double> cost;
  if (arguments.contains("cost")) cost = arguments["cost"].get<double>();
  CAPSULE_ASSIGN_OR_RETURN(owned::RunRecord run, ports.CloseRun(Arg(arguments, "run_id"), Arg(arguments, "status"), cost));
  return Json{{"run", owned::RunToJson(run)}};
}

Result<Json> InFlight(owned::CapsulePorts& ports, const Json&) {
  CAPSULE_ASSIGN_OR_RETURN(std::vector<owned::RunRecord> runs, ports.Runs(true));
  Json out = Json::array();
  for (const owned::RunRecord& run : runs) out.push_back(owned::RunToJson(run));
  return Json{{"runs", std::move(out)}};
}

Json RunId() { return NameSchema("The run's id, chosen by the framework that opens it"); }

}  // namespace

std::vector<Tool> RunTools() {
  return {
      Tool{"run_open", "Open or resume a run",
           "Opens a run under a framework, or resumes one (awaiting, or even closed) under the framework named here: "
           "the run keeps the framework that opened it first and counts the resumes.",
           ObjectSchema({{"run_id", RunId()},
                         {"framework", NameSchema("The framework driving the run now, e.g. langgraph")},
                         {"thread_key", NameSchema("The framework's own key for the thread")},
                         {"conversation", ConversationSchema()}},
                        {"run_id", "framework", "thread_key"}),
           false, OnPorts(Open)},
      Tool{"run_mark_awaiting", "Mark a run awaiting",
           "Records that a run waits for something (a human's approval, a tool, a time). Refused for a run never "
           "opened.",
           ObjectSchema({{"run_id", RunId()}, {"awaiting", NameSchema("What the run waits for, e.g. approval")}},
                        {"run_id", "awaiting"}),
           false, OnPorts(MarkAwaiting)},
      Tool{"run_close", "Close a run",
           "Closes a run with a status; cost, when given, adds to the run's cost. Refused for a run never opened.",
           ObjectSchema({{"run_id", RunId()},
                         {"status", NameSchema("How it ended, e.g. done, failed, cancelled")},
                         {"cost", {{"type", "number"}, {"minimum", 0}, {"description", "Cost to add to the run's"}}}},
                        {"run_id", "status"}),
           false, OnPorts(Close)},
      Tool{"runs_in_flight", "List the runs in flight",
           "The runs not closed (running or awaiting), oldest first, with the framework driving each, what it "
           "awaits, its steps and cost: what a framework taking over must resume.",
           ObjectSchema(Json::object(), {}), true, OnPorts(InFlight)},
  };
}

}  // namespace capsule::mcp
