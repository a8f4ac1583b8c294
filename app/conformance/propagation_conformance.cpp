// The propagation kind of conformance case (conformance.h): NAME.hlo with NAME.expect (one line per
// instruction: name TAB expected sharding, or NONE), optional NAME.settings.json (is_spmd,
// propagation to output / parameters, cse_prevention_only), NAME.expect_if_output_prop (the same
// with output propagation on, when the settings make it a parameter) and NAME.expect_rel
// (a == b / a != b between two instructions' shardings). One check per line; the rate counts checks.
#include <algorithm>
#include <cctype>
#include <memory>

#include "app/conformance/case_kinds.h"
#include "core/base/json.h"
#include "core/ir/hlo_text.h"
#include "core/ir/ir.h"
#include "core/sharding/sharding.h"
#include "partitioner/propagation/sharding_propagation.h"

namespace shardscope::conformance {
namespace {

// A bool list setting; `param_value` substitutes "param:..." entries. Missing -> {false}.
std::vector<bool> BoolList(const json::Value* j, bool param_value, bool* uses_param) {
  std::vector<bool> out;
  if (j == nullptr) return {false};
  auto one = [&](const json::Value& e) {
    if (e.is_bool()) return e.boolean();
    if (e.is_string() && e.string().rfind("param:", 0) == 0) {
      if (uses_param) *uses_param = true;
      return param_value;
    }
    return false;
  };
  if (j->is_array()) {
    for (const auto& e : j->items()) out.push_back(one(e));
  } else {
    out.push_back(one(*j));
  }
  if (out.empty()) out.push_back(false);
  return out;
}

bool BoolSetting(const json::Value& settings, std::string_view key, bool fallback) {
  const json::Value* j = settings.Find(key);
  if (j && j->is_bool()) return j->boolean();
  return fallback;
}

std::string ShardingText(const Instruction* inst) {
  if (inst == nullptr) return "(missing)";
  return inst->has_sharding() ? inst->sharding()->ToString() : "NONE";
}

std::string Normalize(std::string s) {
  std::string out;
  bool space = false;
  for (char c : s) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      space = true;
      continue;
    }
    if (space && !out.empty()) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

// Semantic comparison of an expectation with an instruction's sharding.
bool Matches(const Instruction* inst, const std::string& expected_text, std::string* note) {
  if (inst == nullptr) {
    *note = "instruction not found";
    return false;
  }
  if (expected_text == "NONE") return !inst->has_sharding();
  auto parsed = HloSharding::Parse(expected_text);
  if (!parsed.ok()) {
    *note = "expected sharding does not parse: " + parsed.error().message;
    return false;
  }
  if (!inst->has_sharding()) return false;
  HloSharding expected = *parsed;
  HloSharding got = *inst->sharding();
  if (inst->shape().IsTuple()) {
    expected = expected.ExpandToTuple(inst->shape());
    got = got.ExpandToTuple(inst->shape());
  }
  return got == expected;
}

const Instruction* Find(const Module& m, const std::string& name) { return m.FindInstruction(name); }

Result<std::unique_ptr<Module>> ParseAndPropagate(const std::string& text, const std::string& name,
                                                  const json::Value& settings, bool output_param,
                                                  std::vector<std::string>* unsupported) {
  ParseOptions po;
  po.verify = false;
  auto parsed = ParseHloModule(text, name, po);
  if (!parsed.ok()) return parsed.error();
  std::unique_ptr<Module> module = std::move(*parsed);
  PropagationOptions options;
  options.is_spmd = BoolSetting(settings, "is_spmd", false);
  options.cse_prevention_only = BoolSetting(settings, "cse_prevention_only", false);
  options.propagate_to_output = BoolList(settings.Find("allow_spmd_sharding_propagation_to_output"), output_param, nullptr);
  options.propagate_to_parameters =
      BoolList(settings.Find("allow_spmd_sharding_propagation_to_parameters"), output_param, nullptr);
  ShardingPropagation propagation(options);
  auto report = propagation.Run(*module);
  if (!report.ok()) return report.error();
  for (const auto& op : report->unsupported_ops) {
    if (std::find(unsupported->begin(), unsupported->end(), op) == unsupported->end()) unsupported->push_back(op);
  }
  return module;
}

std::string OpKind(const Instruction* inst) {
  if (inst == nullptr) return "(missing)";
  if (inst->opcode() == Opcode::kCustomCall) return "custom-call";
  return inst->opcode_text().empty() ? std::string(OpcodeName(inst->opcode())) : inst->opcode_text();
}

void RunExpectations(const Module& module, const std::string& case_name, const std::vector<std::string>& lines,
                     std::vector<CheckResult>* checks) {
  for (const auto& line : lines) {
    auto parts = SplitTabs(line);
    CheckResult r;
    r.case_name = case_name;
    r.subject = parts[0];
    r.expected = parts.size() > 1 ? Normalize(parts[1]) : "";
    const Instruction* inst = Find(module, r.subject);
    r.op_kind = OpKind(inst);
    r.got = ShardingText(inst);
    r.passed = parts.size() > 1 && Matches(inst, r.expected, &r.note);
    checks->push_back(std::move(r));
  }
}

void RunRelations(const Module& module, const std::string& case_name, const std::vector<std::string>& lines,
                  std::vector<CheckResult>* checks) {
  for (const auto& line : lines) {
    auto parts = SplitTabs(line);
    CheckResult r;
    r.case_name = case_name;
    r.op_kind = "rel";
    if (parts.size() != 3) {
      r.note = "malformed relation";
      checks->push_back(std::move(r));
      continue;
    }
    r.subject = parts[0] + " " + parts[1] + " " + parts[2];
    const Instruction* a = Find(module, parts[0]);
    const Instruction* b = Find(module, parts[2]);
    r.expected = parts[1] == "==" ? "equal shardings" : "different shardings";
    if (!a || !b) {
      r.note = "instruction not found";
      r.got = "(missing)";
    } else {
      const bool equal = a->has_sharding() == b->has_sharding() &&
                         (!a->has_sharding() || *a->sharding() == *b->sharding());
      r.got = ShardingText(a) + " vs " + ShardingText(b);
      r.passed = (parts[1] == "==") == equal && (parts[1] != "==" || a->has_sharding());
    }
    checks->push_back(std::move(r));
  }
}

// Every line of the case fails with `why` (the case could not be run).
void FailAll(const std::string& case_name, const std::vector<std::string>& lines, bool relation, const std::string& why,
             std::vector<CheckResult>* checks) {
  for (const auto& line : lines) {
    auto parts = SplitTabs(line);
    CheckResult r;
    r.case_name = case_name;
    r.subject = relation && parts.size() == 3 ? parts[0] + " " + parts[1] + " " + parts[2] : parts[0];
    r.op_kind = relation ? "rel" : "(case error)";
    r.expected = relation ? "" : (parts.size() > 1 ? Normalize(parts[1]) : "");
    r.got = "(error)";
    r.note = why;
    checks->push_back(std::move(r));
  }
}

void RunCase(const CaseFiles& files, const ConformanceOptions&, CaseResult* c, std::vector<CheckResult>* checks) {
  const std::string& name = files.name;
  std::string hlo, expect, settings_text, if_output, rel;
  files.Read(".hlo", &hlo);
  files.Read(".expect", &expect);
  const bool has_if_output = files.Read(".expect_if_output_prop", &if_output);
  const bool has_rel = files.Read(".expect_rel", &rel);
  const auto expect_lines = NonEmptyLines(expect);
  const auto if_output_lines = has_if_output ? NonEmptyLines(if_output) : std::vector<std::string>{};
  const auto rel_lines = has_rel ? NonEmptyLines(rel) : std::vector<std::string>{};
  auto fail_all = [&](const std::string& why) {
    c->errors.push_back(why);
    FailAll(name, expect_lines, false, why, checks);
    FailAll(name, if_output_lines, false, why, checks);
    FailAll(name, rel_lines, true, why, checks);
  };

  json::Value settings;
  if (files.Read(".settings.json", &settings_text)) {
    auto j = json::Parse(settings_text);
    if (!j.ok()) return fail_all(name + ".settings.json:" + j.error().message);
    settings = std::move(*j);
  }
  bool uses_param = false;
  BoolList(settings.Find("allow_spmd_sharding_propagation_to_output"), false, &uses_param);
  BoolList(settings.Find("allow_spmd_sharding_propagation_to_parameters"), false, &uses_param);

  auto module = ParseAndPropagate(hlo, name + ".hlo", settings, false, &c->unsupported);
  if (!module.ok()) return fail_all(module.error().message);
  c->parsed = true;
  RunExpectations(**module, name, expect_lines, checks);
  RunRelations(**module, name, rel_lines, checks);
  if (if_output_lines.empty()) return;
  if (!uses_param) return RunExpectations(**module, name, if_output_lines, checks);
  auto with_output = ParseAndPropagate(hlo, name + ".hlo", settings, true, &c->unsupported);
  if (with_output.ok()) return RunExpectations(**with_output, name, if_output_lines, checks);
  for (const auto& line : if_output_lines) {
    CheckResult r;
    r.case_name = name;
    r.subject = SplitTabs(line)[0];
    r.op_kind = "(case error)";
    r.note = with_output.error().message;
    checks->push_back(std::move(r));
  }
}

}  // namespace

CaseKind PropagationCases() {
  return CaseKind{"propagation", {".hlo"}, RateUnit::kChecks, "checks hold", /*partitions=*/false, &RunCase};
}

}  // namespace shardscope::conformance
