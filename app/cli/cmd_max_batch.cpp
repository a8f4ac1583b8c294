// shardscope-cli max-batch MODEL --chip CHIP --mesh X=8,Y=16 [--cores-per-chip 2] [--set k=v ...]
//                          [--step N] [--limit N]
// shardscope-cli max-batch FILE.hlo --dim x:0 --chip CHIP --mesh ... (a module the zoo did not
// build: its dimension's class grows by multiples of its size, core/ir/scale_dims.h)
// The model's mesh settings follow --mesh (core/zoo/zoo.h, ZooOverridesForMesh).
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "app/cli/cli.h"
#include "app/cli/slice_options.h"
#include "app/pipeline/reproduce.h"
#include "core/ir/hlo_text.h"
#include "core/sharding/mesh.h"
#include "core/zoo/zoo.h"

namespace shardscope::cli {
namespace {

constexpr const char* kName = "max-batch";

std::string Gb(int64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GB", static_cast<double>(bytes) / 1e9);
  return b;
}

int Run(const std::vector<std::string>& arguments) {
  std::vector<std::string> args = arguments;
  pipeline::ReproduceColumn c;
  std::string kv;
  while (TakeOption(args, "set", &kv)) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return UsageError(kName, "--set expects KEY=VALUE, found '" + kv + "'");
    c.settings[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  std::string chip, mesh, cores = "1", step_text, limit_text = "1048576";
  if (!TakeOption(args, "chip", &chip) || !TakeOption(args, "mesh", &mesh)) {
    return UsageError(kName, "--chip and --mesh are required");
  }
  TakeOption(args, "cores-per-chip", &cores);
  const bool have_step = TakeOption(args, "step", &step_text);
  TakeOption(args, "limit", &limit_text);
  std::string dim;
  const bool have_dim = TakeOption(args, "dim", &dim);
  if (int rc = RejectUnknownOptions(kName, args)) return rc;
  if (args.size() != 1) return UsageError(kName, "expected one zoo model name (zoo list shows them) or FILE.hlo --dim PARAM:DIM");
  if (have_dim) {
    // A module from a file: the class of dimension `dim` grows by whole multiples of its size.
    if (!c.settings.empty()) return UsageError(kName, "--set is for zoo models; a module's batch is --dim PARAM:DIM");
    std::string text;
    if (!ReadFile(args[0], &text)) return 2;
    auto module = ParseHloModule(text, args[0]);
    if (!module.ok()) {
      std::cerr << module.error().message << "\n";
      return 2;
    }
    c.label = args[0];
    c.chip = chip;
    c.mesh = mesh;
    if (!ParseInt(cores, 1, &c.cores_per_chip)) return UsageError(kName, "--cores-per-chip must be 1 or 2");
    int64_t limit = 0;
    if (!ParseInt(limit_text, 1, &limit)) return UsageError(kName, "--limit takes a positive integer");
    auto r = pipeline::FindMaxBatchOfModule(**module, dim, c, limit);
    if (!r.ok()) {
      std::cerr << args[0] << ": error: " << r.error().message << "\n";
      return 2;
    }
    std::cout << "HBM per device: " << Gb(r->device_hbm_bytes) << "; " << r->simulations << " simulations (" << dim
              << " and the dimensions that must equal it, in multiples of its size)\n";
    if (r->batch == 0) {
      std::cout << "no size fits: " << dim << " = " << r->next_batch << " peaks at " << Gb(r->next_peak_bytes) << "\n";
    } else {
      std::cout << dim << " = " << r->batch << " fits: peak " << Gb(r->peak_memory_bytes) << "\n";
      if (r->reached_limit) std::cout << "every size up to the limit " << limit << " fits\n";
      else std::cout << dim << " = " << r->next_batch << " does not fit: peak " << Gb(r->next_peak_bytes) << "\n";
    }
    std::cout << "max_batch: " << r->batch << "\n";
    return 0;
  }
  c.model = args[0];
  c.label = args[0];
  c.chip = chip;
  c.mesh = mesh;
  if (!ParseInt(cores, 1, &c.cores_per_chip)) return UsageError(kName, "--cores-per-chip must be 1 or 2");
  auto parsed = DeviceMesh::Parse(mesh);
  if (!parsed.ok()) return UsageError(kName, "--mesh '" + mesh + "': " + parsed.error().message);
  // The model is built for the mesh given (mesh_x, mesh_y, stages, ... follow --mesh).
  auto fitted = ZooOverridesForMesh(c.model, c.settings, parsed.value());
  if (!fitted.ok()) return UsageError(kName, fitted.error().message);
  c.settings = std::move(fitted).value();
  // The data-parallel axis: X, the zoo's batch axis (a pipelined mesh is L,X,Y), else the first.
  int64_t step = parsed->axes().empty() ? 1 : parsed->axes()[0].size;
  for (const MeshAxis& a : parsed->axes())
    if (a.name == "X" || a.name == "x") step = a.size;
  if (have_step && !ParseInt(step_text, 1, &step)) return UsageError(kName, "--step takes a positive integer");
  int64_t limit = 0;
  if (!ParseInt(limit_text, 1, &limit)) return UsageError(kName, "--limit takes a positive integer");
  auto r = pipeline::FindMaxBatch(c, step, limit);
  if (!r.ok()) {
    std::cerr << "shardscope-cli " << kName << ": " << r.error().message << "\n";
    return 2;
  }
  std::cout << "HBM per device: " << Gb(r->device_hbm_bytes) << "; " << r->simulations << " simulations\n";
  if (r->per_setting > 1)
    std::cout << "global batch = " << r->per_setting << " microbatches x " << r->setting << " (the setting searched)\n";
  if (r->batch == 0) {
    std::cout << "no batch fits: batch " << r->next_batch << " peaks at " << Gb(r->next_peak_bytes) << "\n";
  } else {
    std::cout << "batch " << r->batch << " fits: peak " << Gb(r->peak_memory_bytes) << "\n";
    if (r->reached_limit) std::cout << "every " << r->setting << " up to the limit " << limit << " fits\n";
    else std::cout << "batch " << r->next_batch << " does not fit: peak " << Gb(r->next_peak_bytes) << "\n";
  }
  std::cout << "max_batch: " << r->batch << "\n";
  return 0;
}

const bool registered = Register(
    {kName, "MODEL --chip CHIP --mesh X=8,Y=16 [--cores-per-chip 2] [--set KEY=VALUE ...] [--step N] [--limit N] | FILE.hlo --dim PARAM:DIM --chip CHIP --mesh ... [--limit N]",
     "The largest global batch of a zoo model (or of a module's dimension PARAM:DIM, in multiples of its size) whose simulated peak memory fits the chip's HBM (last line: max_batch: B)",
     &Run});

}  // namespace
}  // namespace shardscope::cli
