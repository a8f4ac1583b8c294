// The spmd kind of conformance case (conformance.h), XLA's partitioner tests as data
// (../shared/conformance/xla/spmd: NAME.hlo + NAME.notes): each run of a case partitions the module
// with its num_partitions (after sharding propagation when the case's pipeline has it) and checks
// that the expected collectives appear with the expected per-partition shapes (an equivalent
// reduce-scatter counts for all-reduce + dynamic-slice), the instruction counts, and the root's
// per-partition shape; small cases are also verified numerically. The rate counts the cases whose
// ops all have a dedicated handler.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "app/conformance/conformance.h"
#include "core/ir/ir.h"

namespace shardscope::conformance {

// The expectations of one run block of a .notes file.
struct SpmdExpectations {
  int64_t num_partitions = 1;
  bool run_propagation = false;
  std::vector<std::string> lines;  // the expectation/check lines of the run
};
std::vector<SpmdExpectations> ParseSpmdNotes(const std::string& notes_text);

// Checks one partitioned module against one run's expectations: one CheckResult per expectation
// line that can be evaluated (case_name left empty).
std::vector<CheckResult> CheckSpmdExpectations(const Module& spmd, const SpmdExpectations& e);

}  // namespace shardscope::conformance
