// Target: propagate -> partition -> verify on generated modules (module_generator.h: the bytes are
// choices of ops, shapes, mesh and shardings), so nearly every input reaches the partitioner and
// the numerical verification. SHARDSCOPE_FUZZ_PRINT=1 prints each generated module (to turn a
// finding into an HLO reproducer).
#include <cstdio>
#include <cstdlib>

#include "core/ir/hlo_text.h"
#include "fuzz/fuzz_target.h"
#include "fuzz/module_generator.h"
#include "fuzz/pipeline_check.h"

using namespace shardscope;

void fuzz::TestOneInput(std::string_view bytes) {
  fuzz::ByteReader in(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  auto generated = fuzz::GenerateModule(in);
  if (!generated.ok()) fuzz::Finding("the generator built an invalid module", generated.error().message);
  fuzz::Reach("generated");
  static const bool print = [] {
    const char* env = std::getenv("SHARDSCOPE_FUZZ_PRINT");
    return env && *env && *env != '0';
  }();
  if (print) std::fprintf(stderr, "mesh %s\n%s\n", generated->mesh.ToString().c_str(), PrintHloModule(*generated->module).c_str());
  const int64_t devices = generated->mesh.num_devices();
  fuzz::CheckPipeline(std::move(generated->module), devices);
}
