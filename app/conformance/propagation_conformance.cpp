// Propagation conformance runner. See conformance.h.
#include "app/conformance/propagation_conformance.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>

#include "core/base/json.h"
#include "core/ir/hlo_text.h"
#include "core/ir/ir.h"
#include "core/sharding/sharding.h"
#include "partitioner/propagation/sharding_propagation.h"

namespace shardscope::conformance {
namespace {

namespace fs = std::filesystem;

bool ReadText(const fs::path& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

std::vector<std::string> SplitTabs(const std::string& line) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t t = line.find('\t', start);
    parts.push_back(line.substr(start, t == std::string::npos ? std::string::npos : t - start));
    if (t == std::string::npos) break;
    start = t + 1;
  }
  return parts;
}

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

struct RunConfig {
  bool output_prop = false;  // value substituted for "param:allow_root_sharding_propagation"
};

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

void Record(ConformanceReport* report, CaseResult* c, CheckResult r) {
  ++c->checks;
  ++report->total_checks;
  auto& tally = report->by_op_kind[r.op_kind];
  ++tally.checks;
  if (r.passed) {
    ++c->passed;
    ++report->passed_checks;
    ++tally.passed;
  }
  report->checks.push_back(std::move(r));
}

std::string OpKind(const Instruction* inst) {
  if (inst == nullptr) return "(missing)";
  if (inst->opcode() == Opcode::kCustomCall) return "custom-call";
  return inst->opcode_text().empty() ? std::string(OpcodeName(inst->opcode())) : inst->opcode_text();
}

void RunExpectations(const Module& module, const std::string& case_name, const std::vector<std::string>& lines,
                     ConformanceReport* report, CaseResult* c) {
  for (const auto& line : lines) {
    auto parts = SplitTabs(line);
    CheckResult r;
    r.case_name = case_name;
    r.instruction = parts[0];
    r.expected = parts.size() > 1 ? Normalize(parts[1]) : "";
    const Instruction* inst = Find(module, r.instruction);
    r.op_kind = OpKind(inst);
    r.got = ShardingText(inst);
    r.passed = parts.size() > 1 && Matches(inst, r.expected, &r.note);
    Record(report, c, std::move(r));
  }
}

void RunRelations(const Module& module, const std::string& case_name, const std::vector<std::string>& lines,
                  ConformanceReport* report, CaseResult* c) {
  for (const auto& line : lines) {
    auto parts = SplitTabs(line);
    CheckResult r;
    r.case_name = case_name;
    r.op_kind = "rel";
    if (parts.size() != 3) {
      r.note = "malformed relation";
      Record(report, c, std::move(r));
      continue;
    }
    r.instruction = parts[0] + " " + parts[1] + " " + parts[2];
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
    Record(report, c, std::move(r));
  }
}

std::mutex& RunnerMutex() {
  static std::mutex m;
  return m;
}

std::map<std::string, ConformanceRunner>& Runners() {
  static std::map<std::string, ConformanceRunner> runners = {
      {"propagation", &RunPropagationConformance},
  };
  return runners;
}

}  // namespace

std::string ConformanceReport::SummaryLine() const {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%s: %lld/%lld checks hold (%.1f%%)", kind.c_str(),
                static_cast<long long>(passed_checks), static_cast<long long>(total_checks), Rate());
  return buf;
}

std::string FormatReport(const ConformanceReport& report) {
  std::string out;
  for (const auto& c : report.checks) {
    if (c.passed) continue;
    out += "FAIL " + c.case_name + "  " + c.instruction + "  expected " + c.expected + "  got " + c.got;
    if (!c.note.empty()) out += "  (" + c.note + ")";
    out += "\n";
  }
  for (const auto& c : report.cases) {
    if (!c.error.empty()) out += "ERROR " + c.name + ": " + c.error + "\n";
    if (!c.unsupported.empty()) {
      out += "UNSUPPORTED " + c.name + ":";
      for (const auto& u : c.unsupported) out += " " + u;
      out += " (" + std::to_string(c.passed) + "/" + std::to_string(c.checks) + " checks hold)\n";
    }
  }
  out += "\nby op kind:\n";
  char buf[160];
  std::snprintf(buf, sizeof(buf), "  %-26s %8s %8s %8s\n", "op", "checks", "hold", "rate");
  out += buf;
  for (const auto& [kind, t] : report.by_op_kind) {
    std::snprintf(buf, sizeof(buf), "  %-26s %8lld %8lld %7.1f%%\n", kind.c_str(), static_cast<long long>(t.checks),
                  static_cast<long long>(t.passed),
                  t.checks ? 100.0 * static_cast<double>(t.passed) / static_cast<double>(t.checks) : 0.0);
    out += buf;
  }
  std::snprintf(buf, sizeof(buf), "cases: %zu, parsed: %lld\n", report.cases.size(),
                static_cast<long long>(report.cases_parsed));
  out += buf;
  out += report.SummaryLine() + "\n";
  return out;
}

