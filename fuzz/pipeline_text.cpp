// Target: parse -> propagate -> partition -> verify on HLO text (mutated modules). Modules that
// parse and verify are partitioned for the devices they name; see pipeline_check.h for what is a
// finding.
#include <string_view>

#include "core/ir/hlo_text.h"
#include "fuzz/fuzz_target.h"
#include "fuzz/pipeline_check.h"

using namespace shardscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Reach("inputs");
  auto parsed = ParseHloModule(std::string_view(reinterpret_cast<const char*>(data), size), "in.hlo");
  if (!parsed.ok()) {
    fuzz::Reach("rejected by parser or verifier");
    return 0;
  }
  fuzz::Reach("parsed and verified");
  const int64_t devices = fuzz::DevicesOf(**parsed);
  fuzz::CheckPipeline(std::move(*parsed), devices);
  return 0;
}
