// propagate -> partition -> verify, as the fuzz targets check it. See pipeline_check.h.
#include "fuzz/pipeline_check.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/eval/numeric_verify.h"
#include "core/ir/hlo_text.h"
#include "core/ir/scale_dims.h"
#include "core/ir/verifier.h"
#include "fuzz/fuzz_target.h"
#include "app/pipeline/partition.h"
#include "app/pipeline/propagate.h"

namespace shardscope::fuzz {

namespace {

// Ops whose result on virtual devices is not expected to equal the one-device result (random
// numbers, I/O, opaque calls) or that may run unboundedly long (loops).
bool Verifiable(const Module& m, int64_t max_elements) {
  for (const auto& c : m.computations()) {
    for (const auto& i : c->instructions()) {
      switch (i->opcode()) {
        case Opcode::kRng: case Opcode::kWhile: case Opcode::kInfeed: case Opcode::kOutfeed:
        case Opcode::kSend: case Opcode::kSendDone: case Opcode::kRecv: case Opcode::kRecvDone:
        case Opcode::kCustomCall: case Opcode::kGeneric: case Opcode::kAfterAll:
        case Opcode::kPartitionId: case Opcode::kReplicaId:
          return false;
        default:
          break;
      }
      if (IsCollective(i->opcode())) return false;
      if (i->shape().ElementCount() > max_elements) return false;
    }
  }
  return true;
}

std::string Describe(const Module& original, const Module& spmd, int64_t devices) {
  return "devices: " + std::to_string(devices) + "\n--- module after propagation ---\n" + PrintHloModule(original) +
         "--- SPMD program ---\n" + PrintHloModule(spmd);
}

}  // namespace

void CheckPipeline(std::unique_ptr<Module> module, int64_t num_devices, const PipelineLimits& limits) {
  if (num_devices < 1 || num_devices > limits.max_devices) return Reach("skipped: too many devices");
  if (module->instruction_count() > limits.max_instructions) return Reach("skipped: too many instructions");
  // As the CLI and the GUI run it (entry parameters and outputs may take shardings).
  auto propagated = pipeline::Propagate(*module);
  if (!propagated.ok()) return Reach("propagation: error");
  Reach("propagated");
  // Scaled by 2 (the simulation at other sizes, core/ir/scale_dims.h): an error or a module that
  // verifies, with its shardings still fitting — never a crash.
  if (auto scaled = ScaleModuleDims(*module, 2); scaled.ok()) {
    Reach("scaled by 2");
    if (Status valid = VerifyModule(*scaled->module); !valid.ok())
      Finding("the module scaled by 2 does not verify: " + valid.error().message, PrintHloModule(*module));
  } else {
    Reach("scaling: error");
  }
  SpmdOptions options;
  options.num_partitions = num_devices;
  auto partitioned = pipeline::Partition(*module, options);
  if (!partitioned.ok()) return Reach("partitioning: error");
  Reach("partitioned");
  const Module& spmd = *partitioned->module;
  if (Status valid = VerifyModule(spmd); !valid.ok()) {
    Finding("the SPMD program does not verify: " + valid.error().message, Describe(*module, spmd, num_devices));
  }
  const std::string text = PrintHloModule(spmd);
  auto reparsed = ParseHloModule(text, "<spmd>");
  if (!reparsed.ok()) Finding("the SPMD program's text does not parse: " + reparsed.error().message, text);
  std::string why;
  if (!ModulesEqual(spmd, **reparsed, &why)) Finding("the SPMD program's text round trip differs: " + why, text);

  if (!Verifiable(*module, limits.max_verify_elements)) return Reach("verification: skipped (op or size)");
  auto verified = VerifyPartitioned(*module, spmd, num_devices, /*seed=*/7);
  if (!verified.ok()) return Reach("verification: error");
  Reach("verified");
  if (!verified->match) {
    Finding("the SPMD program computes something else (max_abs_error " + std::to_string(verified->max_abs_error) + ")",
            verified->detail + "\n" + Describe(*module, spmd, num_devices));
  }
  Reach("verified equal");
}

}  // namespace shardscope::fuzz
