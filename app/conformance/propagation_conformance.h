// Conformance runners: measure ShardScope against XLA's own test expectations kept as data in
// ../shared/conformance (see its README). Each kind ("propagation" today; "spmd" is meant to be
// added next to it) reads a directory of cases and produces a ConformanceReport: one result per
// check, a breakdown by op kind, and the cases that need an unsupported op or feature.
//
// Adding a kind: write `Result<ConformanceReport> RunXxxConformance(const std::string& dir,
// const ConformanceOptions&)` and either add it to the table in conformance.cpp or call
// RegisterConformanceRunner("xxx", &RunXxxConformance) before RunConformance.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace shardscope::conformance {

struct ConformanceOptions {
  // Only cases whose name contains this substring (empty: all).
  std::string filter;
};

struct CheckResult {
  std::string case_name;
  std::string instruction;  // as named in the expectation ("comp/name" when qualified)
  std::string op_kind;      // opcode of the checked instruction ("rel" for relation checks)
  std::string expected;
  std::string got;
  bool passed = false;
  std::string note;         // why it could not be evaluated, when it could not
};

struct CaseResult {
  std::string name;
  bool parsed = false;
  std::string error;                     // parse / run error
  int64_t checks = 0, passed = 0;
  std::vector<std::string> unsupported;  // ops or features the case needs that we lack
};

struct KindTally {
  int64_t checks = 0, passed = 0;
};

struct ConformanceReport {
  std::string kind;  // "propagation"
  std::vector<CaseResult> cases;
  std::vector<CheckResult> checks;
  std::map<std::string, KindTally> by_op_kind;
  int64_t total_checks = 0, passed_checks = 0;
  int64_t cases_parsed = 0;

  double Rate() const { return total_checks ? 100.0 * static_cast<double>(passed_checks) / static_cast<double>(total_checks) : 0.0; }
  // "propagation: H/T checks hold (P%)"
  std::string SummaryLine() const;
};

// Full text: one line per failing check (case, instruction, expected, got), the unsupported
// cases, a table by op kind and, as the last line, SummaryLine().
std::string FormatReport(const ConformanceReport& report);

// Runs every propagation case in `dir` (a directory of <name>.hlo / .expect / .settings.json ...).
Result<ConformanceReport> RunPropagationConformance(const std::string& dir, const ConformanceOptions& options = {});

using ConformanceRunner = Result<ConformanceReport> (*)(const std::string& dir, const ConformanceOptions& options);
// Makes `kind` available to RunConformance (replaces an existing runner of that name).
void RegisterConformanceRunner(std::string kind, ConformanceRunner runner);
// Names of the kinds RunConformance knows.
std::vector<std::string> ConformanceKinds();
Result<ConformanceReport> RunConformance(std::string_view kind, const std::string& dir,
                                         const ConformanceOptions& options = {});

}  // namespace shardscope::conformance
