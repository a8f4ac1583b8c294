// Target: parse -> propagate -> partition -> verify on HLO text (mutated modules). A module that
// parses and verifies is partitioned for the mesh the GUI would guess for it (pipeline::GuessMesh);
// see pipeline_check.h for what is a finding.
#include <string>

#include "app/pipeline/sources.h"
#include "fuzz/fuzz_target.h"
#include "fuzz/pipeline_check.h"

using namespace shardscope;

void fuzz::TestOneInput(std::string_view text) {
  auto model = pipeline::ParseModel(std::string(text), "in.hlo");
  if (!model.ok()) {
    fuzz::Reach("rejected by parser or verifier");
    return;
  }
  fuzz::Reach("parsed and verified");
  const int64_t devices = model->mesh.num_devices();
  fuzz::CheckPipeline(std::move(model->module), devices);
}
