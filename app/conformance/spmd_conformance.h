// Runs the SPMD conformance corpus (../shared/conformance/xla/spmd format: NAME.hlo + NAME.notes):
// partitions each case with its num_partitions and checks that the expected collectives appear
// with the expected per-partition shapes (an equivalent reduce-scatter counts for all-reduce +
// dynamic-slice), the instruction-count checks, and the root's per-partition shape.
#pragma once

#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "core/ir/ir.h"
#include "core/base/status.h"

namespace shardscope {

struct SpmdConformanceOptions {
  // Called on the parsed module before partitioning when the case's pipeline runs sharding
  // propagation first (dot_handler_test cases). When empty those cases run without it.
  std::function<Status(Module&)> propagate;
  bool verbose = false;  // print every case, not just the failing ones
  // Also run the original and the SPMD program on virtual devices and compare (core evaluator),
  // for cases whose largest array has at most this many elements (0: never).
  int64_t verify_max_elements = 1 << 16;
};

struct SpmdCaseResult {
  std::string name;
  bool parsed = false;
  bool partitioned = false;
  bool supported = true;   // every op has a dedicated handler
  bool match = false;
  int64_t checks = 0, checks_held = 0;
  int verified = -1;  // 1 numerically equal, 0 mismatch, -1 not run (too large / unsupported op)
  std::vector<std::string> failures;     // one line per failed check
  std::vector<std::string> unsupported;  // opcodes without a dedicated handler
  std::string category;                  // dominant op kind: dot, convolution, gather, ...
};

struct SpmdConformanceSummary {
  int64_t total = 0, parsed = 0, partitioned = 0, supported = 0, matched = 0, matched_supported = 0;
  int64_t matched_supported_without_checks = 0;  // matched on numerical verification alone
  int64_t verified = 0, verify_mismatches = 0;
  std::vector<SpmdCaseResult> cases;
  std::map<std::string, int64_t> unsupported_ops;  // opcode -> number of cases
};

// Runs every case in `dir`; prints failing checks, a table by op kind, the unsupported ops, and as
// its last line exactly "spmd: H/T cases match (P%)" where T counts the cases whose ops are all
// supported.
Result<SpmdConformanceSummary> RunSpmdConformance(const std::string& dir, std::ostream& out,
                                                  const SpmdConformanceOptions& options = {});

// Exposed for tests: checks one partitioned module against a .notes text for one run block.
struct SpmdExpectations {
  int64_t num_partitions = 1;
  bool run_propagation = false;
  std::vector<std::string> lines;  // the expectation/check lines of the run
};
std::vector<SpmdExpectations> ParseSpmdNotes(const std::string& notes_text);
// Returns the failed checks (empty = all held); *checks receives how many were evaluated.
std::vector<std::string> CheckSpmdExpectations(const Module& spmd, const SpmdExpectations& e, int64_t* checks);

}  // namespace shardscope
