// The property the pipeline targets check: a module propagates, partitions into an SPMD program
// that verifies and round-trips through HLO text, and that program computes what the module
// computes (numerical verification on virtual devices, for small shapes). Rejections with an
// error are counted (fuzz_target.h, Reach), not findings; an invalid SPMD program or a numerical
// mismatch is a finding.
#pragma once

#include <cstdint>
#include <memory>

#include "core/ir/ir.h"

namespace shardscope::fuzz {

struct PipelineLimits {
  int64_t max_devices = 16;
  int64_t max_instructions = 400;
  int64_t max_verify_elements = 4096;  // largest array the numerical verification runs on
};

// Takes the module (propagation changes it). `num_devices` is the mesh it is partitioned for.
void CheckPipeline(std::unique_ptr<Module> module, int64_t num_devices, const PipelineLimits& limits = {});

}  // namespace shardscope::fuzz