Result<ConformanceReport> RunPropagationConformance(const std::string& dir, const ConformanceOptions& options) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Error("conformance directory not found: " + dir);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".hlo") names.push_back(entry.path().stem().string());
  }
  if (ec) return Error("cannot list " + dir + ": " + ec.message());
  std::sort(names.begin(), names.end());
  ConformanceReport report;
  report.kind = "propagation";
  for (const auto& name : names) {
    if (!options.filter.empty() && name.find(options.filter) == std::string::npos) continue;
    const fs::path base = fs::path(dir) / name;
    CaseResult c;
    c.name = name;
    std::string hlo, expect, settings_text, if_output, rel;
    ReadText(base.string() + ".hlo", &hlo);
    ReadText(base.string() + ".expect", &expect);
    const bool has_if_output = ReadText(base.string() + ".expect_if_output_prop", &if_output);
    const bool has_rel = ReadText(base.string() + ".expect_rel", &rel);
    json::Value settings;
    std::string settings_error;
    if (ReadText(base.string() + ".settings.json", &settings_text)) {
      auto j = json::Parse(settings_text);
      if (j.ok()) settings = std::move(*j);
      else settings_error = name + ".settings.json:" + j.error().message;
    }
    const auto expect_lines = Lines(expect);
    const auto if_output_lines = has_if_output ? Lines(if_output) : std::vector<std::string>{};
    const auto rel_lines = has_rel ? Lines(rel) : std::vector<std::string>{};
    bool uses_param = false;
    BoolList(settings.Find("allow_spmd_sharding_propagation_to_output"), false, &uses_param);
    BoolList(settings.Find("allow_spmd_sharding_propagation_to_parameters"), false, &uses_param);

    auto fail_all = [&](const std::string& why) {
      c.error = why;
      auto add = [&](const std::vector<std::string>& lines, bool relation) {
        for (const auto& line : lines) {
          auto parts = SplitTabs(line);
          CheckResult r;
          r.case_name = name;
          r.instruction = relation && parts.size() == 3 ? parts[0] + " " + parts[1] + " " + parts[2] : parts[0];
          r.op_kind = relation ? "rel" : "(case error)";
          r.expected = relation ? "" : (parts.size() > 1 ? Normalize(parts[1]) : "");
          r.got = "(error)";
          r.note = why;
          Record(&report, &c, std::move(r));
        }
      };
      add(expect_lines, false);
      add(if_output_lines, false);
      add(rel_lines, true);
    };

    if (!settings_error.empty()) {
      fail_all(settings_error);
      report.cases.push_back(std::move(c));
      continue;
    }
    auto module = ParseAndPropagate(hlo, name + ".hlo", settings, false, &c.unsupported);
    if (!module.ok()) {
      fail_all(module.error().message);
      report.cases.push_back(std::move(c));
      continue;
    }
    c.parsed = true;
    ++report.cases_parsed;
    RunExpectations(**module, name, expect_lines, &report, &c);
    RunRelations(**module, name, rel_lines, &report, &c);
    if (!if_output_lines.empty()) {
      if (uses_param) {
        auto with_output = ParseAndPropagate(hlo, name + ".hlo", settings, true, &c.unsupported);
        if (with_output.ok()) {
          RunExpectations(**with_output, name, if_output_lines, &report, &c);
        } else {
          for (const auto& line : if_output_lines) {
            CheckResult r;
            r.case_name = name;
            r.instruction = SplitTabs(line)[0];
            r.op_kind = "(case error)";
            r.note = with_output.error().message;
            Record(&report, &c, std::move(r));
          }
        }
      } else {
        RunExpectations(**module, name, if_output_lines, &report, &c);
      }
    }
    report.cases.push_back(std::move(c));
  }
  return report;
}

void RegisterConformanceRunner(std::string kind, ConformanceRunner runner) {
  std::lock_guard<std::mutex> lock(RunnerMutex());
  Runners()[std::move(kind)] = runner;
}

std::vector<std::string> ConformanceKinds() {
  std::lock_guard<std::mutex> lock(RunnerMutex());
  std::vector<std::string> kinds;
  for (const auto& [k, v] : Runners()) kinds.push_back(k);
  return kinds;
}

Result<ConformanceReport> RunConformance(std::string_view kind, const std::string& dir,
                                         const ConformanceOptions& options) {
  ConformanceRunner runner = nullptr;
  {
    std::lock_guard<std::mutex> lock(RunnerMutex());
    auto it = Runners().find(std::string(kind));
    if (it != Runners().end()) runner = it->second;
  }
  if (runner == nullptr) {
    std::string known;
    for (const auto& k : ConformanceKinds()) known += (known.empty() ? "" : ", ") + k;
    return Error("unknown conformance kind '" + std::string(kind) + "' (known: " + known + ")");
  }
  return runner(dir, options);
}

}  // namespace shardscope::conformance
