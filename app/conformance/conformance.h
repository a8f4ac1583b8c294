// Conformance: measure ShardScope against expectations kept as data outside the repository. One
// framework, a kind of case per corpus:
//
//   propagation  ../shared/conformance/xla/propagation: NAME.hlo + NAME.expect (+ .settings.json,
//                .expect_if_output_prop, .expect_rel): the sharding of each named instruction after
//                propagation; the rate counts checks ("propagation: H/T checks hold (P%)").
//   spmd         ../shared/conformance/xla/spmd: NAME.hlo + NAME.notes: the collectives and
//                per-partition shapes the partitioner must produce, each run also verified
//                numerically when small; the rate counts the cases whose ops are all supported
//                ("spmd: H/T cases match (P%)").
//   dumps        a folder of real HLO dumps (*.hlo, *.txt; docs/real-dumps.md): every stage of the
//                pipeline is a check (parse, round trip, propagate, partition, verify, simulate);
//                the rate counts dumps ("dumps: H/T dumps pass (P%)").
//
// The framework finds the cases of a directory (the files with the kind's extensions, sorted,
// filtered), runs each through its kind, and tallies one ConformanceReport: every check, every case
// (errors, notes, unsupported ops, numerical verification), the checks by op kind, the counted
// cases by kind, and the unsupported ops. FormatReport prints it the same way for every kind, with
// the summary line last.
//
// Adding a kind: a file with a `CaseKind XxxCases()` (case_kinds.h) and one line in the table in
// conformance.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace shardscope::conformance {

struct ConformanceOptions {
  std::string filter;                     // only cases whose name contains this (empty: all)
  bool verbose = false;                   // also list the cases that hold, and the notes
  int64_t verify_max_elements = 1 << 16;  // verify numerically when the largest array is at most this (0: never)
  std::string chip = "tpu-v5e";           // kinds that simulate: the chip preset
};

// One expectation of a case, held or not.
struct CheckResult {
  std::string case_name;
  std::string subject;  // what is checked: an instruction ("comp/name"), a relation, a collective
  std::string op_kind;  // opcode of the checked instruction or collective ("rel" for relations)
  std::string expected;
  std::string got;
  bool passed = false;
  std::string note;  // why it could not be evaluated, when it could not
};

struct CaseResult {
  std::string name;
  std::string op_kind;  // what kind of case it is (spmd: its dominant op), for rates over cases
  bool parsed = false;
  bool partitioned = false;              // every run partitioned (kinds that partition)
  std::vector<std::string> unsupported;  // ops or features the case needs that ShardScope lacks
  std::vector<std::string> errors;       // a step that failed (parse, propagation, partitioning)
  std::vector<std::string> notes;        // what was left out (listed with --verbose)
  int64_t checks = 0, passed = 0;
  int verified = -1;  // numerical verification: 1 equal, 0 mismatch, -1 not run

  bool counted = true;  // counted by a rate over cases (spmd: parsed and needing nothing unsupported)

  bool holds() const { return parsed && errors.empty() && passed == checks; }
};

enum class RateUnit { kChecks, kCases };

struct Tally {
  int64_t total = 0, passed = 0;
  double Rate() const { return total ? 100.0 * static_cast<double>(passed) / static_cast<double>(total) : 0.0; }
};

struct ConformanceReport {
  std::string kind;
  RateUnit unit = RateUnit::kChecks;
  bool partitions = false;  // the kind partitions (the report says how many cases did)
  std::vector<CaseResult> cases;
  std::vector<CheckResult> checks;

  // Tallied by the framework from cases and checks (Finish).
  std::string rate_phrase = "checks hold";  // "cases match", "dumps pass"
  Tally rate;                                // checks, or the counted cases
  std::map<std::string, Tally> by_op_kind;   // checks by op kind
  std::map<std::string, Tally> cases_by_kind;  // counted cases by kind (rates over cases)
  std::map<std::string, int64_t> unsupported_ops;  // op -> cases that need it
  int64_t cases_parsed = 0, cases_partitioned = 0, cases_holding = 0;
  int64_t cases_verified = 0, verify_mismatches = 0, holding_without_checks = 0;

  double Rate() const { return rate.Rate(); }
  // "KIND: H/T RATE_PHRASE (P%)": "propagation: 365/365 checks hold (100.0%)".
  std::string SummaryLine() const;
  // Computes the tallies above from cases and checks.
  void Finish();
};

// One line per failing check and per case error, the unsupported cases, the checks by op kind, the
// counted cases by kind (rates over cases), the unsupported ops, the case counts and, as the last
// line, SummaryLine(). With `verbose` also the cases that hold and the notes.
std::string FormatReport(const ConformanceReport& report, bool verbose = false);

// Names of the kinds RunConformance knows ("propagation", "spmd", "dumps").
std::vector<std::string> ConformanceKinds();
// Runs every case of `kind` in `dir`. An error when the kind is unknown or the directory holds no
// case of that kind.
Result<ConformanceReport> RunConformance(std::string_view kind, const std::string& dir,
                                         const ConformanceOptions& options = {});

}  // namespace shardscope::conformance
