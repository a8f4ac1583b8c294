// Runs the pipeline over a folder of real HLO dumps (*.hlo, *.txt: what JAX, PyTorch/XLA and
// TensorFlow write with --xla_dump_to) and counts what holds at each stage:
//   parse       ParseHloModule with the verifier on (Shardy attributes imported)
//   round trip  print -> parse gives a structurally equal module, and the printed text is a fixpoint
//   kind        global program, or already an SPMD program (core/ir/spmd_program.h, with the evidence)
//   propagate   global programs: sharding propagation (inputs and outputs may take shardings)
//   partition   global programs with shardings: the SPMD partitioner; SPMD programs: recognised and
//               left unchanged
//   verify      partitioned here and small enough: original vs partitioned on virtual devices
//   simulate    the SPMD program (partitioned here, or the dump itself) on a modelled slice
// It is the "dumps" kind of conformance case (conformance.h): every stage that runs is a check, and
// the rate counts the dumps that pass every stage. docs/real-dumps.md describes the corpus.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace shardscope {

struct DumpConformanceOptions {
  std::string chip = "tpu-v5e";        // simulator chip preset
  int64_t verify_max_elements = 1 << 16;  // largest array for numerical verification (0: never)
};

struct DumpCaseResult {
  std::string file;
  std::string module_name;
  int64_t instructions = 0, fusions = 0;
  bool parsed = false, round_trip = false;
  std::string spmd_evidence;  // non-empty: already an SPMD program
  // 1 held, 0 failed, -1 not applicable / not run.
  int propagate = -1, partition = -1, verify = -1, simulate = -1;
  int64_t devices = 0;
  int64_t simulated_compute_ops = 0;  // kernels in the compute model
  int64_t simulated_collectives = 0;  // collectives the simulator timed
  std::vector<std::string> warnings;
  std::vector<std::string> failures;  // "stage: reason"
  bool passed() const { return failures.empty(); }
};

// One dump, from its text (exposed for tests).
DumpCaseResult RunDumpCase(const std::string& name, const std::string& text, const DumpConformanceOptions& options);

}  // namespace shardscope
